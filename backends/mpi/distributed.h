// What the MPI backend adds to the OpenMP lowering of one rank (docs/backends.md, "MPI"):
// the partition this rank holds, the halo exchanges that keep ghost rows equal to their owners'
// rows, the reverse exchange that returns ghost-row partial sums to their owners, the weight
// gradient all-reduce issued as soon as a gradient is complete, and global counts and sums.
//
// Local numbering (morphgen.partition.layout): owned nodes first, then ghosts grouped by the
// rank that owns them, so the halo received from one peer is one contiguous slice of rows and
// needs no unpacking.  The local CSR holds every in-edge of every owned node (in global edge
// order inside a row), ghosts have no in-edges here.  Node-wise kernels compute owned rows;
// ghost rows are filled by halo_forward (or computed where every rank can: see the emitter),
// and the partial sums a transposed aggregation leaves in ghost rows go back to their owners.
#ifndef MORPHGEN_MPI_DISTRIBUTED_H
#define MORPHGEN_MPI_DISTRIBUTED_H

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "context.h"
#include "kernels/dropout.h"
#include "kernels/loss.h"

namespace mg {
namespace mpi {

inline void check_mpi(int rc, const char *what) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    throw Error(std::string("MPI ") + what + ": " + std::string(text, size_t(len)));
}

// MPI counts are int: a message of more floats than that is refused, not truncated.
inline int message_count(int64_t floats, const char *what) {
    if (floats > INT_MAX) throw Error(std::string(what) + ": a message of more than 2^31 - 1 floats");
    return int(floats);
}

struct Partition {
    MPI_Comm comm = MPI_COMM_NULL;
    int rank = 0, size = 1;
    bool set = false;
    int64_t num_owned = 0, num_local = 0, global_nodes = 0;
    std::vector<int> peers;                    // ranks this rank exchanges rows with
    std::vector<int64_t> send_ptr, send_idx;   // per peer k: owned rows send_idx[send_ptr[k] .. send_ptr[k+1])
    std::vector<int64_t> recv_ptr;             // per peer k: ghost rows [recv_ptr[k], recv_ptr[k+1])
    std::vector<int64_t> node_gid, edge_gid;   // global node id of each local row, global CSR position of each edge
    std::vector<float> in_degree, out_degree;  // global degrees of the local nodes
    std::vector<int64_t> src_gid, dst_gid;     // global ids of each local edge's ends (featureless input)
    std::vector<float> pack;                   // staging for rows that are not contiguous
    // Measured per run (reported by the timers and mg_read_timer): bytes of halo payload sent.
    double halo_bytes = 0;

    int num_peers() const { return int(peers.size()); }
    // Peer k's share of the halo: the packed rows sent to it, the ghost rows received from it.
    int64_t sent_first(int k) const { return send_ptr[size_t(k)]; }
    int64_t sent_rows(int k) const { return send_ptr[size_t(k) + 1] - send_ptr[size_t(k)]; }
    int64_t ghost_first(int k) const { return recv_ptr[size_t(k)]; }
    int64_t ghost_rows(int k) const { return recv_ptr[size_t(k) + 1] - recv_ptr[size_t(k)]; }
};

// The requests of one exchange: one per non-empty message, all waited for together.
class Exchange {
  public:
    explicit Exchange(Partition &p) : p_(p) {}
    void wait() {
        if (!reqs_.empty())
            check_mpi(MPI_Waitall(int(reqs_.size()), reqs_.data(), MPI_STATUSES_IGNORE), "halo wait");
        reqs_.clear();
    }
    void recv(float *dst, int64_t floats, int peer, int tag) {
        if (floats == 0) return;
        reqs_.emplace_back();
        check_mpi(MPI_Irecv(dst, message_count(floats, "halo"), MPI_FLOAT, peer, tag, p_.comm, &reqs_.back()),
                  "halo receive");
    }
    void send(const float *src, int64_t floats, int peer, int tag) {
        if (floats == 0) return;
        reqs_.emplace_back();
        p_.halo_bytes += 4.0 * double(floats);
        check_mpi(MPI_Isend(src, message_count(floats, "halo"), MPI_FLOAT, peer, tag, p_.comm, &reqs_.back()),
                  "halo send");
    }

  private:
    Partition &p_;
    std::vector<MPI_Request> reqs_;
};

// Packs the owned rows every peer needs, one block per peer, in peer order.
inline void pack_rows(Partition &p, const float *X, int64_t F) {
    const int64_t n = p.send_ptr.back();
    p.pack.resize(size_t(n * F));
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < n; ++k)
        std::memcpy(p.pack.data() + k * F, X + p.send_idx[size_t(k)] * F, sizeof(float) * size_t(F));
}

constexpr int kTagForward = 101, kTagReverse = 102;

// Ghost rows of X (owned + ghost rows, F wide) receive their owners' current rows.  The bytes
// this rank sent are added to `sent` (the exchange's timer: measured, not estimated).
inline void halo_forward(Partition &p, float *X, int64_t F, Timer &sent) {
    if (p.size == 1) return;
    const double before = p.halo_bytes;
    pack_rows(p, X, F);
    Exchange ex(p);
    for (int k = 0; k < p.num_peers(); ++k) {
        ex.recv(X + p.ghost_first(k) * F, p.ghost_rows(k) * F, p.peers[size_t(k)], kTagForward);
        ex.send(p.pack.data() + p.sent_first(k) * F, p.sent_rows(k) * F, p.peers[size_t(k)], kTagForward);
    }
    ex.wait();
    sent.bytes += p.halo_bytes - before;
}

inline void zero_ghost_rows(const Partition &p, float *X, int64_t F) {
    const int64_t floats = (p.num_local - p.num_owned) * F;
    if (floats > 0) std::memset(X + p.num_owned * F, 0, sizeof(float) * size_t(floats));
}

// The transpose of halo_forward: each ghost row of X holds a partial sum that belongs to its
// owner; the owners add them (peers in rank order, so the sum is the same on every run) and
// the ghost rows become zero.  The bytes this rank sent are added to `sent`.
inline void halo_reverse(Partition &p, float *X, int64_t F, Timer &sent) {
    const double before = p.halo_bytes;
    if (p.size > 1) {
        p.pack.resize(size_t(p.send_ptr.back() * F));
        Exchange ex(p);
        for (int k = 0; k < p.num_peers(); ++k) {
            ex.recv(p.pack.data() + p.sent_first(k) * F, p.sent_rows(k) * F, p.peers[size_t(k)], kTagReverse);
            ex.send(X + p.ghost_first(k) * F, p.ghost_rows(k) * F, p.peers[size_t(k)], kTagReverse);
        }
        ex.wait();
        for (int k = 0; k < p.num_peers(); ++k) {   // a node may be a ghost on several peers
#pragma omp parallel for schedule(static)
            for (int64_t j = p.sent_first(k); j < p.sent_first(k) + p.sent_rows(k); ++j) {
                float *row = X + p.send_idx[size_t(j)] * F;
                const float *add = p.pack.data() + j * F;
                for (int64_t c = 0; c < F; ++c) row[c] += add[c];
            }
        }
    }
    zero_ghost_rows(p, X, F);
    sent.bytes += p.halo_bytes - before;
}

// Weight gradients: each is handed to MPI_Iallreduce as soon as the backward has produced it,
// the backward goes on while it travels, and the optimizer waits for it before its step.
//
// What the pipelining hides is measured, not assumed.  A wait is partly skew (a peer has not
// yet posted its gradient: no communication could have run) and partly communication that no
// computation covered.  Each reduction therefore carries its last poster's time (a MAX
// reduction of the post times, on a clock every rank set to zero at the same barrier), and a
// wait counts as exposed only the part after every rank had posted: exposed = end - max(begin,
// last post).  The rank that posted last runs the critical path; its exposure is the
// communication the epoch paid for.
class GradientReduce {
  public:
    void resize(Partition &p, int n) {
        reqs_.assign(size_t(2 * n), MPI_REQUEST_NULL);
        posted_.assign(size_t(n), 0.0);
        last_post_.assign(size_t(n), 0.0);
        if (p.size > 1) check_mpi(MPI_Barrier(p.comm), "clock barrier");
        origin_ = MPI_Wtime();             // the same instant on every rank, to the barrier's skew
    }
    void start(Partition &p, int i, float *g, int64_t n) {
        if (p.size == 1) return;
        posted_[size_t(i)] = MPI_Wtime() - origin_;
        check_mpi(MPI_Iallreduce(MPI_IN_PLACE, g, message_count(n, "gradient all-reduce"), MPI_FLOAT, MPI_SUM,
                                 p.comm, &reqs_[size_t(2 * i)]),
                  "gradient all-reduce");
        check_mpi(MPI_Iallreduce(&posted_[size_t(i)], &last_post_[size_t(i)], 1, MPI_DOUBLE, MPI_MAX, p.comm,
                                 &reqs_[size_t(2 * i + 1)]),
                  "gradient all-reduce");
    }
    // Lets the library move the reductions in flight along (MPI progresses inside MPI calls).
    void progress() {
        int done = 0;
        for (auto &r : reqs_)
            if (r != MPI_REQUEST_NULL) MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    }
    // Waits for gradient i; the communication that was not hidden goes into `exposed`.
    void wait(int i, Timer &exposed) {
        exposed.calls += 1;
        MPI_Request *r = &reqs_[size_t(2 * i)];
        if (r[0] == MPI_REQUEST_NULL && r[1] == MPI_REQUEST_NULL) return;   // done behind the backward
        const double begin = MPI_Wtime() - origin_;
        check_mpi(MPI_Waitall(2, r, MPI_STATUSES_IGNORE), "gradient all-reduce");
        const double end = MPI_Wtime() - origin_;
        exposed.seconds += std::max(0.0, end - std::max(begin, last_post_[size_t(i)]));
    }

  private:
    std::vector<MPI_Request> reqs_;        // per gradient: the sum, then its last post time
    std::vector<double> posted_, last_post_;
    double origin_ = 0;
};

inline double sum_all(Partition &p, double local) {
    if (p.size == 1) return local;
    double total = 0;
    check_mpi(MPI_Allreduce(&local, &total, 1, MPI_DOUBLE, MPI_SUM, p.comm), "sum");
    return total;
}

// Per-feature sums over every rank, in place and in double (batch norm's statistics, summed as
// one process sums them): the functor the op layer's `across` parameter takes.
struct AcrossRanks {
    Partition &p;
    void operator()(double *v, int64_t n) const {
        if (p.size == 1 || n <= 0) return;
        check_mpi(MPI_Allreduce(MPI_IN_PLACE, v, message_count(n, "feature statistics"), MPI_DOUBLE, MPI_SUM, p.comm),
                  "feature statistics");
    }
};

inline int64_t sum_all(Partition &p, int64_t local) {
    if (p.size == 1) return local;
    int64_t total = 0;
    check_mpi(MPI_Allreduce(&local, &total, 1, MPI_INT64_T, MPI_SUM, p.comm), "sum");
    return total;
}

inline void build_edge_end_ids(Partition &p, const GraphView &g) {
    p.src_gid.resize(size_t(g.num_edges));
    p.dst_gid.resize(size_t(g.num_edges));
    for (int64_t v = 0; v < g.num_nodes; ++v)
        for (int64_t e = g.indptr[v]; e < g.indptr[v + 1]; ++e) {
            p.src_gid[size_t(e)] = p.node_gid[size_t(g.col[e])];
            p.dst_gid[size_t(e)] = p.node_gid[size_t(v)];
        }
}

inline void global_degree(const Partition &p, bool in, float *out) {
    const std::vector<float> &d = in ? p.in_degree : p.out_degree;
    std::memcpy(out, d.data(), sizeof(float) * d.size());
}

// Inverted dropout whose mask is keyed by global ids: element (r, c) of a [rows, F] value uses
// the index ids[r] * F + c, the index one process gives it, so every rank count drops the same
// elements.  ids == nullptr: a value that is not split over ranks (weights, scalars).  The
// backward applies the same mask to the gradient.
inline void dropout_rows(bool training, const float *X, float *Y, int64_t rows, int64_t F, const int64_t *ids,
                         float p, DropoutKey key, bool backward) {
    if (!(p > 0.f) || (!training && !backward)) {
        if (X != Y) std::memcpy(Y, X, sizeof(float) * size_t(rows * F));
    } else {
        dropout_rows_fwd(X, Y, rows, F, ids, p, key);
    }
}

// Loss: this rank's share of the mean over the global train count (the shares add up).
inline float cross_entropy(const float *logits, const int64_t *labels, const uint8_t *mask, int64_t rows,
                           int64_t C, int64_t global_count, float *dlogits) {
    return softmax_cross_entropy(logits, labels, mask, rows, C, dlogits, global_count);
}

inline double accuracy(Partition &p, const float *logits, const int64_t *labels, const uint8_t *mask,
                       int64_t rows, int64_t C, int64_t global_count) {
    const int64_t correct = sum_all(p, int64_t(count_correct(logits, labels, mask, rows, C)));
    return global_count ? double(correct) / double(global_count) : 0.0;
}

}  // namespace mpi
}  // namespace mg
#endif

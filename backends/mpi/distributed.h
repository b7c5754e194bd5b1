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
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "context.h"
#include "kernels/dropout.h"
#include "kernels/link.h"
#include "kernels/typed_linear.h"
#include "kernels/loss.h"
#include "kernels/optim.h"

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

// MPICH moves a nonblocking transfer along only inside MPI calls made by the program: a
// gradient all-reduce posted during the backward, or a halo posted before an aggregation,
// would travel only once the rank waits for it, and nothing would overlap.  This thread makes
// those calls while the rank computes:
//  - requests handed to it with watch() are completed by it (MPI_Testall), and the rank waits
//    for them with await(); the rank never touches them meanwhile, as MPI requires;
//  - while an exchange that the rank completes itself is in flight (hold() .. release()), it
//    runs MPI's progress engine (a probe for a tag nobody sends).
// Between calls it pauses `MORPHGEN_MPI_POLL_US` microseconds (default 50; 0: no thread), and
// it sleeps on a condition variable when nothing is in flight, so an epoch without
// communication pays nothing.  While the rank waits in await() it polls without pausing.  It
// needs MPI_THREAD_MULTIPLE (mpi4py's default); without it the rank completes everything in
// its own waits, as it does with no thread.
class ProgressThread {
  public:
    ~ProgressThread() { stop(); }
    bool running() const { return thread_.joinable(); }
    void start(MPI_Comm comm) {
        int level = MPI_THREAD_SINGLE;
        MPI_Query_thread(&level);
        const long us = poll_interval_us();
        if (running() || level < MPI_THREAD_MULTIPLE || us <= 0) return;
        comm_ = comm;
        stop_ = false;
        thread_ = std::thread([this, us] { loop(us); });
    }
    // Joins the thread once what it was completing is complete.
    void stop() {
        if (!running()) return;
        {
            std::lock_guard<std::mutex> lock(mu_);
            stop_ = true;
        }
        work_.notify_one();
        thread_.join();
    }
    void hold() {
        {
            std::lock_guard<std::mutex> lock(mu_);
            ++in_flight_;
        }
        work_.notify_one();
    }
    void release() {
        std::lock_guard<std::mutex> lock(mu_);
        in_flight_ = std::max(0, in_flight_ - 1);
    }
    // The thread completes reqs[0 .. count) and then sets *done.
    void watch(MPI_Request *reqs, int count, bool *done) {
        {
            std::lock_guard<std::mutex> lock(mu_);
            *done = false;
            watched_.push_back({reqs, count, done});
        }
        work_.notify_one();
    }
    void await(const bool *done) {
        std::unique_lock<std::mutex> lock(mu_);
        ++waiting_;
        work_.notify_one();
        finished_.wait(lock, [done] { return *done; });
        --waiting_;
    }

  private:
    struct Watched {
        MPI_Request *reqs;
        int count;
        bool *done;
    };
    static long poll_interval_us() {
        const char *env = std::getenv("MORPHGEN_MPI_POLL_US");
        return env && *env ? std::strtol(env, nullptr, 10) : 50;
    }
    void loop(long us) {
        std::unique_lock<std::mutex> lock(mu_);
        for (;;) {
            work_.wait(lock, [this] { return stop_ || in_flight_ > 0 || !watched_.empty(); });
            if (stop_ && watched_.empty()) return;
            const std::vector<Watched> batch(watched_);
            lock.unlock();
            std::vector<bool *> completed;
            for (const Watched &w : batch) {
                int flag = 0;
                if (MPI_Testall(w.count, w.reqs, &flag, MPI_STATUSES_IGNORE) != MPI_SUCCESS) {
                    std::fprintf(stderr, "morphgen: a gradient all-reduce failed\n");
                    MPI_Abort(MPI_COMM_WORLD, 3);   // the rank is stuck otherwise: end the job
                }
                if (flag) completed.push_back(w.done);
            }
            if (batch.empty()) {
                int flag = 0;   // a probe for a tag nobody sends: it only runs MPI's progress engine
                MPI_Iprobe(MPI_ANY_SOURCE, kProgressTag, comm_, &flag, MPI_STATUS_IGNORE);
            }
            lock.lock();
            if (!completed.empty()) {
                for (bool *d : completed) *d = true;
                watched_.erase(std::remove_if(watched_.begin(), watched_.end(), [](const Watched &w) { return *w.done; }),
                               watched_.end());
                finished_.notify_all();
            }
            // the pause ends early when the rank starts waiting, so its wait is not a pause long
            work_.wait_for(lock, std::chrono::microseconds(us), [this] { return waiting_ > 0 || stop_; });
        }
    }
    static constexpr int kProgressTag = 32000;
    std::thread thread_;
    std::mutex mu_;
    std::condition_variable work_, finished_;
    std::vector<Watched> watched_;
    int in_flight_ = 0, waiting_ = 0;
    bool stop_ = false;
    MPI_Comm comm_ = MPI_COMM_NULL;
};

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
    // Local CSR rows that read no ghost row (computed while a halo travels) and the others
    // (owned rows with a remote in-neighbour, then the ghost rows), built by split_rows.
    std::vector<int64_t> interior_rows, boundary_rows;
    ProgressThread progress;                   // runs during mg_train_epoch / mg_evaluate (ProgressScope)
    // Measured per run (reported by the timers and mg_read_timer): bytes of halo payload sent.
    double halo_bytes = 0;
    // Link prediction (find_owners, gather_global_rows): every rank's owned global ids in rank
    // order, how many each rank owns and where its rows start; the gathered rows, a gradient of them.
    std::vector<int64_t> all_owned_gid;
    std::vector<int> owned_counts, owned_starts;
    std::vector<float> staged_rows, global_rows, global_grad;

    int num_peers() const { return int(peers.size()); }
    // Peer k's share of the halo: the packed rows sent to it, the ghost rows received from it.
    int64_t sent_first(int k) const { return send_ptr[size_t(k)]; }
    int64_t sent_rows(int k) const { return send_ptr[size_t(k) + 1] - send_ptr[size_t(k)]; }
    int64_t ghost_first(int k) const { return recv_ptr[size_t(k)]; }
    int64_t ghost_rows(int k) const { return recv_ptr[size_t(k) + 1] - recv_ptr[size_t(k)]; }
};

// The requests of one exchange: one per non-empty message, all waited for together.  Rows
// travel as floats; a reduction that needs their edges sends those as int64 (halo_reverse_max).
class Exchange {
  public:
    explicit Exchange(Partition &p) : p_(p) {}
    void wait() {
        if (!reqs_.empty())
            check_mpi(MPI_Waitall(int(reqs_.size()), reqs_.data(), MPI_STATUSES_IGNORE), "halo wait");
        reqs_.clear();
    }
    template <class T>
    void recv(T *dst, int64_t n, int peer, int tag) {
        if (n == 0) return;
        reqs_.emplace_back();
        check_mpi(MPI_Irecv(dst, message_count(n, "halo"), type_of<T>(), peer, tag, p_.comm, &reqs_.back()),
                  "halo receive");
    }
    template <class T>
    void send(const T *src, int64_t n, int peer, int tag) {
        if (n == 0) return;
        reqs_.emplace_back();
        p_.halo_bytes += double(sizeof(T)) * double(n);
        check_mpi(MPI_Isend(src, message_count(n, "halo"), type_of<T>(), peer, tag, p_.comm, &reqs_.back()),
                  "halo send");
    }

  private:
    template <class T>
    static MPI_Datatype type_of() {
        static_assert(std::is_same_v<T, float> || std::is_same_v<T, int64_t>, "rows are floats, edges int64");
        return std::is_same_v<T, float> ? MPI_FLOAT : MPI_INT64_T;
    }
    Partition &p_;
    std::vector<MPI_Request> reqs_;
};

// Packs the owned rows every peer needs into `out`, one block per peer, in peer order.
template <class T>
inline void pack_rows(const Partition &p, const T *X, int64_t F, T *out) {
    const int64_t n = p.send_ptr.back();
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < n; ++k)
        std::memcpy(out + k * F, X + p.send_idx[size_t(k)] * F, sizeof(T) * size_t(F));
}
inline void pack_rows(Partition &p, const float *X, int64_t F) {
    p.pack.resize(size_t(p.send_ptr.back() * F));
    pack_rows(p, X, F, p.pack.data());
}

constexpr int kTagForward = 101, kTagReverse = 102;

// Ghost rows of X (owned + ghost rows, F wide) receive their owners' current rows: posted by
// the constructor, complete after finish().  The bytes this rank sent are added to the
// exchange's timer (measured, not estimated), with the time spent packing and waiting.
class HaloForward {
  public:
    HaloForward(Partition &p, float *X, int64_t F) : p_(p), ex_(p), start_(std::chrono::steady_clock::now()) {
        if (p.size == 1) return;
        const double before = p.halo_bytes;
        pack_rows(p, X, F);
        for (int k = 0; k < p.num_peers(); ++k) {
            ex_.recv(X + p.ghost_first(k) * F, p.ghost_rows(k) * F, p.peers[size_t(k)], kTagForward);
            ex_.send(p.pack.data() + p.sent_first(k) * F, p.sent_rows(k) * F, p.peers[size_t(k)], kTagForward);
        }
        bytes_ = p.halo_bytes - before;
        p.progress.hold();
        posting_ = std::chrono::steady_clock::now() - start_;
    }
    void finish(Timer &t) {
        const auto begin = std::chrono::steady_clock::now();
        if (p_.size > 1) {
            ex_.wait();
            p_.progress.release();
        }
        t.seconds += std::chrono::duration<double>(posting_ + (std::chrono::steady_clock::now() - begin)).count();
        t.bytes += bytes_;
        t.calls += 1;
    }

  private:
    Partition &p_;
    Exchange ex_;
    std::chrono::steady_clock::time_point start_;
    std::chrono::steady_clock::duration posting_{};
    double bytes_ = 0;
};

// The exchange with nothing to overlap: posted and completed at once (the caller times it).
inline void halo_forward(Partition &p, float *X, int64_t F, Timer &sent) {
    if (p.size == 1) return;
    HaloForward h(p, X, F);
    Timer t;
    h.finish(t);
    sent.bytes += t.bytes;
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

constexpr int kTagReverseMax = 103, kTagWinner = 104;

// The max over out-edges (a scatter to sources): each rank has reduced the out-edges it holds,
// X holding the maxima and `arg` their local edge positions (-1: no out-edge here), ghost rows
// included.  The owners take the maxima of the ranks' shares, a tie going to the edge first in
// the global CSR order, which is how one process breaks it (its out-edges of a node are in that
// order, and so are each rank's: morphgen/partition/layout.py keeps it); then every rank learns
// the winning edge of each of its rows, as its local position where it holds that edge and -1
// where another rank does, so that the backward (scatter_max_grad) routes each row's gradient
// to the one edge that won.  Ghost rows of X become zero, as after halo_reverse.
inline void halo_reverse_max(Partition &p, const GraphView &g, float *X, int64_t *arg, int64_t F, Timer &sent) {
    const double before = p.halo_bytes;
    const int64_t rows = p.num_local;
    std::vector<int64_t> won(static_cast<size_t>(rows * F));     // global CSR positions of the winners
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < rows * F; ++i) won[size_t(i)] = arg[i] < 0 ? -1 : p.edge_gid[size_t(arg[i])];
    if (p.size > 1) {
        const int64_t sent_rows = p.send_ptr.back();
        p.pack.resize(size_t(sent_rows * F));
        std::vector<int64_t> their(static_cast<size_t>(sent_rows * F));
        Exchange ex(p);
        for (int k = 0; k < p.num_peers(); ++k) {
            const int peer = p.peers[size_t(k)];
            ex.recv(p.pack.data() + p.sent_first(k) * F, p.sent_rows(k) * F, peer, kTagReverseMax);
            ex.recv(their.data() + p.sent_first(k) * F, p.sent_rows(k) * F, peer, kTagReverseMax);
            ex.send(X + p.ghost_first(k) * F, p.ghost_rows(k) * F, peer, kTagReverseMax);
            ex.send(won.data() + p.ghost_first(k) * F, p.ghost_rows(k) * F, peer, kTagReverseMax);
        }
        ex.wait();
        for (int k = 0; k < p.num_peers(); ++k) {   // a node may be a ghost on several peers
#pragma omp parallel for schedule(static)
            for (int64_t j = p.sent_first(k); j < p.sent_first(k) + p.sent_rows(k); ++j) {
                const int64_t u = p.send_idx[size_t(j)];
                for (int64_t c = 0; c < F; ++c) {
                    const float x = p.pack[size_t(j * F + c)];
                    const int64_t e = their[size_t(j * F + c)], &mine = won[size_t(u * F + c)];
                    if (e >= 0 && (mine < 0 || x > X[u * F + c] || (x == X[u * F + c] && e < mine))) {
                        X[u * F + c] = x;
                        won[size_t(u * F + c)] = e;
                    }
                }
            }
        }
        // The winners of owned rows go to the ranks holding them as ghosts.
        std::vector<int64_t> packed(static_cast<size_t>(sent_rows * F));
        pack_rows(p, won.data(), F, packed.data());
        Exchange back(p);
        for (int k = 0; k < p.num_peers(); ++k) {
            const int peer = p.peers[size_t(k)];
            back.recv(won.data() + p.ghost_first(k) * F, p.ghost_rows(k) * F, peer, kTagWinner);
            back.send(packed.data() + p.sent_first(k) * F, p.sent_rows(k) * F, peer, kTagWinner);
        }
        back.wait();
    }
    // Each winner as this rank's edge position, where it holds the edge: a row's out-edges here
    // are few, and their global positions increase along the segment.
#pragma omp parallel for schedule(dynamic, 64)
    for (int64_t u = 0; u < rows; ++u) {
        for (int64_t c = 0; c < F; ++c) {
            const int64_t want = won[size_t(u * F + c)];
            int64_t local = -1;
            for (int64_t k = g.t_indptr[u]; k < g.t_indptr[u + 1] && want >= 0; ++k) {
                if (p.edge_gid[size_t(g.t_eid[k])] == want) {
                    local = g.t_eid[k];
                    break;
                }
            }
            arg[u * F + c] = local;
        }
    }
    zero_ghost_rows(p, X, F);
    sent.bytes += p.halo_bytes - before;
}

// x[0 .. n) summed across the ranks in place (in pieces: MPI counts are int).
inline void sum_across_ranks(Partition &p, float *x, int64_t n, const char *what) {
    const int64_t chunk = int64_t(1) << 28;
    for (int64_t b = 0; b < n; b += chunk)
        check_mpi(MPI_Allreduce(MPI_IN_PLACE, x + b, int(std::min(chunk, n - b)), MPI_FLOAT, MPI_SUM, p.comm), what);
}

// Every rank's rows of a table, in rank order: (row, rank) pairs sorted by row, then rank, so
// a row's first pair names the lowest rank holding it.  A collective call.
inline std::vector<std::pair<int64_t, int>> rows_by_rank(Partition &p, const std::vector<int64_t> &local) {
    std::vector<int> counts(size_t(p.size)), starts(size_t(p.size));
    const int mine = message_count(int64_t(local.size()), "table rows");
    check_mpi(MPI_Allgather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT, p.comm), "table rows");
    int64_t total = 0;
    for (int r = 0; r < p.size; ++r) {
        starts[size_t(r)] = message_count(total, "table rows");
        total += counts[size_t(r)];
    }
    std::vector<int64_t> all(static_cast<size_t>(total));
    check_mpi(MPI_Allgatherv(local.data(), mine, MPI_INT64_T, all.data(), counts.data(), starts.data(), MPI_INT64_T,
                             p.comm),
              "table rows");
    std::vector<std::pair<int64_t, int>> pairs;
    pairs.reserve(all.size());
    for (int r = 0; r < p.size; ++r)
        for (int64_t j = starts[size_t(r)]; j < starts[size_t(r)] + counts[size_t(r)]; ++j)
            pairs.push_back({all[size_t(j)], r});
    std::sort(pairs.begin(), pairs.end());
    return pairs;
}

// The rows of a [*, rows_per_type] table that lookups of (type[r], row[r]), r < R, read,
// increasing (type may be nullptr: one type).
inline std::vector<int64_t> lookup_rows(const int64_t *type, const int64_t *row, int64_t R, int64_t rows_per_type) {
    std::vector<int64_t> keys(static_cast<size_t>(R));
    for (int64_t r = 0; r < R; ++r) keys[size_t(r)] = (type ? type[r] : 0) * rows_per_type + row[r];
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    return keys;
}

// The rows of a gradient that some rank writes, summed across ranks as those rows only: each
// rank packs them (zero where it wrote none: the gradient kernels leave other rows as they
// were) and the packed rows are all-reduced.  A collective build.
class RowSums {
  public:
    // written: the rows this rank writes, increasing.
    void build(Partition &p, const std::vector<int64_t> &written, int64_t width) {
        width_ = width;
        keys.clear();
        mine_.clear();
        for (const auto &[row, rank] : rows_by_rank(p, written)) {
            if (!keys.empty() && keys.back() == row) continue;
            keys.push_back(row);
            mine_.push_back(std::binary_search(written.begin(), written.end(), row));
        }
        packed_.assign(keys.size() * size_t(width), 0.0f);
    }
    std::vector<int64_t> keys;          // rows some rank writes, increasing
    float *packed() { return packed_.data(); }
    const float *packed() const { return packed_.data(); }
    int64_t floats() const { return int64_t(packed_.size()); }
    int64_t bytes() const { return int64_t(keys.size() * (sizeof(int64_t) + 1) + packed_.size() * sizeof(float)); }
    // Copies this rank's rows of g (a [*, width] array; row keys[k] stored at row at[k] when
    // `at` is given) into the packed rows, zero in the others.
    void pack(const float *g, const int64_t *at = nullptr) {
        const int64_t W = width_, n = int64_t(keys.size());
#pragma omp parallel for schedule(static)
        for (int64_t k = 0; k < n; ++k) {
            float *out = packed_.data() + k * W;
            const int64_t row = at ? at[k] : keys[size_t(k)];
            if (mine_[size_t(k)]) std::memcpy(out, g + row * W, size_t(W) * sizeof(float));
            else std::fill(out, out + W, 0.0f);
        }
    }
    bool mine(int64_t k) const { return mine_[size_t(k)] != 0; }
    void release() { packed_.clear(); packed_.shrink_to_fit(); }

  private:
    std::vector<uint8_t> mine_;         // per key: this rank writes it
    std::vector<float> packed_;         // per key: its row, being summed across ranks
    int64_t width_ = 0;
};

// A table under Adam stepped in shares: each rank steps the rows it touches (reads or writes
// a gradient for; with their gradient where they have one) and a contiguous range of the rows
// no rank touches (with a zero gradient: weight decay and the moments still move them).  Every
// row is stepped with one process's numbers, and a rank reads no row it did not step, so
// training needs nothing more; with more than one rank a rank stores only those rows
// (pack_storage).  read_whole() gives the whole table on every rank (a collective call) where
// something reads it whole: the weights for mg_get_param, weights and moments for a checkpoint.
// Each row then comes from the one rank that hands it on: the lowest rank that steps it.
class TableShare {
  public:
    // touched: the rows this rank touches, increasing; has_gradient(row): whether a touched row
    // has a gradient.  touched_first: list the touched rows before the untouched ones this rank
    // steps (each group increasing), so that packed storage begins with the touched rows
    // (BasisTable: one block per basis).  A collective call.
    template <class HasGradient>
    void build(Partition &p, const std::vector<int64_t> &touched, HasGradient has_gradient, int64_t width,
               int64_t table_rows, bool touched_first = false) {
        width_ = width;
        table_rows_ = table_rows;
        ranks_ = p.size;
        std::vector<uint8_t> touched_somewhere(size_t(table_rows), 0);
        hands_on_.assign(size_t(table_rows), 0);
        int64_t previous = -1;
        for (const auto &[row, rank] : rows_by_rank(p, touched)) {
            touched_somewhere[size_t(row)] = 1;
            if (row != previous) hands_on_[size_t(row)] = rank == p.rank;
            previous = row;
        }
        const int64_t first = table_rows * p.rank / p.size, last = table_rows * (p.rank + 1) / p.size;
        rows.clear();
        has_grad_.clear();
        for (int64_t row = 0, t = 0; row < table_rows; ++row) {
            while (t < int64_t(touched.size()) && touched[size_t(t)] < row) ++t;
            const bool mine = t < int64_t(touched.size()) && touched[size_t(t)] == row;
            if (!(mine || (!touched_somewhere[size_t(row)] && row >= first && row < last))) continue;
            if (!mine) hands_on_[size_t(row)] = 1;
            rows.push_back(row);
            has_grad_.push_back(mine && has_gradient(row));
        }
        sorted_ = !touched_first;
        if (touched_first) {
            std::vector<int64_t> order;
            for (int pass = 0; pass < 2; ++pass)
                for (size_t i = 0; i < rows.size(); ++i)
                    if (std::binary_search(touched.begin(), touched.end(), rows[i]) == (pass == 0)) order.push_back(int64_t(i));
            std::vector<int64_t> reordered_rows;
            std::vector<uint8_t> reordered_grad;
            for (int64_t i : order) {
                reordered_rows.push_back(rows[size_t(i)]);
                reordered_grad.push_back(has_grad_[size_t(i)]);
            }
            rows.swap(reordered_rows);
            has_grad_.swap(reordered_grad);
        }
    }
    std::vector<int64_t> rows;          // the rows this rank steps (increasing, unless touched_first)
    int64_t bytes() const { return int64_t(rows.size() * (sizeof(int64_t) + 1) + hands_on_.size()); }

    // Packed: this rank stores the rows it steps only, row i of its weights, moments and
    // gradient being table row rows[i].  A rank reads no other row.
    void pack_storage() { packed_ = true; }
    bool packed() const { return packed_; }
    int64_t stored_rows() const { return packed_ ? int64_t(rows.size()) : table_rows_; }
    // Allocates the weights and moments (those the update rule has) of the stored rows.
    void allocate(Buffer &weights, Buffer &m, Buffer &v, int moments, int64_t &accounted) const {
        weights.allocate(stored_rows() * width_, accounted);
        if (moments >= 1) m.allocate(stored_rows() * width_, accounted);
        if (moments >= 2) v.allocate(stored_rows() * width_, accounted);
    }

    void adam_step(bool decoupled, float *p, const float *g, float *m, float *v, const AdamConfig &c, int64_t step) {
        adam_listed_rows_step(p, g, m, v, width_, rows.data(), has_grad_.data(), int64_t(rows.size()), c, step,
                              decoupled, packed_);
        if (ranks_ > 1 && !packed_) behind_[0] = behind_[1] = behind_[2] = true;
    }

    // Array `a` of the table (0: the weights, 1 and 2: Adam's moments), stored here at `stored`,
    // as the whole table in `whole` on every rank: each row from the rank that hands it on, the
    // others' copies zero, summed.  Unpacked, `stored` is a whole copy whose rows stepped by
    // other ranks fell behind: it is brought up to date in place first (`whole` may be it).  A
    // collective call: every rank makes it, for the same array.
    void read_whole(Partition &p, int a, float *stored, float *whole) {
        const int64_t W = width_, n = int64_t(rows.size()), total = table_rows_ * W;
        if (!packed_) {
            if (behind_[a]) {
#pragma omp parallel for schedule(static)
                for (int64_t row = 0; row < table_rows_; ++row)
                    if (!hands_on_[size_t(row)]) std::fill(stored + row * W, stored + (row + 1) * W, 0.0f);
                sum_across_ranks(p, stored, total, "table completion");
                behind_[a] = false;
            }
            if (whole != stored) std::memcpy(whole, stored, size_t(total) * sizeof(float));
            return;
        }
        std::fill(whole, whole + total, 0.0f);
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; ++i)
            if (hands_on_[size_t(rows[size_t(i)])])
                std::memcpy(whole + rows[size_t(i)] * W, stored + i * W, size_t(W) * sizeof(float));
        sum_across_ranks(p, whole, total, "table gather");
    }
    // The weights and moments (those allocated) as whole tables, for a checkpoint.  Collective.
    void read_state(Partition &p, Buffer &weights, Buffer &m, Buffer &v, std::vector<float> whole[3]) {
        Buffer *arrays[3] = {&weights, &m, &v};
        for (int a = 0; a < 3; ++a) {
            if (arrays[a]->size == 0) continue;
            whole[a].resize(size_t(table_rows_ * width_));
            read_whole(p, a, arrays[a]->data, whole[a].data());
        }
    }
    // Array `a` set from a whole table, the same on every rank: this rank's stored rows of it.
    void write_whole(int a, const float *whole, float *stored) {
        if (!packed_) {
            std::memcpy(stored, whole, size_t(table_rows_ * width_) * sizeof(float));
            behind_[a] = false;
            return;
        }
        const int64_t W = width_, n = int64_t(rows.size());
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; ++i)
            std::memcpy(stored + i * W, whole + rows[size_t(i)] * W, size_t(W) * sizeof(float));
    }
    // Where row `key` of the table is stored here (a row this rank steps, when packed).
    int64_t stored_row(int64_t key) const {
        if (!packed_) return key;
        if (!sorted_) throw Error("stored_row of a table share listed touched rows first");
        const auto at = std::lower_bound(rows.begin(), rows.end(), key);
        if (at == rows.end() || *at != key) throw Error("a table row this rank does not store was looked up");
        return int64_t(at - rows.begin());
    }

  private:
    std::vector<uint8_t> has_grad_;     // per stepped row
    std::vector<uint8_t> hands_on_;     // per table row: this rank's copy is the one read_whole() keeps
    bool behind_[3] = {false, false, false};   // unpacked: weights, moments with rows behind
    bool packed_ = false, sorted_ = true;
    int64_t width_ = 0, table_rows_ = 0;
    int ranks_ = 1;
};

// An embedding table under Adam (featureless input: R-GCN's per-relation tables, on aifb 90 x
// 8,285 x 16 floats, of which the edges read a few percent), shared out between the ranks: its
// gradient reduced as the rows some rank writes (RowSums), each rank writing back the sums of
// the rows it steps, and the table stepped in shares (TableShare).  A rank touches the rows its
// gradient writes and those its forward lookups read (a forward computed for ghost rows reads
// rows whose gradient only their owners write).
class TableRows {
  public:
    // written: the rows this rank's gradient writes, increasing (EmbeddingPlan::keys); the
    // forward lookups (type[r], row[r]), r < R (type may be nullptr: one type), of a
    // [table_rows, width] table with rows_per_type rows per type.  A collective call.
    void build(Partition &p, const int64_t *written, int64_t written_count, const int64_t *type, const int64_t *row,
               int64_t R, int64_t rows_per_type, int64_t width, int64_t table_rows) {
        width_ = width;
        table_rows_ = table_rows;
        const std::vector<int64_t> read = lookup_rows(type, row, R, rows_per_type);
        const std::vector<int64_t> own_written(written, written + written_count);
        std::vector<int64_t> touched;
        std::set_union(own_written.begin(), own_written.end(), read.begin(), read.end(), std::back_inserter(touched));
        sums_.build(p, own_written, width);
        const std::vector<int64_t> &keys = sums_.keys;
        share_.build(p, touched, [&](int64_t row) { return std::binary_search(keys.begin(), keys.end(), row); },
                     width, table_rows);
        step_key_.clear();
        for (int64_t row : share_.rows) {
            const auto at = std::lower_bound(keys.begin(), keys.end(), row);
            step_key_.push_back(at != keys.end() && *at == row ? int64_t(at - keys.begin()) : -1);
        }
        // Where some rank writes nearly every row (wn18rr's entity embeddings: every node is
        // read), packing would copy the table twice to leave out nothing: the gradient is reduced
        // in place, its rows unwritten here zeroed first.
        whole_ = int64_t(keys.size()) * 10 >= table_rows * 9;
        if (whole_) {
            sums_.release();
            written_here_.assign(size_t(table_rows), 0);
            for (int64_t row : own_written) written_here_[size_t(row)] = 1;
        } else if (p.size > 1) {
            share_.pack_storage();          // weights, moments and gradient of the rows stepped here only
        }
        lookup_at_.resize(size_t(R));
        for (int64_t r = 0; r < R; ++r) lookup_at_[size_t(r)] = share_.stored_row((type ? type[r] : 0) * rows_per_type + row[r]);
        written_at_.clear();
        for (int64_t key : own_written) written_at_.push_back(share_.stored_row(key));
        summed_at_.assign(keys.size(), -1);
        for (size_t k = 0; k < keys.size(); ++k)
            if (sums_.mine(int64_t(k))) summed_at_[k] = share_.stored_row(keys[k]);
    }
    // The weights, Adam's moments (`moments` of them) and the gradient of the rows this rank
    // stores (all of the table unless packed).
    void allocate(Buffer &weights, Buffer &m, Buffer &v, int moments, int64_t &accounted) {
        share_.allocate(weights, m, v, moments, accounted);
        gradient.allocate(share_.stored_rows() * width_, accounted);
    }
    Buffer gradient;                    // the table's gradient, in this rank's stored rows
    // The lookups' gradient into the stored rows they write (embedding_rows_grad_rows of the
    // plan the rows were built from, each row at its stored place).
    void grad_rows(const op::EmbeddingPlan &plan, const float *G, int64_t M, float *dW) const {
        embedding_lookup_bwd_rows(G, plan.order.data(), plan.key_ptr.data(), written_at_.data(), plan.unique, M, dW);
    }
    // Per forward lookup, the row of this rank's storage it reads (embedding_rows with no types).
    const int64_t *lookup_index() const { return lookup_at_.data(); }
    bool reduced_whole() const { return whole_; }
    int64_t floats() const { return whole_ ? table_rows_ * width_ : sums_.floats(); }
    float *packed() { return sums_.packed(); }
    int64_t bytes() const {
        return sums_.bytes() + share_.bytes() + int64_t((step_key_.size() + lookup_at_.size() + written_at_.size() +
                                                         summed_at_.size()) * sizeof(int64_t) + written_here_.size());
    }
    void pack(const float *g) { sums_.pack(g, summed_at_.data()); }
    void zero_unwritten(float *g) const {
        const int64_t W = width_;
#pragma omp parallel for schedule(static)
        for (int64_t row = 0; row < table_rows_; ++row)
            if (!written_here_[size_t(row)]) std::fill(g + row * W, g + (row + 1) * W, 0.0f);
    }
    // The sums of the rows this rank steps back into its gradient (the only rows its step reads).
    void unpack(float *g) const {
        const int64_t W = width_, n = int64_t(share_.rows.size());
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; ++i) {
            const int64_t k = step_key_[size_t(i)], at = share_.packed() ? i : share_.rows[size_t(i)];
            if (k >= 0) std::memcpy(g + at * W, sums_.packed() + k * W, size_t(W) * sizeof(float));
        }
    }
    TableShare &share() { return share_; }

  private:
    RowSums sums_;
    TableShare share_;
    std::vector<int64_t> step_key_;     // per stepped row: its key in sums_ (its summed gradient), or -1
    std::vector<int64_t> lookup_at_;    // per forward lookup: the stored row it reads
    std::vector<int64_t> written_at_;   // per row this rank's gradient writes: its stored row
    std::vector<int64_t> summed_at_;    // per summed row (sums_): its stored row where written here, else -1
    bool whole_ = false;                // reduced in place, the whole table (no packing)
    std::vector<uint8_t> written_here_; // when whole_, per table row: this rank's gradient writes it
    int64_t width_ = 0, table_rows_ = 0;
};

// The bases of featureless basis lookups, V[B][P][M] (examples/rgcn_bases.mp: Y[r] =
// sum_b A[type(r), b] V[b][row(r)]), shared out between the ranks.  Their gradient,
// dV[b][s] = sum over the types t of A[t, b] S[s, t], with S[s, t] the sum of the lookups' G rows
// of the pair (row s, type t), has a row per node and basis, and nearly every node is some
// edge's source: reducing dV would move nearly the whole [B, P, M] table.  The pair sums S are
// reduced instead (RowSums over the pairs some rank's lookups make: at most one per edge, M
// wide), and each rank computes dV, from the summed pairs and A as it was when the backward ran,
// for the rows it steps: every basis of the nodes its lookups read (TableShare).  (The owners
// alone computing and stepping their nodes' rows, then sending the rows that peers read as
// ghosts, B x M floats each, was slower: on mutag the sends took 9 of a 38 ms epoch.)
class BasisTable {
  public:
    // plan: this rank's lookups (BasisLookupPlan: its pairs, keyed row * types + type); bases B,
    // rows_per_basis P (the global node count).  A collective call.
    void build(Partition &p, const op::BasisLookupPlan &plan, int64_t bases, int64_t rows_per_basis, int64_t width) {
        bases_ = bases;
        rows_per_basis_ = rows_per_basis;
        width_ = width;
        types_ = plan.types;
        const op::EmbeddingPlan &pairs = plan.by_row;
        const std::vector<int64_t> local(pairs.keys.begin(), pairs.keys.begin() + pairs.unique);
        sums_.build(p, local, width);
        pair_key_.clear();
        for (int64_t key : local)
            pair_key_.push_back(int64_t(std::lower_bound(sums_.keys.begin(), sums_.keys.end(), key) - sums_.keys.begin()));
        rows_.clear();
        for (idx_t i = 0; i < plan.distinct_rows(); ++i)
            rows_.push_back(pairs.keys[size_t(plan.row_start[size_t(i)])] / types_);
        std::vector<int64_t> touched;       // every basis's row of each node read here, increasing
        for (int64_t b = 0; b < bases; ++b)
            for (int64_t s : rows_) touched.push_back(b * rows_per_basis + s);
        share_.build(p, touched, [](int64_t) { return true; }, width, bases * rows_per_basis, true);
        // Packed (on more than one rank), V's stored rows begin with [B][n] (n: the nodes read
        // here, rows_), the rows no lookup reads after them; the lookups read V through a copy
        // of the plan whose pair keys name a node by its place in rows_.
        plan_ = &plan;
        if (p.size > 1) {
            share_.pack_storage();
            local_plan_ = plan;
            std::vector<idx_t> &keys = local_plan_.by_row.keys;
            for (idx_t i = 0; i < plan.distinct_rows(); ++i)
                for (idx_t k = plan.row_start[size_t(i)]; k < plan.row_start[size_t(i) + 1]; ++k)
                    keys[size_t(k)] = i * types_ + keys[size_t(k)] % types_;
        }
        pairs_of_.clear();             // per node read here: [first, last) of its summed pairs
        const auto at = [&](int64_t key) {
            return int64_t(std::lower_bound(sums_.keys.begin(), sums_.keys.end(), key) - sums_.keys.begin());
        };
        for (int64_t s : rows_) pairs_of_.push_back({at(s * types_), at((s + 1) * types_)});
        pair_type_.clear();
        for (int64_t key : sums_.keys) pair_type_.push_back(key % types_);
        order_ = &pairs;
    }
    int64_t floats() const { return sums_.floats(); }
    float *packed() { return sums_.packed(); }
    int64_t bytes() const {
        return sums_.bytes() + share_.bytes() +
               int64_t((pair_key_.size() + rows_.size() + 2 * pairs_of_.size() + local_plan_.by_row.order.size() +
                        local_plan_.by_row.key_ptr.size() + local_plan_.by_row.keys.size() +
                        local_plan_.row_start.size()) * sizeof(int64_t) + a_.size() * sizeof(float));
    }
    TableShare &share() { return share_; }
    // V's weights, Adam's moments (`moments` of them) and gradient, in the rows stored here.
    void allocate(Buffer &weights, Buffer &m, Buffer &v, int moments, int64_t &accounted) {
        share_.allocate(weights, m, v, moments, accounted);
        gradient.allocate(share_.stored_rows() * width_, accounted);
    }
    Buffer gradient;                    // dV, in the rows stored here
    // What the lookups' kernels read V through: the plan and the rows per basis of the storage.
    const op::BasisLookupPlan &lookup_plan() const { return share_.packed() ? local_plan_ : *plan_; }
    int64_t rows_per_basis() const { return share_.packed() ? int64_t(rows_.size()) : rows_per_basis_; }

    // This rank's pair sums of G (the lookups' gradient rows) into the packed pairs, zero in the
    // pairs of other ranks; A kept for bases_grad (its step may run before the sums arrive).
    void pack(const float *G, const float *A) {
        a_.assign(A, A + types_ * bases_);
        float *packed = sums_.packed();
        std::fill(packed, packed + sums_.floats(), 0.0f);
        const op::EmbeddingPlan &p = *order_;
        const int64_t W = width_;
#pragma omp parallel for schedule(dynamic, 64)
        for (int64_t k = 0; k < p.unique; ++k) {
            float *out = packed + pair_key_[size_t(k)] * W;
            for (int64_t i = p.key_ptr[size_t(k)]; i < p.key_ptr[size_t(k) + 1]; ++i) {
                const float *g = G + p.order[size_t(i)] * W;
                for (int64_t j = 0; j < W; ++j) out[j] += g[j];
            }
        }
    }
    // dV[b][s] for every node s read here, from the summed pairs (every rank's) and the kept A:
    // each row written once (the op layer's write_bases_row), past the caches when dV is large.
    void bases_grad(float *dV) const {
        const int64_t W = width_, n = int64_t(rows_.size()), P = rows_per_basis();
        const float *packed = sums_.packed();
        with_width(W, [&](auto width) {
            constexpr int MC = decltype(width)::value;
            const bool stream = bases_streamed<MC>(dV, bases_ * P * W);
#pragma omp parallel
            {
#pragma omp for schedule(dynamic, 64) nowait
                for (int64_t i = 0; i < n; ++i) {
                    const int64_t first = pairs_of_[size_t(i)].first, last = pairs_of_[size_t(i)].second;
                    const int64_t s = share_.packed() ? i : rows_[size_t(i)];
                    if (first == last) {       // no summed pair reads it: its rows are zero
                        for (int64_t b = 0; b < bases_; ++b)
                            std::fill(dV + (b * P + s) * W, dV + (b * P + s + 1) * W, 0.0f);
                        continue;
                    }
                    tl_detail::write_bases_row<MC>(a_.data(), bases_, packed + first * W, pair_type_.data() + first,
                                                   last - first, W, dV, P, s, stream);
                }
#if MG_HAVE_SIMD
                if (stream) _mm_sfence();
#endif
            }
        });
    }

  private:
    RowSums sums_;                      // the pairs (row * types + type) some rank's lookups make
    TableShare share_;
    const op::EmbeddingPlan *order_ = nullptr;   // this rank's lookups grouped by pair
    const op::BasisLookupPlan *plan_ = nullptr;  // the lookups' plan
    op::BasisLookupPlan local_plan_;    // packed: the plan with nodes named by their place in rows_
    std::vector<int64_t> pair_key_;     // per pair of this rank: its index among the summed pairs
    std::vector<int64_t> rows_;         // the nodes this rank's lookups read, increasing
    std::vector<std::pair<int64_t, int64_t>> pairs_of_;   // per such node: its summed pairs [first, last)
    std::vector<int64_t> pair_type_;    // per summed pair: its type
    std::vector<float> a_;              // A when the backward ran
    int64_t bases_ = 0, rows_per_basis_ = 0, width_ = 0, types_ = 1;
};

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
        progress_ = &p.progress;
        done_.reset(new bool[size_t(n)]());
        reqs_.assign(size_t(2 * n), MPI_REQUEST_NULL);
        tables_.assign(size_t(n), TableGradient{});
        floats_.assign(size_t(n), 0);
        posted_.assign(size_t(n), 0.0);
        last_post_.assign(size_t(n), 0.0);
        if (p.size > 1) check_mpi(MPI_Barrier(p.comm), "clock barrier");
        origin_ = MPI_Wtime();             // the same instant on every rank, to the barrier's skew
    }
    void start(Partition &p, int i, float *g, int64_t n) {
        floats_[size_t(i)] = n;
        if (p.size == 1) return;
        posted_[size_t(i)] = MPI_Wtime() - origin_;
        check_mpi(MPI_Iallreduce(MPI_IN_PLACE, g, message_count(n, "gradient all-reduce"), MPI_FLOAT, MPI_SUM,
                                 p.comm, &reqs_[size_t(2 * i)]),
                  "gradient all-reduce");
        check_mpi(MPI_Iallreduce(&posted_[size_t(i)], &last_post_[size_t(i)], 1, MPI_DOUBLE, MPI_MAX, p.comm,
                                 &reqs_[size_t(2 * i + 1)]),
                  "gradient all-reduce");
        if (progress_->running()) progress_->watch(&reqs_[size_t(2 * i)], 2, &done_[size_t(i)]);
    }
    // The bases of basis lookups: their pair sums are reduced (BasisTable); after the wait, the
    // program computes the rows of dV this rank steps from them (BasisTable::bases_grad).
    void start_bases(Partition &p, int i, BasisTable &bases) { start(p, i, bases.packed(), bases.floats()); }
    // A table gradient whose lookups write some rows only: those rows are reduced (TableRows),
    // and wait() writes their sums back into g.
    void start_rows(Partition &p, int i, float *g, TableRows &rows) {
        floats_[size_t(i)] = rows.floats();
        if (p.size == 1) return;
        if (rows.reduced_whole()) {          // no rows to leave out: the gradient itself, no copies
            rows.zero_unwritten(g);
            start(p, i, g, rows.floats());
            return;
        }
        rows.pack(g);
        tables_[size_t(i)] = {&rows, g};
        start(p, i, rows.packed(), rows.floats());
    }
    // The floats gradient i's all-reduce sums (0 before its first).
    int64_t floats(int i) const { return floats_[size_t(i)]; }
    // Lets the library move the reductions in flight along (MPI progresses inside MPI calls).
    void progress() {
        if (progress_->running()) return;   // the progress thread completes them
        int done = 0;
        for (auto &r : reqs_)
            if (r != MPI_REQUEST_NULL) MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    }
    // Waits for gradient i; the communication that was not hidden goes into `exposed`.
    void wait(int i, Timer &exposed) {
        exposed.calls += 1;
        MPI_Request *r = &reqs_[size_t(2 * i)];
        const double begin = MPI_Wtime() - origin_;
        if (progress_->running())
            progress_->await(&done_[size_t(i)]);
        else if (r[0] != MPI_REQUEST_NULL || r[1] != MPI_REQUEST_NULL)   // else done behind the backward
            check_mpi(MPI_Waitall(2, r, MPI_STATUSES_IGNORE), "gradient all-reduce");
        const double end = MPI_Wtime() - origin_;
        exposed.seconds += std::max(0.0, end - std::max(begin, last_post_[size_t(i)]));
        TableGradient &t = tables_[size_t(i)];
        if (t.rows != nullptr) t.rows->unpack(t.grad);
        t = TableGradient{};
    }

  private:
    struct TableGradient {
        TableRows *rows = nullptr;
        float *grad = nullptr;
    };
    std::vector<TableGradient> tables_;    // per gradient reduced as table rows: where the sums go
    std::vector<int64_t> floats_;          // per gradient: the floats its all-reduce sums
    std::vector<MPI_Request> reqs_;        // per gradient: the sum, then its last post time
    std::vector<double> posted_, last_post_;
    std::unique_ptr<bool[]> done_;         // per gradient: the progress thread has completed it
    ProgressThread *progress_ = nullptr;
    double origin_ = 0;
};

// Runs the progress thread for one call of the library (a training epoch, an evaluation): it
// is joined before the call returns, so it never outlives MPI.
class ProgressScope {
  public:
    explicit ProgressScope(Partition &p) : p_(p) {
        if (p.size > 1) p.progress.start(p.comm);
    }
    ~ProgressScope() { p_.progress.stop(); }

  private:
    Partition &p_;
};

// Splits the local CSR's rows into those whose in-neighbours are all owned here (interior:
// they can be aggregated while the halo travels) and the rest (owned rows that read a ghost,
// then the ghost rows, which have no in-edges here).
inline void split_rows(Partition &p, const GraphView &g) {
    p.interior_rows.clear();
    p.boundary_rows.clear();
    for (int64_t v = 0; v < g.num_nodes; ++v) {
        bool reads_ghost = v >= p.num_owned;
        for (int64_t e = g.indptr[v]; e < g.indptr[v + 1] && !reads_ghost; ++e) reads_ghost = g.col[e] >= p.num_owned;
        (reads_ghost ? p.boundary_rows : p.interior_rows).push_back(v);
    }
}

// An aggregation over in-edges whose input's ghost rows must first receive their owners' rows:
// the interior rows are aggregated while the halo travels, the boundary rows once it has
// arrived.  Each row's result is the one a single call gives (rows are independent).  The
// exchange's time and bytes go to `halo`, the aggregation's to `agg` with its analytic counts.
inline void aggregate_with_halo(Partition &p, Timer &agg, double bytes, double flops, Timer &halo,
                                const op::Graph &g, const AggSpec &s, float *X, int64_t F, float *Y, int64_t *argmax,
                                const Epilogue &epi = Epilogue{}) {
    using clock = std::chrono::steady_clock;
    HaloForward h(p, X, F);                     // pack and post: timed into `halo`
    const auto t0 = clock::now();
    op::aggregate_rows(g, s, X, F, Y, argmax, p.interior_rows.data(), int64_t(p.interior_rows.size()), epi);
    const auto t1 = clock::now();
    h.finish(halo);                             // the wait: timed into `halo`
    const auto t2 = clock::now();
    op::aggregate_rows(g, s, X, F, Y, argmax, p.boundary_rows.data(), int64_t(p.boundary_rows.size()), epi);
    agg.seconds += std::chrono::duration<double>((t1 - t0) + (clock::now() - t2)).count();
    agg.bytes += bytes;
    agg.flops += flops;
    agg.calls += 1;
}

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

// norm=gcn_weighted: a node's weighted in-degree sums its in-edges, which all lie on its owner's
// rank; the ghosts' sums come from their owners through one halo exchange, at prepare.
inline void build_weighted_gcn_scale(Partition &p, op::Graph &g) {
    const GraphView &v = *g.view;
    if (!v.weight) throw Error("the program's GCN layers weigh their edges, but the graph has no edge weights");
    std::vector<float> sums(size_t(p.num_local), 0.0f);
    op::weighted_in_degrees(v, p.num_owned, sums.data());
    Timer sent;
    halo_forward(p, sums.data(), 1, sent);
    g.build_weighted_gcn_scale(sums.data());
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

// ---- link prediction: the triples name nodes anywhere in the graph ----------------------------
// Every rank gathers the embeddings of the whole graph from their owners (one all-gather of
// N x H floats per forward pass; the backward reads the same rows) and scores its share of the
// triples (a contiguous slice, rank by rank) with one process's kernels.  The loss shares add up (the mean divides by the whole count;
// the L2 term is rank 0's), the embeddings' gradient of each share goes to the rows' owners by a
// reduce-scatter, and the relations' gradient of each share is summed by the gradient
// all-reduce.  The losses and gradients are one process's up to the order of the sums.

// The owners of the global ids, once: every rank's owned global ids in rank order, how many
// each rank owns and where its rows start.
inline void find_owners(Partition &p) {
    if (!p.owned_counts.empty()) return;
    const int own = message_count(p.num_owned, "owned rows");
    p.owned_counts.assign(size_t(p.size), 0);
    check_mpi(MPI_Allgather(&own, 1, MPI_INT, p.owned_counts.data(), 1, MPI_INT, p.comm), "owned row counts");
    p.owned_starts.assign(size_t(p.size), 0);
    for (int r = 1; r < p.size; ++r)
        p.owned_starts[size_t(r)] = p.owned_starts[size_t(r - 1)] + p.owned_counts[size_t(r - 1)];
    p.all_owned_gid.resize(size_t(p.global_nodes));
    check_mpi(MPI_Allgatherv(p.node_gid.data(), own, MPI_INT64_T, p.all_owned_gid.data(), p.owned_counts.data(),
                             p.owned_starts.data(), MPI_INT64_T, p.comm),
              "owned node ids");
}

// Each rank's owned rows as F-float counts and offsets of a list of the whole graph's rows in
// rank order (the all-gather's and the reduce-scatter's layout).
inline std::vector<int> owned_floats(const Partition &p, int64_t F, bool starts) {
    std::vector<int> out(size_t(p.size));
    for (int r = 0; r < p.size; ++r)
        out[size_t(r)] = message_count(int64_t((starts ? p.owned_starts : p.owned_counts)[size_t(r)]) * F,
                                       "embedding rows");
    return out;
}

// Rows of X (owned rows first, F wide) of every rank, in global node order: [global_nodes, F].
inline const float *gather_global_rows(Partition &p, const float *X, int64_t F) {
    find_owners(p);
    const std::vector<int> counts = owned_floats(p, F, false), starts = owned_floats(p, F, true);
    p.staged_rows.resize(size_t(p.global_nodes * F));
    check_mpi(MPI_Allgatherv(X, counts[size_t(p.rank)], MPI_FLOAT, p.staged_rows.data(), counts.data(),
                             starts.data(), MPI_FLOAT, p.comm),
              "embedding rows");
    p.global_rows.resize(size_t(p.global_nodes * F));
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < p.global_nodes; ++i)
        std::memcpy(p.global_rows.data() + p.all_owned_gid[size_t(i)] * F, p.staged_rows.data() + i * F,
                    sizeof(float) * size_t(F));
    return p.global_rows.data();
}

// The rows the training forward's link_loss gathered: the backward reads the same embeddings
// (their buffer is live until it has), so it does not gather them again.
inline const float *forward_rows(const Partition &p, int64_t F) {
    if (int64_t(p.global_rows.size()) != p.global_nodes * F)
        throw Error("link-prediction gradient: the forward pass has not gathered the embeddings");
    return p.global_rows.data();
}

// This rank's share of the triples: [first, first + count).
struct TripleShare {
    int64_t first, count;
};
inline TripleShare triple_share(const Partition &p, int64_t count) {
    const int64_t first = count * p.rank / p.size, last = count * (p.rank + 1) / p.size;
    return {first, last - first};
}

// The op layer's link-loss signatures (ops.h) after the partition; `rows` (the local rows) is
// replaced by the whole graph's.
inline void link_loss(Partition &p, const float *z, int64_t /*rows*/, const float *R, int64_t rel_rows, int64_t H,
                      const int64_t *triples, int64_t count, float reg, float *loss) {
    require_triples(triples, count);
    const float *all = gather_global_rows(p, z, H);
    const TripleShare s = triple_share(p, count);
    loss[0] = distmult_loss(all, p.global_nodes, R, rel_rows, H, triples + 4 * s.first, s.count,
                            p.rank == 0 ? reg : 0.f, count);
}

// dz [local rows, H]: the owned rows of the sum of every rank's share; ghost rows zero.
// z is not read: the backward reads the rows the forward gathered (forward_rows).
inline void link_loss_grad(Partition &p, const float * /*z*/, int64_t /*rows*/, const float *R, int64_t H,
                           const int64_t *triples, int64_t count, float reg, float *dz) {
    require_triples(triples, count);
    const float *all = forward_rows(p, H);
    const TripleShare s = triple_share(p, count);
    p.global_grad.resize(size_t(p.global_nodes * H));
    distmult_loss_grad(all, p.global_nodes, R, 0, H, triples + 4 * s.first, s.count, p.rank == 0 ? reg : 0.f,
                       p.global_grad.data(), nullptr, count);
#pragma omp parallel for schedule(static)      // in rank order of the owners, for the reduce-scatter
    for (int64_t i = 0; i < p.global_nodes; ++i)
        std::memcpy(p.staged_rows.data() + i * H, p.global_grad.data() + p.all_owned_gid[size_t(i)] * H,
                    sizeof(float) * size_t(H));
    const std::vector<int> counts = owned_floats(p, H, false);
    check_mpi(MPI_Reduce_scatter(p.staged_rows.data(), dz, counts.data(), MPI_FLOAT, MPI_SUM, p.comm),
              "embedding gradient");
    std::fill(dz + p.num_owned * H, dz + p.num_local * H, 0.f);
}

// dR: this rank's share (the gradient all-reduce sums the shares).
inline void link_loss_rel_grad(Partition &p, const float * /*z: as above*/, const float *R, int64_t rel_rows,
                               int64_t H, const int64_t *triples, int64_t count, float reg, float *dR) {
    require_triples(triples, count);
    const float *all = forward_rows(p, H);
    const TripleShare s = triple_share(p, count);
    distmult_loss_grad(all, 0, R, rel_rows, H, triples + 4 * s.first, s.count, p.rank == 0 ? reg : 0.f, nullptr, dR,
                       count);
}

}  // namespace mpi

namespace op {
// Adam / AdamW on this rank's share of a table (TableRows, BasisTable).
inline void adam_rows(bool decoupled, float *p, const float *g, float *m, float *v, idx_t /*rows*/, idx_t /*M*/,
                      mpi::BasisTable &table, double lr, double b1, double b2, double eps, double wd, int64_t step) {
    table.share().adam_step(decoupled, p, g, m, v, AdamConfig{lr, b1, b2, eps, wd}, step);
}
inline void adam_rows(bool decoupled, float *p, const float *g, float *m, float *v, idx_t /*rows*/, idx_t /*M*/,
                      mpi::TableRows &table, double lr, double b1, double b2, double eps, double wd, int64_t step) {
    table.share().adam_step(decoupled, p, g, m, v, AdamConfig{lr, b1, b2, eps, wd}, step);
}
}  // namespace op
}  // namespace mg
#endif

// The CUDA backend's op layer: the functions the generated code calls (the same names and
// signatures as backends/openmp/ops.h, so one emitter core and one ABI template serve both),
// with every array argument in device memory.  The graph, features, labels and masks are
// uploaded once at prepare (Graph::build, DeviceInputs::upload); afterwards only the loss (one
// float per epoch), accuracies, predictions and checkpoints cross to the host.
//
// Ops the generated code may name but this backend does not run yet are refused by the CUDA
// emitter at compile time (emitter.py: SUPPORTED), never here at run time.
#ifndef MORPHGEN_CUDA_OPS_CUH
#define MORPHGEN_CUDA_OPS_CUH

#define MG_DEVICE_TIMERS 1   // context.h: timers are CUDA events (below), not host clocks

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <omp.h>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "device.cuh"
#include "context.h"
#include "graph.cuh"
#include "memory.cuh"
#include "kernels/aggregate.cuh"
#include "kernels/dense.cuh"
#include "kernels/edges.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/link.cuh"
#include "kernels/loss.cuh"
#include "kernels/norm.cuh"
#include "kernels/optim.cuh"
#include "kernels/sparse_features.cuh"
#include "kernels/typed_linear.cuh"
#include "edge_rows.h"

namespace mg {

// ---- per-kernel timers: a pair of CUDA events per call, settled after the epoch ------------------
namespace cuda {
struct PendingTime {
    cudaEvent_t start, stop;
    Timer *timer;
};
// Per library, at namespace scope with internal linkage, as device.cuh's stream (why: there).
static std::vector<PendingTime> pending_times;
static std::vector<cudaEvent_t> spare_events;
inline cudaEvent_t take_event() {
    if (!spare_events.empty()) {
        cudaEvent_t e = spare_events.back();
        spare_events.pop_back();
        return e;
    }
    cudaEvent_t e;
    check(cudaEventCreate(&e), "creating a timer event");
    return e;
}
// Adds every recorded interval to its timer (waits for the last kernel).
inline void settle_timers() {
    for (PendingTime &p : pending_times) {
        float ms = 0.f;
        check(cudaEventSynchronize(p.stop), "timer event");
        check(cudaEventElapsedTime(&ms, p.start, p.stop), "timer event");
        p.timer->seconds += double(ms) * 1e-3;
        spare_events.push_back(p.start);
        spare_events.push_back(p.stop);
    }
    pending_times.clear();
}
}  // namespace cuda

class ScopedTimer {
  public:
    ScopedTimer(Timer &t, double bytes, double flops) : t_(t), start_(t.clock ? cuda::take_event() : nullptr) {
        t.bytes += bytes;
        t.flops += flops;
        t.calls += 1;
        if (start_) cuda::check(cudaEventRecord(start_, cuda::stream()), "timer event");
    }
    ~ScopedTimer() {
        if (!start_) return;
        cudaEvent_t stop = cuda::take_event();
        cudaEventRecord(stop, cuda::stream());
        cuda::pending_times.push_back({start_, stop, &t_});
    }

  private:
    Timer &t_;
    cudaEvent_t start_;
};

// ---- split rows: the segments of a CSR's long rows (aggregate.cuh, RowSplit) ----------------------
// An edge count from the environment variable `var` (a number >= 0), or `fallback` when unset.
inline int64_t edges_setting(const char *var, int64_t fallback) {
    const char *env = std::getenv(var);
    if (!env || !*env) return fallback;
    char *end = nullptr;
    const long long v = std::strtoll(env, &end, 10);
    if (*end || v < 0) throw Error(std::string("$") + var + " must be a number of edges >= 0, not '" + env + "'");
    return int64_t(v);
}
// $MORPHGEN_CUDA_SPLIT_EDGES sets the longest row walked whole (default 256 edges; 0: never split).
inline int64_t split_edges_setting() { return edges_setting("MORPHGEN_CUDA_SPLIT_EDGES", 256); }
// $MORPHGEN_CUDA_TRANSPOSE: how a sum or mean aggregation's backward walks the graph, "by-source"
// (the default: the by-source CSR, no atomics, the same sums every run) or "atomic" (the forward
// CSR with atomics, aggregate_transpose_atomic_kernel).
inline bool atomic_transpose_setting() {
    const char *env = std::getenv("MORPHGEN_CUDA_TRANSPOSE");
    if (!env || !*env || std::string(env) == "by-source") return false;
    if (std::string(env) == "atomic") return true;
    throw Error(std::string("$MORPHGEN_CUDA_TRANSPOSE must be 'by-source' or 'atomic', not '") + env + "'");
}

class RowSplitPlan {
  public:
    void build(const idx_t *indptr, int64_t rows, int64_t edges) {
        std::vector<idx_t> seg_row, seg_first;
        for (int64_t r = 0; edges > 0 && r < rows; ++r) {
            const int64_t degree = indptr[r + 1] - indptr[r];
            if (degree <= edges) continue;
            const idx_t first = idx_t(seg_row.size());
            for (int64_t k = 0; k < (degree + edges - 1) / edges; ++k) {
                seg_row.push_back(r);
                seg_first.push_back(first);
            }
        }
        segments_ = int64_t(seg_row.size());
        edges_ = segments_ ? edges : 0;
        if (!segments_) return;
        seg_row_.upload(seg_row, "uploading split rows");
        seg_first_.upload(seg_first, "uploading split rows");
        arrivals_.upload(std::vector<unsigned>(size_t(segments_) * cuda::kMaxWarpsPerRow, 0u), "uploading split rows");
    }
    // The split for rows of F features; the partial sums grow to the widest F asked for, and so
    // do a max's partial argmaxes (max_args: a max reduction asks for them).
    cuda::RowSplit view(int64_t F, bool max_args = false) {
        cuda::RowSplit s;
        if (!segments_) return s;
        if (partial_.size() < segments_ * F) partial_.allocate(segments_ * F);
        if (max_args && partial_arg_.size() < segments_ * F) partial_arg_.allocate(segments_ * F);
        s.seg_row = seg_row_.data();
        s.seg_first = seg_first_.data();
        s.partial = partial_.data();
        s.partial_arg = max_args ? partial_arg_.data() : nullptr;
        s.arrivals = arrivals_.data();
        s.segments = segments_;
        s.edges = edges_;
        return s;
    }
    int64_t bytes() const {
        return seg_row_.bytes() + seg_first_.bytes() + arrivals_.bytes() + partial_.bytes() + partial_arg_.bytes();
    }

  private:
    cuda::DeviceArray<idx_t> seg_row_, seg_first_;
    cuda::DeviceArray<unsigned> arrivals_;
    cuda::DeviceArray<float> partial_;
    cuda::DeviceArray<int64_t> partial_arg_;
    int64_t segments_ = 0, edges_ = 0;
};

// The CSC copy of CSR features (built at prepare), for X^T G without atomics; split: its long
// columns, walked in pieces (csc_weight_grad_kernel); row_split: the CSR's long rows, likewise
// (csr_linear_kernel).
struct SparseFeatureBlocks {
    cuda::DeviceArray<int64_t> colptr, row_of;
    cuda::DeviceArray<float> vals;
    RowSplitPlan split, row_split;
    int64_t bytes() const { return colptr.bytes() + row_of.bytes() + vals.bytes() + split.bytes() + row_split.bytes(); }
};

namespace op {

// The host threads only build load-time plans; the device runs everything else.
inline void set_threads(int threads) {
    if (threads > 0) omp_set_num_threads(threads);
}

// $MORPHGEN_CUDA_DEVICE (set by `morphgen train --device N`), default 0.
inline void select_device() {
    const char *env = std::getenv("MORPHGEN_CUDA_DEVICE");
    const std::string value = env ? env : "";
    if (value.find_first_not_of("0123456789") != std::string::npos || value.size() > 6)
        throw Error("$MORPHGEN_CUDA_DEVICE must be a GPU number, not '" + value + "'");
    const int device = value.empty() ? 0 : std::stoi(value);
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess || count == 0)
        throw Error(std::string("no usable CUDA GPU here (") +
                    (status != cudaSuccess ? cudaGetErrorString(status) : "no device found") +
                    "); MORPHGEN_CUDA_EMULATION=1 runs the CUDA kernels on the CPU instead, slowly");
    if (device < 0 || device >= count)
        throw Error("CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(count) +
                    " found)");
    cuda::check(cudaSetDevice(device), "selecting the CUDA device");
}

// Rows grouped by type for typed linear (kernels/typed_linear.cuh), grouped on the host once:
// perm lists the rows of type 0, then type 1, ...; tiles list (type, first row) of every
// kTypedTile-row tile, so that a block never straddles two types.
// $MORPHGEN_CUDA_TYPED_CHUNK_ROWS sets the fewest rows of a chunk of the typed weight gradients
// and row sums (default cuda::kTypedChunkRows; tests make it small to get many chunks per type).
inline int64_t typed_chunk_rows_setting() {
    const char *env = std::getenv("MORPHGEN_CUDA_TYPED_CHUNK_ROWS");
    if (!env || !*env) return cuda::kTypedChunkRows;
    char *end = nullptr;
    const long long v = std::strtoll(env, &end, 10);
    if (*end || v < 1)
        throw Error(std::string("$MORPHGEN_CUDA_TYPED_CHUNK_ROWS must be a number of rows >= 1, not '") + env + "'");
    return int64_t(v);
}

struct TypeGroups {
    cuda::DeviceArray<idx_t> perm_, ptr_, tile_type_, tile_start_, chunk_bound_, chunk_ptr_;
    mutable cuda::DeviceArray<float> partial_;   // the chunks' partial sums, grown to the widest use
    const idx_t *perm = nullptr, *ptr = nullptr;
    idx_t types = 0, tiles = 0, chunks = 0;
    void build(const idx_t *type, idx_t rows, idx_t num_types) {   // type: host memory or nullptr
        types = num_types;
        std::vector<idx_t> count(static_cast<size_t>(num_types + 1), 0), order(static_cast<size_t>(rows));
        for (idx_t r = 0; r < rows; ++r) {
            const idx_t t = type ? type[r] : 0;
            if (t < 0 || t >= num_types) throw Error("a type index is out of range");
            count[size_t(t + 1)] += 1;
        }
        for (idx_t t = 0; t < num_types; ++t) count[size_t(t + 1)] += count[size_t(t)];
        std::vector<idx_t> next(count.begin(), count.end() - 1);
        for (idx_t r = 0; r < rows; ++r) order[size_t(next[size_t(type ? type[r] : 0)]++)] = r;
        std::vector<idx_t> tile_type, tile_start;
        for (idx_t t = 0; t < num_types; ++t)
            for (idx_t r0 = count[size_t(t)]; r0 < count[size_t(t + 1)]; r0 += cuda::kTypedTile) {
                tile_type.push_back(t);
                tile_start.push_back(r0);
            }
        tiles = idx_t(tile_type.size());
        // Chunks of kTypedChunkRows rows or more, so that about kTypedChunks cover every row: the
        // partial sums (chunks x K x M floats) stay small next to the rows themselves.
        const idx_t per_chunk = std::max<idx_t>(typed_chunk_rows_setting(),
                                                (rows / cuda::kTypedChunks + cuda::kTypedTile) / cuda::kTypedTile *
                                                    cuda::kTypedTile);
        // The types' rows are consecutive in perm, so the chunks' bounds are one ascending list.
        std::vector<idx_t> chunk_bound, chunk_ptr(1, 0);
        for (idx_t t = 0; t < num_types; ++t) {
            for (idx_t r0 = count[size_t(t)]; r0 < count[size_t(t + 1)]; r0 += per_chunk) chunk_bound.push_back(r0);
            chunk_ptr.push_back(idx_t(chunk_bound.size()));
        }
        chunks = idx_t(chunk_bound.size());
        chunk_bound.push_back(rows);
        perm = perm_.upload(order, "uploading type groups");
        ptr = ptr_.upload(count, "uploading type groups");
        tile_type_.upload(tile_type, "uploading type groups");
        tile_start_.upload(tile_start, "uploading type groups");
        chunk_bound_.upload(chunk_bound, "uploading type groups");
        chunk_ptr_.upload(chunk_ptr, "uploading type groups");
    }
    const idx_t *tile_type() const { return tile_type_.data(); }
    const idx_t *tile_start() const { return tile_start_.data(); }
    const idx_t *chunk_bound() const { return chunk_bound_.data(); }
    const idx_t *chunk_ptr() const { return chunk_ptr_.data(); }
    float *partials(idx_t width) const {        // room for every chunk's `width` partial sums
        if (partial_.size() < chunks * width) partial_.allocate(chunks * width);
        return partial_.data();
    }
    int64_t bytes() const {
        return perm_.bytes() + ptr_.bytes() + tile_type_.bytes() + tile_start_.bytes() + chunk_bound_.bytes() +
               chunk_ptr_.bytes() + partial_.bytes();
    }
};

// ---- graph: uploaded once; derived arrays built on the host, then uploaded --------------------------
struct Graph {
    GraphView host;                     // the caller's arrays (host memory), valid while prepared
    GraphView dev;                      // the same graph in device memory
    cuda::DeviceArray<idx_t> indptr, col, t_indptr, t_col, t_eid, etype_, ntype_;
    mutable cuda::DeviceArray<idx_t> edge_dst;     // built when the program asks (build_*) or on first use
    cuda::DeviceArray<idx_t> node_ids;             // built when the program asks
    cuda::DeviceArray<float> gcn_scale_self, gcn_scale_plain;
    cuda::DeviceArray<float> weighted_scale_self, weighted_scale_plain;   // norm=gcn_weighted
    TypeGroups etypes, ntypes;
    mutable RowSplitPlan by_dst_split, by_src_split;   // long rows of the CSR and of its transpose
    bool atomic_transpose = false;      // $MORPHGEN_CUDA_TRANSPOSE=atomic, read once at build
    // The destinations with more than `edges` in-edges, whose (destination, head) pairs the edge
    // softmaxes give a block each (edges.cuh, BlockGroup); built on first use.
    struct SoftmaxLongRows {
        cuda::DeviceArray<idx_t> rows;
        int64_t count = 0, edges = -1;
    };
    mutable SoftmaxLongRows softmax_long;

    void build(const GraphView &g, const float *in_degree = nullptr) {
        host = g;
        dev = g;
        const int64_t n = g.num_nodes, e = g.num_edges;
        dev.indptr = indptr.upload(g.indptr, n + 1, "uploading the graph");
        dev.col = col.upload(g.col, e, "uploading the graph");
        dev.t_indptr = t_indptr.upload(g.t_indptr, n + 1, "uploading the graph");
        dev.t_col = t_col.upload(g.t_col, e, "uploading the graph");
        dev.t_eid = t_eid.upload(g.t_eid, e, "uploading the graph");
        dev.etype = etype_.upload(g.etype, e, "uploading the graph");
        dev.ntype = ntype_.upload(g.ntype, n, "uploading the graph");
        atomic_transpose = atomic_transpose_setting();
        const int64_t split = split_edges_setting();
        by_dst_split.build(g.indptr, n, split);
        by_src_split.build(g.t_indptr, n, split);
        std::vector<float> s(static_cast<size_t>(n));
        for (bool self : {true, false}) {
            for (int64_t v = 0; v < n; ++v) {
                const float d = (in_degree ? in_degree[v] : float(g.indptr[v + 1] - g.indptr[v])) + (self ? 1.f : 0.f);
                s[size_t(v)] = d > 0 ? 1.0f / std::sqrt(d) : 0.0f;
            }
            (self ? gcn_scale_self : gcn_scale_plain).upload(s, "uploading the GCN scales");
        }
    }
    // GCN's scale with d the sum of the node's in-edge weights (+ 1 with the self loop), computed
    // on the host from the caller's weights and uploaded (norm=gcn_weighted).
    void build_weighted_gcn_scale() {
        if (!host.weight) throw Error("the program's GCN layers weigh their edges, but the graph has no edge weights");
        const int64_t n = host.num_nodes;
        std::vector<float> s(static_cast<size_t>(n));
        for (bool self : {true, false}) {
            for (int64_t v = 0; v < n; ++v) {
                float d = self ? 1.f : 0.f;
                for (idx_t e = host.indptr[v]; e < host.indptr[v + 1]; ++e) d += host.weight[e];
                s[size_t(v)] = d > 0 ? 1.0f / std::sqrt(d) : 0.0f;
            }
            (self ? weighted_scale_self : weighted_scale_plain).upload(s, "uploading the weighted GCN scales");
        }
    }
    const float *weighted_gcn_scale(bool self_loops) const {
        return self_loops ? weighted_scale_self.data() : weighted_scale_plain.data();
    }
    void build_edge_dst() const {
        std::vector<idx_t> dst(static_cast<size_t>(host.num_edges));
        for (idx_t v = 0; v < host.num_nodes; ++v)
            for (idx_t e = host.indptr[v]; e < host.indptr[v + 1]; ++e) dst[size_t(e)] = v;
        edge_dst.upload(dst, "uploading edge destinations");
    }
    const SoftmaxLongRows &softmax_long_rows(int64_t edges) const {
        if (softmax_long.edges != edges) {
            std::vector<idx_t> rows;
            for (idx_t v = 0; v < host.num_nodes; ++v)
                if (host.indptr[v + 1] - host.indptr[v] > edges) rows.push_back(v);
            softmax_long.count = int64_t(rows.size());
            if (!rows.empty()) softmax_long.rows.upload(rows, "uploading the edge softmax's long rows");
            softmax_long.edges = edges;
        }
        return softmax_long;
    }
    // The destination of each CSR position (edge_dst), built on first use.
    const idx_t *edge_destinations() const {
        if (!edge_dst.data() && host.num_edges > 0) build_edge_dst();
        return edge_dst.data();
    }
    void build_node_ids() {
        std::vector<idx_t> ids(static_cast<size_t>(host.num_nodes));
        std::iota(ids.begin(), ids.end(), idx_t(0));
        node_ids.upload(ids, "uploading node ids");
    }
    // Types of edges and nodes (all 0 when the graph has none): grouped for typed linear.
    void build_etypes() {
        if (!host.etype) dev.etype = etype_.upload(std::vector<idx_t>(static_cast<size_t>(host.num_edges), 0), "edge types");
        etypes.build(host.etype, host.num_edges, host.num_etypes);
    }
    void build_ntypes() {
        if (!host.ntype) dev.ntype = ntype_.upload(std::vector<idx_t>(static_cast<size_t>(host.num_nodes), 0), "node types");
        ntypes.build(host.ntype, host.num_nodes, host.num_ntypes);
    }
    const idx_t *etype() const { return dev.etype; }
    const idx_t *ntype() const { return dev.ntype; }
    const float *gcn_scale(bool self_loops) const {
        return self_loops ? gcn_scale_self.data() : gcn_scale_plain.data();
    }
    const GraphView &device_view() const { return dev; }
    int64_t bytes() const {
        return indptr.bytes() + col.bytes() + t_indptr.bytes() + t_col.bytes() + t_eid.bytes() + etype_.bytes() +
               ntype_.bytes() + edge_dst.bytes() + node_ids.bytes() + gcn_scale_self.bytes() +
               gcn_scale_plain.bytes() + weighted_scale_self.bytes() + weighted_scale_plain.bytes() + etypes.bytes() +
               ntypes.bytes() + by_dst_split.bytes() + by_src_split.bytes() + softmax_long.rows.bytes();
    }
};

// Masked-row counts of the bound masks (the loss's divisor), by device pointer: counted once on
// the host at upload instead of on the device every epoch.
inline std::vector<std::pair<const uint8_t *, int64_t>> &mask_counts() {
    static std::vector<std::pair<const uint8_t *, int64_t>> counts;
    return counts;
}
inline int64_t mask_count(const uint8_t *mask, int64_t rows) {
    if (!mask) return rows;
    for (auto &c : mask_counts())
        if (c.first == mask) return c.second;
    throw Error("internal error: a mask that was not uploaded");
}

// The features, labels and masks in device memory.  upload() points the context's views at them.
struct DeviceInputs {
    cuda::DeviceArray<float> dense, values;
    cuda::DeviceArray<int64_t> indptr, labels;
    cuda::DeviceArray<int32_t> indices;
    cuda::DeviceArray<uint8_t> masks[3];
    cuda::DeviceArray<int64_t> triples;     // link prediction: the epoch's (head, relation, tail, target) rows

    void upload(ContextBase &m, const Graph &g) {
        FeatureView &f = m.features;
        if (f.kind == FeatureKind::Dense) {
            f.dense = dense.upload(f.dense, f.rows * f.cols, "uploading the features");
        } else if (f.kind == FeatureKind::Csr) {
            const int64_t nnz = f.indptr[f.rows];
            f.nnz = nnz;
            f.data = values.upload(f.data, nnz, "uploading the features");
            f.indices = indices.upload(f.indices, nnz, "uploading the features");
            f.indptr = indptr.upload(f.indptr, f.rows + 1, "uploading the features");
        }
        const int64_t n = m.graph.num_nodes;
        m.labels = labels.upload(m.labels, n, "uploading the labels");
        for (int k = 0; k < 3; ++k) {
            m.masks[k] = masks[k].upload(m.masks[k], n, "uploading the masks");
            if (m.masks[k]) {
                auto &counts = mask_counts();
                counts.erase(std::remove_if(counts.begin(), counts.end(),
                                            [&](const std::pair<const uint8_t *, int64_t> &c) {
                                                return c.first == m.masks[k];
                                            }),
                             counts.end());
                counts.emplace_back(m.masks[k], m.mask_count[k]);
            }
        }
        m.graph = g.device_view();
    }
    // The epoch's triples (checked by the caller) into device memory, reusing the array when it is
    // large enough: a new set comes every epoch.
    const int64_t *set_triples(const int64_t *host, int64_t count) {
        if (triples.size() < 4 * count) triples.allocate(4 * count);
        if (count > 0)
            cuda::check(cudaMemcpy(triples.data(), host, sizeof(int64_t) * size_t(4 * count), cudaMemcpyHostToDevice),
                        "uploading the triples");
        return triples.data();
    }
    int64_t bytes() const {
        return dense.bytes() + values.bytes() + indptr.bytes() + labels.bytes() + indices.bytes() + masks[0].bytes() +
               masks[1].bytes() + masks[2].bytes() + triples.bytes();
    }
};

// ---- dense linear algebra ------------------------------------------------------------------------
inline void apply_epilogue(const char *name, float *Y, idx_t rows, idx_t M, const Epilogue &epi) {
    if (!epi.bias && epi.act == Act::None) return;
    cuda::map(name, rows * M, cuda::EpilogueOp{Y, epi.bias, M, epi.act, epi.alpha});
}
inline void linear(const float *X, idx_t rows, idx_t K, const float *W, idx_t M, float *Y,
                   const Epilogue &epi = Epilogue{}) {
    cuda::gemm("linear (X W)", false, false, rows, M, K, X, K, W, M, Y, M);
    apply_epilogue("linear epilogue", Y, rows, M, epi);
}
inline void matmul_nt(const float *G, idx_t rows, idx_t M, const float *W, idx_t K, float *dX) {
    cuda::gemm("input gradient (G W^T)", false, true, rows, K, M, G, M, W, M, dX, K);
}
inline void matmul_tn(const float *X, idx_t rows, idx_t K, const float *G, idx_t M, float *dW) {
    cuda::gemm("weight gradient (X^T G)", true, false, K, M, rows, X, K, G, M, dW, M);
}

// ---- input features: dense, sparse (CSR forward, CSC weight gradient) or identity -------------------
// CSR features read back to the host (load-time work only), their column indices checked.
struct HostCsr {
    std::vector<int64_t> indptr;
    std::vector<int32_t> indices;
    std::vector<float> data;
};
inline HostCsr download_csr(const FeatureView &f) {
    HostCsr h{std::vector<int64_t>(static_cast<size_t>(f.rows + 1)), std::vector<int32_t>(static_cast<size_t>(f.nnz)),
              std::vector<float>(static_cast<size_t>(f.nnz))};
    auto copy = [](auto &to, const void *from) {
        cuda::check(cudaMemcpy(to.data(), from, sizeof(to[0]) * to.size(), cudaMemcpyDeviceToHost), "features");
    };
    copy(h.indptr, f.indptr);
    copy(h.indices, f.indices);
    copy(h.data, f.data);
    for (int32_t c : h.indices)
        if (c < 0 || c >= f.cols) throw Error("sparse features: a column index is out of range");
    return h;
}
// The nonzeros regrouped (a counting sort, stable: rows in the order each_nonzero visits them):
// each_nonzero(visit) calls visit(group, row, k) for every nonzero k of the CSR data.
template <class EachNonzero>
inline void group_nonzeros(SparseFeatureBlocks &blocks, int64_t groups, const std::vector<float> &data,
                           EachNonzero each_nonzero, const char *what) {
    std::vector<int64_t> ptr(static_cast<size_t>(groups + 1), 0);
    each_nonzero([&](int64_t g, int64_t, int64_t) { ptr[size_t(g + 1)] += 1; });
    for (int64_t g = 0; g < groups; ++g) ptr[size_t(g + 1)] += ptr[size_t(g)];
    std::vector<int64_t> next(ptr.begin(), ptr.end() - 1), row_of(static_cast<size_t>(ptr.back()));
    std::vector<float> vals(static_cast<size_t>(ptr.back()));
    each_nonzero([&](int64_t g, int64_t r, int64_t k) {
        const int64_t at = next[size_t(g)]++;
        row_of[size_t(at)] = r;
        vals[size_t(at)] = data[size_t(k)];
    });
    blocks.colptr.upload(ptr, what);
    blocks.row_of.upload(row_of, what);
    blocks.vals.upload(vals, what);
    blocks.split.build(ptr.data(), groups, split_edges_setting());
}
// Launches `kernel` (with `args`) on a group of tpr threads per row and one per piece of the
// split's long rows (the groups of aggregate.cuh's split_row), then, when a row is split,
// `combine` over (piece, column) pairs: the pieces of each long row joined in order.
template <class Combine, class... Params, class... Args>
inline void launch_split_rows(const char *name, void (*kernel)(Params...), const cuda::RowSplit &split, idx_t rows,
                              idx_t F, int tpr, const char *combine_name, const Combine &combine, Args... args) {
    cuda::launch(name, kernel, dim3(cuda::blocks_for(split.segments + rows, cuda::kThreads / tpr)),
                 dim3(cuda::kThreads), args...);
    if (split.segments) cuda::map(combine_name, split.segments * F, combine);
}
// Launches a kernel of a group of threads per row of M outputs whose long rows are walked in
// pieces (csr_linear_kernel, csc_weight_grad_kernel, csr_typed_rows_kernel: `args` then the
// group width and the split), then adds the pieces' partial sums into `out`.
template <class... Params, class... Args>
inline void launch_in_pieces(const char *name, void (*kernel)(Params...), RowSplitPlan &plan, idx_t rows, idx_t M,
                             float *out, Args... args) {
    const int tpr = cuda::threads_per_row(M);
    const cuda::RowSplit split = plan.view(M);
    launch_split_rows(name, kernel, split, rows, M, tpr, "the long rows' pieces added (SplitRowSumOp)",
                      cuda::SplitRowSumOp{split, M, out}, args..., tpr, split);
}
// dW[g, :] = sum over group g's nonzeros (r, val) of val * G[r, :] (drop: a feature dropout on the
// values), long groups in pieces (csc_weight_grad_kernel).
inline void csc_weight_grad(const char *name, SparseFeatureBlocks &blocks, int64_t groups, const float *G, idx_t M,
                            float *dW, const cuda::FeatureDrop &drop) {
    launch_in_pieces(name, cuda::csc_weight_grad_kernel, blocks.split, groups, M, dW, blocks.colptr.data(),
                     blocks.row_of.data(), blocks.vals.data(), groups, G, M, dW, drop);
}
inline void build_feature_blocks(const FeatureView &f, SparseFeatureBlocks &blocks) {
    if (f.kind != FeatureKind::Csr) return;
    const HostCsr h = download_csr(f);
    group_nonzeros(blocks, f.cols, h.data, [&](auto visit) {      // by column: the transposed features
        for (int64_t r = 0; r < f.rows; ++r)
            for (int64_t k = h.indptr[size_t(r)]; k < h.indptr[size_t(r + 1)]; ++k) visit(h.indices[size_t(k)], r, k);
    }, "uploading the transposed features");
    blocks.row_split.build(h.indptr.data(), f.rows, split_edges_setting());
}
inline cuda::FeatureDrop feature_drop(const FeatureView &f) {
    cuda::FeatureDrop d;
    if (f.drop_p > 0.f) {
        d.on = true;
        d.stream = cuda::DropStream::of(DropoutKey{f.drop_seed, f.drop_epoch, f.drop_site});
        d.thr = dropout_detail::drop_threshold(f.drop_p);
        d.scale = 1.0f / (1.0f - f.drop_p);
        d.row_ids = f.drop_row_ids;
    }
    return d;
}
inline void linear_features(const FeatureView &f, SparseFeatureBlocks &blocks, const float *W, idx_t M, float *Y) {
    switch (f.kind) {
        case FeatureKind::Dense: linear(f.dense, f.rows, f.cols, W, M, Y); break;
        case FeatureKind::Csr: {
            launch_in_pieces("sparse feature linear (csr_linear_kernel)", cuda::csr_linear_kernel, blocks.row_split,
                             f.rows, M, Y, f.indptr, f.indices, f.data, f.rows, f.cols, W, M, Y, feature_drop(f));
            break;
        }
        case FeatureKind::Identity:
            cuda::copy_async(Y, W, sizeof(float) * size_t(f.rows * M), cudaMemcpyDeviceToDevice, "identity features");
            break;
        default: throw Error("features are not set");
    }
}
inline void matmul_tn_features(const FeatureView &f, SparseFeatureBlocks &blocks, const float *G, idx_t M, float *dW) {
    switch (f.kind) {
        case FeatureKind::Dense: matmul_tn(f.dense, f.rows, f.cols, G, M, dW); break;
        case FeatureKind::Csr: {
            csc_weight_grad("sparse feature weight gradient (csc_weight_grad_kernel)", blocks, f.cols, G, M, dW,
                            feature_drop(f));
            break;
        }
        case FeatureKind::Identity:
            cuda::copy_async(dW, G, sizeof(float) * size_t(f.rows * M), cudaMemcpyDeviceToDevice, "identity features");
            break;
        default: throw Error("features are not set");
    }
}
inline int64_t feature_values(const FeatureView &f) {
    switch (f.kind) {
        case FeatureKind::Dense: return f.rows * f.cols;
        case FeatureKind::Csr: return f.nnz;
        default: return 0;
    }
}
inline int64_t dropped_feature_buffer(const FeatureView &f) {
    return f.kind == FeatureKind::Dense ? f.rows * f.cols : 0;
}
inline void dropout_rows(const char *name, const float *x, float *y, idx_t rows, idx_t cols, const idx_t *row_ids,
                         float p, DropoutKey key) {
    cuda::map(name, rows * cols,
              cuda::DropoutRowsOp{x, y, row_ids, cols, cuda::DropStream::of(key),
                                  dropout_detail::drop_threshold(p), 1.0f / (1.0f - p)});
}
inline void dropout_features(bool training, const FeatureView &in, FeatureView &out, float *values, float p,
                             uint64_t seed, uint64_t epoch, uint64_t site) {
    dropout_feature_view(training, in, out, values, p, seed, epoch, site, [&](float *dropped) {
        dropout_rows("feature dropout", in.dense, dropped, in.rows, in.cols, in.drop_row_ids, p,
                     DropoutKey{seed, epoch, site});
    });
}

// ---- aggregation -----------------------------------------------------------------------------------
struct AggSpec {
    Reduce reduce = Reduce::Sum;
    const float *edge_weight = nullptr;
    const float *node_scale = nullptr;
    bool self_loop = false;
};
enum AggNorm : int { kNormNone = 0, kNormGcn = 1, kNormGcnWeighted = 2, kNormNodeScale = 3 };
// node_scale: the program's own scale (norm=node_scale), a device array of one float per node.
inline AggSpec agg_spec(const Graph &g, Reduce r, const float *edge_weight, int norm, bool self_loops,
                        const float *node_scale = nullptr) {
    const float *scale = norm == kNormGcn           ? g.gcn_scale(self_loops)
                         : norm == kNormGcnWeighted ? g.weighted_gcn_scale(self_loops)
                         : norm == kNormNodeScale   ? node_scale
                                                    : nullptr;
    return AggSpec{r, edge_weight, scale, self_loops};
}
// split_rows: long rows walked in segments (RowSplit), whose partial sums take segments x F floats.
inline cuda::AggArgs agg_args(const Graph &g, const AggSpec &s, idx_t F, bool transpose, bool split_rows = true) {
    const GraphView &v = g.dev;
    cuda::AggArgs a;
    a.indptr = transpose ? v.t_indptr : v.indptr;
    a.col = transpose ? v.t_col : v.col;
    a.eid = transpose ? v.t_eid : nullptr;
    a.fwd_indptr = v.indptr;
    a.edge_weight = s.edge_weight;
    a.node_scale = s.node_scale;
    a.mean = s.reduce == Reduce::Mean;
    a.self_loop = s.self_loop;
    a.transpose = transpose;
    a.rows = v.num_nodes;
    a.F = F;
    if (split_rows)
        a.split = (transpose ? g.by_src_split : g.by_dst_split).view(F, s.reduce == Reduce::Max && !transpose);
    return a;
}
inline void aggregate(const Graph &g, const AggSpec &s, const float *X, idx_t F, float *Y, idx_t *argmax,
                      const Epilogue &epi = Epilogue{}, bool split_rows = true) {
    const cuda::AggArgs a = agg_args(g, s, F, false, split_rows);
    if (s.reduce == Reduce::Max) {
        const int tpr = cuda::threads_per_row(F);
        launch_split_rows("aggregate max (aggregate_max_kernel)", cuda::aggregate_max_kernel, a.split, a.rows, F, tpr,
                          "aggregate max, the long rows' segments compared (SplitRowMaxOp)",
                          cuda::SplitRowMaxOp{a, X, Y, argmax, epi}, a, X, Y, argmax, epi, tpr);
    } else {
        cuda::launch_aggregate("aggregate (aggregate_kernel)", a, X, Y, epi);
    }
}
inline void aggregate_transpose(const Graph &g, const AggSpec &s, const float *G, idx_t F, float *dX) {
    if (s.reduce == Reduce::Max) throw Error("internal error: the max aggregation's backward takes its argmax");
    if (g.atomic_transpose) {
        const cuda::AggArgs a = agg_args(g, s, F, false, false);
        const int tpr = cuda::threads_per_row(F);
        cuda::fill_async(dX, 0, sizeof(float) * size_t(g.dev.num_nodes * F), "transposed aggregate (atomic)");
        cuda::launch("transposed aggregate (aggregate_transpose_atomic_kernel, forward CSR)",
                     cuda::aggregate_transpose_atomic_kernel, dim3(cuda::blocks_for(a.rows, cuda::kThreads / tpr)),
                     dim3(cuda::kThreads), a, G, dX, tpr);
        return;
    }
    cuda::launch_aggregate("transposed aggregate (aggregate_kernel, by source)", agg_args(g, s, F, true), G, dX,
                           Epilogue{});
}
inline void aggregate_max_grad(const Graph &g, const AggSpec &s, const idx_t *argmax, const float *G, idx_t F,
                               float *dX) {
    const cuda::AggArgs a = agg_args(g, s, F, true);
    const int tpr = cuda::threads_per_row(F);
    launch_split_rows("max aggregate backward (aggregate_max_grad_kernel)", cuda::aggregate_max_grad_kernel, a.split,
                      a.rows, F, tpr, "max aggregate backward, the long rows' segments added (SplitRowSumOp)",
                      cuda::SplitRowSumOp{a.split, F, dX}, a, argmax, G, dX, tpr);
}
// An aggregation of the dense input features, once at prepare (passes/hoist_invariant.py); on the
// device always into its own buffer.
inline const float *aggregate_features_once(const Graph &g, const AggSpec &s, const FeatureView &x, bool,
                                            Buffer &own, int64_t &accounted) {
    if (x.kind != FeatureKind::Dense) throw Error("an aggregation of the input features needs dense features");
    own.allocate(g.dev.num_nodes * x.cols, accounted);
    // Rows whole: once, so its time matters less than the partial sums a split would keep at the
    // features' width (602 floats a segment on reddit-1/8: 179 MiB more device memory).
    aggregate(g, s, x.dense, x.cols, own.data, nullptr, Epilogue{}, false);
    return own.data;
}

// ---- graph constants (once, at prepare) --------------------------------------------------------------
inline void upload_floats(const std::vector<float> &h, float *out, const char *what) {
    if (!h.empty()) cuda::check(cudaMemcpy(out, h.data(), sizeof(float) * h.size(), cudaMemcpyHostToDevice), what);
}
inline void in_degree(const Graph &g, float *out) {
    std::vector<float> h(static_cast<size_t>(g.host.num_nodes));
    for (idx_t n = 0; n < g.host.num_nodes; ++n) h[size_t(n)] = float(g.host.indptr[n + 1] - g.host.indptr[n]);
    upload_floats(h, out, "in-degrees");
}
inline void out_degree(const Graph &g, float *out) {
    std::vector<float> h(static_cast<size_t>(g.host.num_nodes));
    for (idx_t n = 0; n < g.host.num_nodes; ++n) h[size_t(n)] = float(g.host.t_indptr[n + 1] - g.host.t_indptr[n]);
    upload_floats(h, out, "out-degrees");
}
inline void gcn_norm(const Graph &g, bool self_loops, float *out) {
    const GraphView &v = g.host;
    std::vector<float> h(static_cast<size_t>(v.num_edges));
    auto s = [&](idx_t n) {
        const float d = float(v.indptr[n + 1] - v.indptr[n]) + (self_loops ? 1.f : 0.f);
        return d > 0 ? 1.0f / std::sqrt(d) : 0.0f;
    };
    for (idx_t d = 0; d < v.num_nodes; ++d)
        for (idx_t e = v.indptr[d]; e < v.indptr[d + 1]; ++e) h[size_t(e)] = s(v.col[e]) * s(d);
    upload_floats(h, out, "GCN edge norms");
}
inline void mean_norm(const Graph &g, bool self_loops, float *out) {
    const GraphView &v = g.host;
    std::vector<float> h(static_cast<size_t>(v.num_edges));
    for (idx_t d = 0; d < v.num_nodes; ++d)
        for (idx_t e = v.indptr[d]; e < v.indptr[d + 1]; ++e)
            h[size_t(e)] = 1.0f / float(v.indptr[d + 1] - v.indptr[d] + (self_loops ? 1 : 0));
    upload_floats(h, out, "mean edge norms");
}

// ---- segmented sums ----------------------------------------------------------------------------------
// out[out_row(s)] = the sum (mean: the average) of X[gather(i)] over the positions i of segment s
// (ptr[s] .. ptr[s+1]; gather nullptr: i itself; out_row nullptr: s itself), 0 for an empty
// segment.  It runs on the aggregation kernel: its chunked walk, and segments longer than the
// split length cut into pieces by `split` (built from the same ptr), so that a hub's segment
// (6,783 edges of one node in mutag) is not one group of threads' loop while the rest of the
// grid has finished.  The pieces' partial sums are added in order: deterministic.
inline void segment_sum(const char *name, const idx_t *ptr, const idx_t *gather, idx_t segments, const float *X,
                        idx_t F, float *out, RowSplitPlan &split, bool mean = false, const idx_t *out_row = nullptr) {
    cuda::AggArgs a;
    a.indptr = a.fwd_indptr = ptr;
    a.col = gather;
    a.eid = nullptr;
    a.edge_weight = a.node_scale = nullptr;
    a.mean = mean;
    a.self_loop = a.transpose = false;
    a.rows = segments;
    a.F = F;
    a.split = split.view(F);
    a.out_row = out_row;
    cuda::launch_aggregate(name, a, X, out, Epilogue{});
}

// ---- edges -------------------------------------------------------------------------------------------
// Gathers onto edges are edge-parallel (a destination's row onto its in-edges too: CSR position e
// reads row edge_destinations()[e]), never a loop over a node's edges.
inline void gather(const Graph &g, bool from_src, const float *X, idx_t F, float *out) {
    if (from_src) cuda::map("gather (source rows)", g.dev.num_edges * F, cuda::GatherRowsOp{X, g.dev.col, out, F});
    else cuda::map("gather (destination rows)", g.dev.num_edges * F, cuda::GatherRowsOp{X, g.edge_destinations(), out, F});
}
inline void scatter(const Graph &g, bool to_dst, Reduce r, const float *m, idx_t F, float *out, idx_t *argmax) {
    const GraphView &v = g.dev;
    if (r != Reduce::Max)   // edge rows by destination are in CSR order; by source, t_eid lists them
        return segment_sum(to_dst ? "scatter to destinations (aggregate_kernel)" : "scatter to sources (aggregate_kernel)",
                           to_dst ? v.indptr : v.t_indptr, to_dst ? nullptr : v.t_eid, v.num_nodes, m, F, out,
                           to_dst ? g.by_dst_split : g.by_src_split, r == Reduce::Mean);
    const int tpr = cuda::threads_per_row(F);
    const cuda::RowSplit split = (to_dst ? g.by_dst_split : g.by_src_split).view(F, true);
    launch_split_rows(to_dst ? "max scatter to destinations (segment_max_kernel)" : "max scatter to sources (segment_max_kernel)",
                      cuda::segment_max_kernel, split, v.num_nodes, F, tpr,
                      "max scatter, the long segments' pieces compared (SplitSegmentMaxOp)",
                      cuda::SplitSegmentMaxOp{split, F, out, argmax}, m, to_dst ? v.indptr : v.t_indptr,
                      to_dst ? nullptr : v.t_eid, v.num_nodes, F, out, argmax, tpr, split);
}
// out[v] = sum over the edges whose `to` end is v of w[e, head] * x[other end] (edges.cuh).
// x_at_src: over the in-edges of each destination (x read at sources); else the transpose.
inline void weighted_gather_scatter(const Graph &g, bool x_at_src, const float *X, const float *w, idx_t H, idx_t D,
                                    float *out) {
    // The aggregation kernel with per-head edge weights: the same chunked walk and split rows.
    cuda::AggArgs a = agg_args(g, AggSpec{}, H * D, !x_at_src);
    a.head_weight = w;
    a.heads = H;
    a.head_dim = D;
    cuda::launch_aggregate(x_at_src ? "attention-weighted sum to destinations (aggregate_kernel, head weights)"
                                    : "attention-weighted sum to sources (aggregate_kernel, head weights)",
                           a, X, out, Epilogue{});
}
// Per-head dot of two node values read at an end of every edge.  Edge rows (RowAt::Edge) are the
// CPU kernels' alone: this backend's emitter never plans them (traverses_edge_rows).
inline void edge_dot(const Graph &g, const float *A, RowAt a_at, const float *B, RowAt b_at, idx_t H, idx_t D,
                     float *out) {
    if (a_at == RowAt::Edge || b_at == RowAt::Edge) throw Error("internal error: an edge dot of edge rows");
    const bool a_src = a_at == RowAt::Source, b_src = b_at == RowAt::Source;
    const idx_t *dst = a_src && b_src ? nullptr : g.edge_destinations();
    cuda::map("per-edge head dot (EdgeDotOp)", g.dev.num_edges * H,
              cuda::EdgeDotOp{A, a_src, B, b_src, g.dev.col, dst, H, D, out});
}
inline void scatter_max_grad(const Graph &g, bool to_dst, const float *G, idx_t F, const idx_t *argmax, float *gm) {
    if (to_dst)
        cuda::map("scatter max backward", g.dev.num_edges * F,
                  cuda::ArgmaxBroadcastOp{G, g.edge_destinations(), argmax, gm, F});
    else
        cuda::map("scatter max backward", g.dev.num_edges * F,
                  cuda::ScatterSrcGradOp{Reduce::Max, G, g.dev.col, g.dev.t_indptr, argmax, gm, F});
}

// ---- elementwise -------------------------------------------------------------------------------------
enum class ActKind { Relu, LeakyRelu, Elu, Exp, Sigmoid, Tanh };

inline void act_grad(ActKind act, float alpha, const float *G, const float *Y, idx_t n, float *dX) {
    cuda::map("activation backward", n, cuda::ActGradOp{int(act), alpha, G, Y, dX, cuda::DropStream{}, 0, 1.f, false});
}
inline void dropout_act_grad(ActKind act, float alpha, const float *G, const float *Y, idx_t n, float p,
                             uint64_t seed, uint64_t epoch, uint64_t site, float *dX) {
    if (p <= 0.f) return act_grad(act, alpha, G, Y, n, dX);
    cuda::map("dropout + activation backward", n,
              cuda::ActGradOp{int(act), alpha, G, Y, dX, cuda::DropStream::of(DropoutKey{seed, epoch, site}),
                              dropout_detail::drop_threshold(p), 1.0f / (1.0f - p), true});
}
inline void feature_sum(const float *G, idx_t rows, idx_t F, float *out) {
    cuda::launch("feature sum (row_total_kernel)", cuda::row_total_kernel, dim3(cuda::warp_blocks(rows)),
                 dim3(cuda::kThreads), G, out, rows, F);
}
inline void copy(const float *x, float *y, idx_t n) {
    if (x != y && n > 0) cuda::copy_async(y, x, sizeof(float) * size_t(n), cudaMemcpyDeviceToDevice, "copy");
}

// ---- dropout, loss, accuracy ------------------------------------------------------------------------
inline void dropout(bool training, const float *X, float *Y, idx_t n, float p, uint64_t seed, uint64_t epoch,
                    uint64_t site) {
    if (training && p > 0.f) dropout_rows("dropout", X, Y, n, 1, nullptr, p, DropoutKey{seed, epoch, site});
    else copy(X, Y, n);
}
inline void dropout_grad(const float *G, float *dX, idx_t n, float p, uint64_t seed, uint64_t epoch, uint64_t site) {
    if (p > 0.f) dropout_rows("dropout backward", G, dX, n, 1, nullptr, p, DropoutKey{seed, epoch, site});
    else copy(G, dX, n);
}

inline cuda::DeviceArray<double> &reduce_partials() {
    static cuda::DeviceArray<double> partials;
    if (partials.size() < cuda::kReduceBlocks) partials.allocate(cuda::kReduceBlocks);
    return partials;
}
inline void cross_entropy_impl(const float *logits, const int64_t *labels, const uint8_t *mask, idx_t rows, idx_t C,
                               float *loss, float *dlogits) {
    const int64_t n = mask_count(mask, rows);
    const float inv_n = n > 0 ? 1.0f / float(n) : 0.f;
    const unsigned blocks = std::min<unsigned>(cuda::kReduceBlocks, cuda::warp_blocks(rows));
    double *partial = reduce_partials().data();
    cuda::launch("softmax cross-entropy (cross_entropy_kernel)", cuda::cross_entropy_kernel, dim3(blocks),
                 dim3(cuda::kThreads), logits, labels, mask, rows, C, inv_n, dlogits, partial);
    if (loss)
        cuda::launch("softmax cross-entropy (finish_sum_kernel)", cuda::finish_sum_kernel, dim3(1), dim3(32),
                     (const double *)partial, int(blocks), n > 0 ? 1.0 / double(n) : 0.0, loss);
}
inline void cross_entropy(const float *logits, const int64_t *labels, const uint8_t *mask, idx_t rows, idx_t C,
                          float *loss) {
    cross_entropy_impl(logits, labels, mask, rows, C, loss, nullptr);
}
inline void cross_entropy_grad(const float *logits, const int64_t *labels, const uint8_t *mask, idx_t rows, idx_t C,
                               float *dlogits) {
    cross_entropy_impl(logits, labels, mask, rows, C, nullptr, dlogits);
}
inline double accuracy(const float *logits, const int64_t *labels, const uint8_t *mask, idx_t rows, idx_t C) {
    const int64_t n = mask_count(mask, rows);
    static cuda::DeviceArray<unsigned long long> counter;
    if (counter.size() < 1) counter.allocate(1);
    cuda::check(cudaMemset(counter.data(), 0, sizeof(unsigned long long)), "accuracy");
    cuda::launch("accuracy (count_correct_kernel)", cuda::count_correct_kernel, dim3(cuda::blocks_for(rows)),
                 dim3(cuda::kThreads), logits, labels, mask, rows, C, counter.data());
    unsigned long long correct = 0;
    cuda::check(cudaMemcpy(&correct, counter.data(), sizeof correct, cudaMemcpyDeviceToHost), "accuracy");
    return n ? double(correct) / double(n) : 0.0;
}

// ---- link prediction: DistMult over the epoch's triples (kernels/link.cuh) ---------------------------
inline void link_loss(const float *z, idx_t rows, const float *R, idx_t rel_rows, idx_t H, const int64_t *triples,
                      idx_t count, float reg, float *loss) {
    require_triples(triples, count);
    static cuda::DeviceArray<double> partials;     // bce, z^2 and R^2 partial sums, kReduceBlocks each
    if (partials.size() < 3 * cuda::kReduceBlocks) partials.allocate(3 * cuda::kReduceBlocks);
    double *bce = partials.data(), *zz = bce + cuda::kReduceBlocks, *rr = zz + cuda::kReduceBlocks;
    const unsigned bce_blocks = std::min<unsigned>(cuda::kReduceBlocks, cuda::warp_blocks(count));
    cuda::launch("link loss (distmult_bce_kernel)", cuda::distmult_bce_kernel, dim3(bce_blocks), dim3(cuda::kThreads),
                 z, R, H, triples, count, bce);
    unsigned square_blocks = 0;
    if (reg > 0.f) {
        square_blocks = std::min<unsigned>(cuda::kReduceBlocks, cuda::blocks_for(std::max(rows, rel_rows) * H));
        cuda::launch("link loss (square_sum_kernel, embeddings)", cuda::square_sum_kernel, dim3(square_blocks),
                     dim3(cuda::kThreads), z, rows * H, zz);
        cuda::launch("link loss (square_sum_kernel, relations)", cuda::square_sum_kernel, dim3(square_blocks),
                     dim3(cuda::kThreads), R, rel_rows * H, rr);
    }
    cuda::launch("link loss (link_loss_finish_kernel)", cuda::link_loss_finish_kernel, dim3(1), dim3(32),
                 (const double *)bce, int(bce_blocks), (const double *)zz, (const double *)rr, int(square_blocks),
                 count, rows * H, rel_rows * H, reg, loss);
}
// dX = 2 reg X / numel(X), then each triple's score gradient added into its rows (dz or dR).
inline void link_grad(const char *name, const float *z, const float *R, idx_t H, const int64_t *triples, idx_t count,
                      const float *X, idx_t numel, float reg, float *dz, float *dR) {
    require_triples(triples, count);
    cuda::launch(name, cuda::l2_grad_kernel, dim3(cuda::stride_blocks(numel)), dim3(cuda::kThreads), X, numel,
                 numel ? 2.0 * double(reg) / double(numel) : 0.0, dz ? dz : dR);
    // a warp per triple: as many blocks as a grid-stride loop over 32 threads per triple takes
    cuda::launch(name, cuda::distmult_grad_kernel, dim3(cuda::stride_blocks(count * 32)), dim3(cuda::kThreads), z, R,
                 H, triples, count, dz, dR);
}
inline void link_loss_grad(const float *z, idx_t rows, const float *R, idx_t H, const int64_t *triples, idx_t count,
                           float reg, float *dz) {
    link_grad("link loss backward (embeddings)", z, R, H, triples, count, z, rows * H, reg, dz, nullptr);
}
inline void link_loss_rel_grad(const float *z, const float *R, idx_t rel_rows, idx_t H, const int64_t *triples,
                               idx_t count, float reg, float *dR) {
    link_grad("link loss backward (relations)", z, R, H, triples, count, R, rel_rows * H, reg, nullptr, dR);
}

inline void slice(const float *X, idx_t rows, idx_t cols, idx_t start, idx_t stop, float *Y) {
    cuda::map("slice", rows * (stop - start), cuda::CopyColsOp{X, cols, start, Y, stop - start, 0, stop - start});
}
// Row blocks [rows_i, M] stacked into one [sum rows_i, M] array (parts: device pointers).
inline void row_concat(const float *const *parts, const idx_t *rows, int n, idx_t M, float *out) {
    for (int i = 0; i < n; ++i) {
        copy(parts[i], out, rows[i] * M);
        out += rows[i] * M;
    }
}

// ---- typed linear (Hector's gather/scatter GEMM) and featureless rows --------------------------------
// Output columns per thread of the typed GEMMs (1, 2 or 4): enough for one block to cover up to
// 64 columns.  $MORPHGEN_CUDA_TYPED_COARSEN=1|2|4 forces one, to time the choices on a GPU.
inline int typed_coarsening(idx_t N) {
    static const int forced = [] {
        const char *s = std::getenv("MORPHGEN_CUDA_TYPED_COARSEN");
        if (!s || !*s) return 0;
        const std::string v(s);
        if (v != "1" && v != "2" && v != "4")
            throw Error("$MORPHGEN_CUDA_TYPED_COARSEN must be 1, 2 or 4, not '" + v + "'");
        return std::stoi(v);
    }();
    if (forced) return forced;
    constexpr int T = cuda::kTypedTile;
    return N > 2 * T ? 4 : N > T ? 2 : 1;
}
template <int CN>
inline void typed_gemm_with(const char *name, const TypeGroups &tg, const float *A, idx_t K, cuda::TypedB B, idx_t N,
                            float *C, const idx_t *a_rows) {
    constexpr int T = cuda::kTypedTile;
    cuda::launch(name, cuda::typed_gemm_kernel<T, CN>, dim3(unsigned(tg.tiles), unsigned((N + T * CN - 1) / (T * CN))),
                 dim3(T, T), A, K, B, C, N, tg.perm, tg.ptr, tg.tile_type(), tg.tile_start(), a_rows);
}
// a_rows: a second gather list (C's row r reads A's row a_rows[r]), or nullptr.
inline void typed_gemm(const char *name, const TypeGroups &tg, const float *A, idx_t K, cuda::TypedB B, idx_t N,
                       float *C, const idx_t *a_rows = nullptr) {
    switch (typed_coarsening(N)) {
        case 4: return typed_gemm_with<4>(name, tg, A, K, B, N, C, a_rows);
        case 2: return typed_gemm_with<2>(name, tg, A, K, B, N, C, a_rows);
        default: return typed_gemm_with<1>(name, tg, A, K, B, N, C, a_rows);
    }
}
inline void typed_linear(const TypeGroups &tg, const float *X, idx_t K, const float *W, idx_t M, float *Y) {
    typed_gemm("typed linear (typed_gemm_kernel)", tg, X, K, cuda::TypedB{W, K * M, M, 1}, M, Y);
}
inline void typed_matmul_nt(const TypeGroups &tg, const float *G, idx_t M, const float *W, idx_t K, float *dX) {
    typed_gemm("typed linear input gradient (typed_gemm_kernel)", tg, G, M, cuda::TypedB{W, K * M, 1, M}, K, dX);
}
template <int CN>
inline void typed_weight_grad_with(const TypeGroups &tg, const float *X, idx_t K, const float *G, idx_t M, float *dW,
                                   const idx_t *x_rows) {
    constexpr int T = cuda::kTypedTile;
    const idx_t k_tiles = (K + T - 1) / T;
    float *partial = tg.partials(K * M);
    if (tg.chunks > 0)
        cuda::launch("typed linear weight gradient (typed_weight_grad_kernel)", cuda::typed_weight_grad_kernel<T, CN>,
                     dim3(unsigned(tg.chunks * k_tiles), unsigned((M + T * CN - 1) / (T * CN))), dim3(T, T), X, K, G,
                     M, tg.perm, tg.chunk_bound(), k_tiles, partial, x_rows);
    cuda::map("typed linear weight gradient: the chunks' sums", tg.types * K * M,
              cuda::TypedChunkSumOp{partial, tg.chunk_ptr(), K * M, dW});
}
// x_rows: X's row for G's row r is x_rows[r] (nullptr: r).
inline void typed_matmul_tn(const TypeGroups &tg, const float *X, idx_t K, const float *G, idx_t M, float *dW,
                            const idx_t *x_rows = nullptr) {
    switch (typed_coarsening(M)) {
        case 4: return typed_weight_grad_with<4>(tg, X, K, G, M, dW, x_rows);
        case 2: return typed_weight_grad_with<2>(tg, X, K, G, M, dW, x_rows);
        default: return typed_weight_grad_with<1>(tg, X, K, G, M, dW, x_rows);
    }
}
inline void typed_row_sum(const TypeGroups &tg, const float *G, idx_t K, float *out) {
    float *partial = tg.partials(K);
    cuda::map("typed row sum: each chunk's rows", tg.chunks * K,
              cuda::TypedRowSumOp{G, tg.perm, tg.chunk_bound(), K, partial});
    cuda::map("typed row sum: the chunks' sums", tg.types * K, cuda::TypedChunkSumOp{partial, tg.chunk_ptr(), K, out});
}

// ---- typed linear of node rows read at edge ends (runtime/edge_rows.h) --------------------------------
// The layout built on the host from the graph's arrays, uploaded once; the products and the rows'
// gradients live in scratch grown to the widest op that uses the layout.
struct EdgeTypedRows {
    TypeGroups groups;          // the product rows by type (type-major already: perm is the identity)
    cuda::DeviceArray<idx_t> row_node_, edge_ptr_, edges_, row_of_edge_, node_ptr_, node_rows_;
    RowSplitPlan edge_split_, node_split_;    // long segments of edge_ptr and node_ptr (segment_sum)
    cuda::DeviceArray<float> product_, row_grad_, row_dx_;
    // CSR feature rows: their nonzeros by (type, column), for the weight gradient without atomics
    // (built on first use, edge_typed_feature_columns), and the product rows whose feature row is
    // long, walked in pieces (built on first use, edge_typed_feature_rows).
    SparseFeatureBlocks by_type_column;
    RowSplitPlan feature_row_split_;
    bool feature_rows_planned_ = false;
    idx_t product_rows = 0, nodes = 0;
    idx_t rows() const { return product_rows; }
    int64_t bytes() const {
        return groups.bytes() + row_node_.bytes() + edge_ptr_.bytes() + edges_.bytes() + row_of_edge_.bytes() +
               node_ptr_.bytes() + node_rows_.bytes() + edge_split_.bytes() + node_split_.bytes() + product_.bytes() +
               row_grad_.bytes() + row_dx_.bytes() + by_type_column.bytes() + feature_row_split_.bytes();
    }
    float *scratch(cuda::DeviceArray<float> &a, idx_t n) {
        if (a.size() < n) a.allocate(n);
        return a.data();
    }
};
// The rows of a typed product of B diagonal blocks per type, grouped by type (type: device
// memory): block b of row r is row r*B + b of type type[r]*B + b (runtime/edge_rows.h).
inline void build_blocked_groups(TypeGroups &groups, const idx_t *type, idx_t rows, idx_t num_types, idx_t blocks) {
    std::vector<idx_t> host(static_cast<size_t>(rows)), type_b;
    if (rows) cuda::check(cudaMemcpy(host.data(), type, sizeof(idx_t) * host.size(), cudaMemcpyDefault), "type groups");
    expand_block_types(host.data(), rows, blocks, type_b);
    groups.build(type_b.data(), rows * blocks, num_types * blocks);
}

// end, type: the graph's arrays (device memory) of the node each edge reads and its type.
// blocks: the product's weights are block diagonal, B blocks per type (runtime/edge_rows.h); the
// kernels then take K and M of one block.
inline void build_edge_typed_rows(EdgeTypedRows &p, const idx_t *end, const idx_t *type, const GraphView &g,
                                  bool compact, idx_t blocks = 1) {
    auto host = [&](const idx_t *d) {
        std::vector<idx_t> h(static_cast<size_t>(g.num_edges));
        if (g.num_edges)
            cuda::check(cudaMemcpy(h.data(), d, sizeof(idx_t) * h.size(), cudaMemcpyDefault), "edge typed linear rows");
        return h;
    };
    const std::vector<idx_t> e = host(end), t = host(type);
    EdgeRowLayout layout;
    if (!layout.build(e.data(), t.data(), g.num_edges, g.num_etypes, g.num_nodes, compact, cuda::kTypedTile, blocks))
        throw Error("edge typed linear rows: a node or edge type index is out of range");
    p.groups.build(layout.row_type.data(), layout.rows, layout.types);
    p.row_node_.upload(layout.row_node, "uploading edge typed linear rows");
    p.edge_ptr_.upload(layout.edge_ptr, "uploading edge typed linear rows");
    p.edges_.upload(layout.edges, "uploading edge typed linear rows");
    std::vector<idx_t> row_of_edge(layout.edges.size());
    for (idx_t r = 0; r < layout.rows; ++r)
        for (idx_t j = layout.edge_ptr[size_t(r)]; j < layout.edge_ptr[size_t(r + 1)]; ++j) row_of_edge[size_t(j)] = r;
    p.row_of_edge_.upload(row_of_edge, "uploading edge typed linear rows");
    p.node_ptr_.upload(layout.node_ptr, "uploading edge typed linear rows");
    p.node_rows_.upload(layout.node_rows, "uploading edge typed linear rows");
    p.product_rows = layout.rows;
    p.nodes = layout.node_count;
    const int64_t split = split_edges_setting();
    p.edge_split_.build(layout.edge_ptr.data(), layout.rows, split);
    p.node_split_.build(layout.node_ptr.data(), layout.node_count, split);
}
inline void edge_rows_collapse(EdgeTypedRows &p, const float *G, idx_t M, float *out) {
    segment_sum("edge typed linear: sum of each row's edge gradients (aggregate_kernel)", p.edge_ptr_.data(),
                p.edges_.data(), p.rows(), G, M, out, p.edge_split_);
}
inline void edge_typed_linear(EdgeTypedRows &p, const float *X, idx_t K, const float *W, idx_t M, float *Y) {
    float *product = p.scratch(p.product_, p.rows() * M);
    typed_gemm("edge typed linear (typed_gemm_kernel)", p.groups, X, K, cuda::TypedB{W, K * M, M, 1}, M, product,
               p.row_node_.data());
    cuda::map("edge typed linear: products to edges", p.edges_.size() * M,
              cuda::EdgeRowsExpandOp{product, p.row_of_edge_.data(), p.edges_.data(), M, Y});
}
// rows_summed: the other gradient of the same product ran just before and left G's row sums in
// row_grad_ (the emitter's plan_edge_typed_row_sums).
inline void edge_typed_linear_input_grad(EdgeTypedRows &p, const float *G, idx_t M, const float *W, idx_t K,
                                         float *dX, bool rows_summed = false) {
    float *grad = p.scratch(p.row_grad_, p.rows() * M), *dx_rows = p.scratch(p.row_dx_, p.rows() * K);
    if (!rows_summed) edge_rows_collapse(p, G, M, grad);
    typed_gemm("edge typed linear input gradient (typed_gemm_kernel)", p.groups, grad, M, cuda::TypedB{W, K * M, 1, M},
               K, dx_rows);
    segment_sum("edge typed linear input gradient: rows to nodes (aggregate_kernel)", p.node_ptr_.data(),
                p.node_rows_.data(), p.nodes, dx_rows, K, dX, p.node_split_);
}
inline void edge_typed_linear_weight_grad(EdgeTypedRows &p, const float *X, idx_t K, const float *G, idx_t M,
                                          float *dW, bool rows_summed = false) {
    float *grad = p.scratch(p.row_grad_, p.rows() * M);
    if (!rows_summed) edge_rows_collapse(p, G, M, grad);
    typed_matmul_tn(p.groups, X, K, grad, M, dW, p.row_node_.data());
}

// ---- the same products when x is the input features, read in their own format ---------------------
// Dense features are the dense case; CSR rows are read in place, so a relational program keeps
// the sparse feature path (R-GAT's and HGT's x_src * W[etype] on acm_heco's 97% sparse features).
// The product rows' long feature rows (more nonzeros than the split length), once: the plan is
// built over each product row's nonzero count, as if the rows' feature rows were one CSR.
inline void edge_typed_feature_rows(EdgeTypedRows &p, const FeatureView &f) {
    if (p.feature_rows_planned_) return;
    const std::vector<idx_t> row_node = p.row_node_.download();
    std::vector<int64_t> indptr(static_cast<size_t>(f.rows + 1)), nnz_ptr(row_node.size() + 1, 0);
    cuda::check(cudaMemcpy(indptr.data(), f.indptr, sizeof(int64_t) * indptr.size(), cudaMemcpyDeviceToHost),
                "edge typed linear rows of sparse features");
    for (size_t r = 0; r < row_node.size(); ++r)
        nnz_ptr[r + 1] = nnz_ptr[r] + indptr[size_t(row_node[r] + 1)] - indptr[size_t(row_node[r])];
    p.feature_row_split_.build(nnz_ptr.data(), idx_t(row_node.size()), split_edges_setting());
    p.feature_rows_planned_ = true;
}
inline void edge_typed_linear_features(EdgeTypedRows &p, const FeatureView &f, const float *W, idx_t M, float *Y) {
    if (f.kind == FeatureKind::Dense) return edge_typed_linear(p, f.dense, f.cols, W, M, Y);
    if (f.kind != FeatureKind::Csr) throw Error("edge typed linear of features: dense or CSR features expected");
    float *product = p.scratch(p.product_, p.rows() * M);
    edge_typed_feature_rows(p, f);
    launch_in_pieces("edge typed linear of sparse features (csr_typed_rows_kernel)", cuda::csr_typed_rows_kernel,
                     p.feature_row_split_, p.rows(), M, product, f.indptr, f.indices, f.data,
                     p.row_node_.data(), p.groups.ptr, p.groups.types, p.rows(), f.cols, W, M, product);
    cuda::map("edge typed linear: products to edges", p.edges_.size() * M,
              cuda::EdgeRowsExpandOp{product, p.row_of_edge_.data(), p.edges_.data(), M, Y});
}
// The nonzeros of the product rows' feature rows grouped by (row type, column), rows in order
// inside a group: column c of type t is group t * cols + c of a CSC-like copy (on the host, once).
inline void edge_typed_feature_columns(EdgeTypedRows &p, const FeatureView &f) {
    if (p.by_type_column.colptr.size() == p.groups.types * f.cols + 1) return;
    const std::vector<idx_t> row_node = p.row_node_.download(), type_ptr = p.groups.ptr_.download();
    const HostCsr h = download_csr(f);
    group_nonzeros(p.by_type_column, p.groups.types * f.cols, h.data, [&](auto visit) {
        for (idx_t t = 0; t < p.groups.types; ++t)
            for (idx_t r = type_ptr[size_t(t)]; r < type_ptr[size_t(t + 1)]; ++r) {
                const idx_t x = row_node[size_t(r)];
                for (int64_t k = h.indptr[size_t(x)]; k < h.indptr[size_t(x + 1)]; ++k)
                    visit(t * f.cols + h.indices[size_t(k)], r, k);
            }
    }, "uploading the edge typed rows' feature columns");
}
// dW [T, K, M]: dW[t][c, :] = sum over the rows r of type t whose feature row x_r has column c of
// x_r[c] times the sum of r's edge gradients: one group of threads per (t, c), its rows in order
// (no atomics).
inline void edge_typed_linear_weight_grad_features(EdgeTypedRows &p, const FeatureView &f, const float *G, idx_t M,
                                                   float *dW, bool rows_summed = false) {
    if (f.kind == FeatureKind::Dense) return edge_typed_linear_weight_grad(p, f.dense, f.cols, G, M, dW, rows_summed);
    if (f.kind != FeatureKind::Csr) throw Error("edge typed linear of features: dense or CSR features expected");
    float *grad = p.scratch(p.row_grad_, p.rows() * M);
    if (!rows_summed) edge_rows_collapse(p, G, M, grad);
    edge_typed_feature_columns(p, f);
    csc_weight_grad("edge typed linear weight gradient of sparse features (csc_weight_grad_kernel)", p.by_type_column,
                    p.groups.types * f.cols, grad, M, dW, cuda::FeatureDrop{});
}

// The lookups of a featureless input grouped by the table row they read (on the host, once).
struct EmbeddingPlan {
    cuda::DeviceArray<idx_t> order_, key_ptr_, keys_;
    idx_t unique = 0;
    mutable cuda::DeviceArray<uint8_t> row_has_grad_;   // per table row: a key (adam_rows; built on first use)
    mutable RowSplitPlan key_split_;                    // long segments of key_ptr (segment_sum)
    void build(const idx_t *type, const idx_t *rows, idx_t R, idx_t num_types, idx_t rows_per_type) {
        auto host = [&](const idx_t *d) {      // device arrays (the graph's) read back once
            std::vector<idx_t> h;
            if (d) {
                h.resize(static_cast<size_t>(R));
                cuda::check(cudaMemcpy(h.data(), d, sizeof(idx_t) * size_t(R), cudaMemcpyDeviceToHost), "embedding plan");
            }
            return h;
        };
        const std::vector<idx_t> t = host(type), s = host(rows);
        std::vector<idx_t> key(static_cast<size_t>(R)), order(static_cast<size_t>(R)), key_ptr, keys;
        for (idx_t r = 0; r < R; ++r) {
            const idx_t tr = type ? t[size_t(r)] : 0, sr = rows ? s[size_t(r)] : 0;
            if (tr < 0 || tr >= num_types || sr < 0 || sr >= rows_per_type)
                throw Error("embedding plan: a type or row index is out of range");
            key[size_t(r)] = tr * rows_per_type + sr;
        }
        std::iota(order.begin(), order.end(), idx_t(0));
        std::stable_sort(order.begin(), order.end(), [&](idx_t a, idx_t b) { return key[size_t(a)] < key[size_t(b)]; });
        for (idx_t i = 0; i < R; ++i)
            if (i == 0 || key[size_t(order[size_t(i)])] != key[size_t(order[size_t(i - 1)])]) {
                keys.push_back(key[size_t(order[size_t(i)])]);
                key_ptr.push_back(i);
            }
        key_ptr.push_back(R);
        unique = idx_t(keys.size());
        order_.upload(order, "uploading an embedding plan");
        key_ptr_.upload(key_ptr, "uploading an embedding plan");
        keys_.upload(keys, "uploading an embedding plan");
        key_split_.build(key_ptr.data(), unique, split_edges_setting());
    }
    int64_t bytes() const {
        return order_.bytes() + key_ptr_.bytes() + keys_.bytes() + row_has_grad_.bytes() + key_split_.bytes();
    }
    // 1 for the table rows the lookups read, 0 for the others.
    const uint8_t *rows_with_gradient(idx_t table_rows) const {
        if (row_has_grad_.size() != table_rows) {
            std::vector<uint8_t> flags(static_cast<size_t>(table_rows), 0);
            for (idx_t k : keys_.download()) flags[size_t(k)] = 1;
            row_has_grad_.upload(flags, "uploading an embedding plan's rows");
        }
        return row_has_grad_.data();
    }
};
inline void embedding_rows(const float *W, const idx_t *type, const idx_t *idx, idx_t R, idx_t rows_per_type, idx_t M,
                           float *Y) {
    cuda::map("embedding rows", R * M, cuda::EmbeddingRowsOp{W, type, idx, rows_per_type, M, Y});
}
// The gradient of the rows the lookups read (plan.keys_); the others are left as they were, for
// an optimizer that reads those rows only (adam_rows).
inline void embedding_rows_grad_rows(const EmbeddingPlan &plan, const float *G, idx_t M, float *dW) {
    segment_sum("embedding rows gradient (aggregate_kernel)", plan.key_ptr_.data(), plan.order_.data(), plan.unique, G,
                M, dW, plan.key_split_, false, plan.keys_.data());
}
inline void embedding_rows_grad(const EmbeddingPlan &plan, const float *G, idx_t table_rows, idx_t M, float *dW) {
    cuda::fill_async(dW, 0, sizeof(float) * size_t(table_rows * M), "embedding rows gradient");
    embedding_rows_grad_rows(plan, G, M, dW);
}
// The lookups of a typed linear with bases on featureless input, grouped once at load time by
// (row, type) in row order (the same plan as the OpenMP backend's); row_start: each distinct row's
// first segment, so that one thread owns a row of the bases' gradient.
struct BasisLookupPlan {
    EmbeddingPlan by_row;
    cuda::DeviceArray<idx_t> row_start_, segment_of_;   // segment_of_: each lookup's segment, in segment order
    mutable cuda::DeviceArray<float> segment_sums_;     // [segments, M]: G summed per segment (segment_sum)
    idx_t types = 0, rows = 0;
    void build(const idx_t *type, const idx_t *row, idx_t R, idx_t num_types, idx_t num_rows) {
        by_row.build(row, type, R, num_rows, num_types);
        const std::vector<idx_t> keys = by_row.keys_.download();
        std::vector<idx_t> starts;
        for (size_t k = 0; k < keys.size(); ++k)
            if (k == 0 || keys[k] / num_types != keys[k - 1] / num_types) starts.push_back(idx_t(k));
        starts.push_back(idx_t(keys.size()));
        row_start_.upload(starts, "uploading a basis lookup plan");
        const std::vector<idx_t> key_ptr = by_row.key_ptr_.download();
        std::vector<idx_t> segment_of(static_cast<size_t>(R));
        for (size_t u = 0; u + 1 < key_ptr.size(); ++u)
            for (idx_t i = key_ptr[u]; i < key_ptr[u + 1]; ++i) segment_of[size_t(i)] = idx_t(u);
        segment_of_.upload(segment_of, "uploading a basis lookup plan");
        types = num_types;
        rows = idx_t(starts.size()) - 1;
    }
    // G's rows summed per segment (one distinct (row, type) pair), long segments split; summed:
    // the other gradient of the same G made them just before (the emitter passes it where a
    // backend shares_basis_lookup_sums), so they are read as they are.
    const float *sum_segments(const float *G, idx_t M, bool summed) const {
        if (summed) return segment_sums_.data();
        if (segment_sums_.size() < by_row.unique * M) segment_sums_.allocate(by_row.unique * M);
        segment_sum("basis lookup gradient: sums per (row, type) (aggregate_kernel)", by_row.key_ptr_.data(),
                    by_row.order_.data(), by_row.unique, G, M, segment_sums_.data(), by_row.key_split_);
        return segment_sums_.data();
    }
    int64_t bytes() const { return by_row.bytes() + row_start_.bytes() + segment_of_.bytes() + segment_sums_.bytes(); }
};
inline void basis_lookup(const BasisLookupPlan &plan, const float *A, const float *V, idx_t B, idx_t P, idx_t M,
                         float *Y) {
    const EmbeddingPlan &p = plan.by_row;
    cuda::map("basis lookup", p.order_.size() * M, cuda::BasisLookupOp{A, V, p.order_.data(), plan.segment_of_.data(),
                                                                     p.keys_.data(), plan.types, B, P, M, Y});
}
inline void basis_lookup_coef_grad(const BasisLookupPlan &plan, const float *V, const float *G, idx_t B, idx_t P,
                                   idx_t M, float *dA, bool summed = false) {
    const EmbeddingPlan &p = plan.by_row;
    const float *sums = plan.sum_segments(G, M, summed);
    cuda::fill_async(dA, 0, sizeof(float) * size_t(plan.types * B), "basis lookup coefficient gradient");
    cuda::map("basis lookup coefficient gradient", p.unique * B,
              cuda::BasisCoefGradOp{V, sums, p.keys_.data(), plan.types, B, P, M, dA});
}
inline void basis_lookup_bases_grad(const BasisLookupPlan &plan, const float *A, const float *G, idx_t B, idx_t P,
                                    idx_t M, float *dV, bool summed = false) {
    const EmbeddingPlan &p = plan.by_row;
    const float *sums = plan.sum_segments(G, M, summed);
    cuda::fill_async(dV, 0, sizeof(float) * size_t(B * P * M), "basis lookup bases gradient");
    cuda::map("basis lookup bases gradient", plan.rows * M,
              cuda::BasisBasesGradOp{A, sums, p.keys_.data(), plan.row_start_.data(), plan.types, B, P, M, dV});
}

// The dataset's edge weights (e.edge_weight), in the edge order of every per-edge value.
inline void edge_weight(const Graph &g, float *out) {
    const GraphView &v = g.host;
    if (!v.weight) throw Error("the program reads e.edge_weight, but the graph has no edge weights");
    upload_floats(std::vector<float>(v.weight, v.weight + v.num_edges), out, "edge weights");
}

// R-GCN's c_{i,r}: for the edge e into v of type r, the number of v's in-edges of type r.
inline void rel_degree(const Graph &g, float *out) {
    const GraphView &v = g.host;
    std::vector<float> h(static_cast<size_t>(v.num_edges));
    std::vector<idx_t> seen;
    for (idx_t n = 0; n < v.num_nodes; ++n) {
        seen.clear();
        for (idx_t e = v.indptr[n]; e < v.indptr[n + 1]; ++e) seen.push_back(v.etype ? v.etype[e] : 0);
        std::sort(seen.begin(), seen.end());
        for (idx_t e = v.indptr[n]; e < v.indptr[n + 1]; ++e) {
            auto range = std::equal_range(seen.begin(), seen.end(), v.etype ? v.etype[e] : 0);
            h[size_t(e)] = float(range.second - range.first);
        }
    }
    upload_floats(h, out, "relation degrees");
}
inline void matvec(const float *W, const float *a, idx_t T, idx_t K, idx_t M, float *out) {
    cuda::map("matvec", T * K, cuda::MatvecOp{W, a, K, M, out});
}
inline void matvec_t(const float *W, const float *g, idx_t T, idx_t K, idx_t M, float *out) {
    cuda::map("matvec_t", T * M, cuda::MatvecTOp{W, g, K, M, out});
}
inline void outer(const float *g, const float *a, idx_t T, idx_t K, idx_t M, float *out) {
    cuda::map("outer", T * K * M, cuda::OuterOp{g, a, K, M, out});
}

// ---- optimizers (torch.optim semantics) -------------------------------------------------------------
inline cuda::AdamOp adam_op(bool decoupled, float *p, const float *g, float *m, float *v, double lr, double b1,
                            double b2, double eps, double wd, int64_t step) {
    const double bc1 = 1.0 - std::pow(b1, double(step)), bc2 = 1.0 - std::pow(b2, double(step));
    return cuda::AdamOp{p, m, v, g, float(lr / bc1), float(std::sqrt(bc2)), float(1.0 - b1), float(b2),
                        float(1.0 - b2), float(eps), decoupled ? 0.f : float(wd), decoupled ? float(1.0 - lr * wd) : 1.f,
                        lr, b1, b2, step};
}
inline void adam(bool decoupled, float *p, const float *g, float *m, float *v, idx_t n, double lr, double b1,
                 double b2, double eps, double wd, int64_t step) {
    cuda::map(decoupled ? "adamw" : "adam", n, adam_op(decoupled, p, g, m, v, lr, b1, b2, eps, wd, step));
}
// Adam / AdamW on a [rows, M] table whose gradient holds only plan.keys_' rows (embedding_rows_grad_rows).
inline void adam_rows(bool decoupled, float *p, const float *g, float *m, float *v, idx_t rows, idx_t M,
                      const EmbeddingPlan &plan, double lr, double b1, double b2, double eps, double wd, int64_t step) {
    cuda::AdamOp op = adam_op(decoupled, p, g, m, v, lr, b1, b2, eps, wd, step);
    op.row_has_grad = plan.rows_with_gradient(rows);
    op.width = M;
    cuda::map(decoupled ? "adamw (looked-up rows)" : "adam (looked-up rows)", rows * M, op);
}
inline void sgd(float *p, const float *g, float *buf, idx_t n, double lr, double momentum, double wd, int64_t step) {
    cuda::map("sgd", n, cuda::SgdOp{p, buf, g, float(lr), float(wd), float(momentum), step});
}

}  // namespace op

// ---- elementwise calls the generated code makes outside mg::op (OpenMP: kernels/elementwise.h) -----
inline void unary(const char *name, cuda::Unary kind, const float *x, float *y, int64_t n, float c = 0.f) {
    cuda::map(name, n, cuda::UnaryOp{kind, x, y, c});
}
inline void relu_fwd(const float *x, float *y, int64_t n) { unary("relu", cuda::Unary::Relu, x, y, n); }
inline void leaky_relu_fwd(const float *x, float *y, int64_t n, float a) { unary("leaky_relu", cuda::Unary::LeakyRelu, x, y, n, a); }
inline void elu_fwd(const float *x, float *y, int64_t n, float a) { unary("elu", cuda::Unary::Elu, x, y, n, a); }
inline void exp_fwd(const float *x, float *y, int64_t n) { unary("exp", cuda::Unary::Exp, x, y, n); }
inline void sigmoid_fwd(const float *x, float *y, int64_t n) { unary("sigmoid", cuda::Unary::Sigmoid, x, y, n); }
inline void tanh_fwd(const float *x, float *y, int64_t n) { unary("tanh", cuda::Unary::Tanh, x, y, n); }
inline void neg_fwd(const float *x, float *y, int64_t n) { unary("neg", cuda::Unary::Neg, x, y, n); }
inline void scale(const float *x, float *y, int64_t n, float c) { unary("scale", cuda::Unary::Scale, x, y, n, c); }

inline void math_fwd(MathFn fn, float c, const float *x, float *y, int64_t n) {
    cuda::map("math", n, cuda::MathOp{fn, c, x, nullptr, y});
}
inline void math_bwd(MathFn fn, float c, const float *gy, const float *x, float *gx, int64_t n) {
    cuda::map("math backward", n, cuda::MathOp{fn, c, x, gy, gx});
}
inline void row_softmax_fwd(const float *x, float *y, int64_t rows, int64_t cols, bool log) {
    cuda::launch("row softmax (row_softmax_kernel)", cuda::row_softmax_kernel, dim3(cuda::warp_blocks(rows)),
                 dim3(cuda::kThreads), x, (const float *)nullptr, y, rows, cols, log);
}
inline void row_softmax_bwd(const float *y, const float *g, float *gx, int64_t rows, int64_t cols, bool log) {
    cuda::launch("row softmax backward (row_softmax_kernel)", cuda::row_softmax_kernel, dim3(cuda::warp_blocks(rows)),
                 dim3(cuda::kThreads), y, g, gx, rows, cols, log);
}
// out[rows, sum(widths)] = [parts[0] | parts[1] | ...]  (parts: device pointers).
inline void concat_fwd(const float *const *parts, const int64_t *widths, int64_t nparts, float *out, int64_t rows) {
    int64_t total = 0, off = 0;
    for (int64_t p = 0; p < nparts; ++p) total += widths[p];
    for (int64_t p = 0; p < nparts; ++p) {
        cuda::map("concat", rows * widths[p], cuda::CopyColsOp{parts[p], widths[p], 0, out, total, off, widths[p]});
        off += widths[p];
    }
}

inline void binary_fwd(BinOp op, const float *a, Bcast sa, const float *b, Bcast sb, float *out, int64_t rows,
                       int64_t cols, const Epilogue &epi = Epilogue{}) {
    cuda::map("binary op", rows * cols, cuda::BinaryOp{op, a, b, sa, sb, out, cols});
    op::apply_epilogue("binary op epilogue", out, rows, cols, epi);
}
// epi(ca * a + cb * b): an add or sub with its constant scales (the emitter's plan_scaled_operands).
inline void scaled_add(float ca, const float *a, float cb, const float *b, float *out, int64_t rows, int64_t cols,
                       const Epilogue &epi = Epilogue{}) {
    cuda::map("scaled add (ScaledAddOp)", rows * cols, cuda::ScaledAddOp{ca, a, cb, b, out});
    op::apply_epilogue("scaled add epilogue", out, rows, cols, epi);
}
inline void bias_add(const float *x, const float *bias, float *y, int64_t rows, int64_t cols) {
    binary_fwd(BinOp::Add, x, Bcast::Full, bias, Bcast::Row, y, rows, cols);
}
inline void row_sum(const float *x, float *out, int64_t rows, int64_t cols) {
    cuda::column_sums_of("row sum (column_partial_kernel)", cuda::StoredValue{x, cols}, rows, cols, out);
}
// row_sum(head_mul(x, s)) without the products stored (the emitter's plan_head_products).
inline void head_mul_row_sum(const float *x, const float *s, float *out, int64_t rows, int64_t heads, int64_t dim) {
    cuda::column_sums_of("per-head products summed over rows (column_partial_kernel)",
                         cuda::HeadProductValue{x, s, heads, dim}, rows, heads * dim, out);
}
inline void rowwise_dot_fwd(const float *a, const float *b, bool b_is_row, float *out, int64_t rows, int64_t heads,
                            int64_t dim) {
    cuda::launch("rowwise dot (rowwise_dot_kernel)", cuda::rowwise_dot_kernel, dim3(cuda::warp_blocks(rows * heads)),
                 dim3(cuda::kThreads), a, b, b_is_row, out, rows, heads, dim);
}
inline void head_mul(const float *x, bool x_is_row, const float *s, float *out, int64_t rows, int64_t heads,
                     int64_t dim) {
    cuda::map("per-head scaling (HeadProductsOp)", rows * heads * dim,
              cuda::HeadProductsOp<false>{nullptr, x, x_is_row, s, out, heads, dim});
}
// base + head_mul(x, s) in one map (the emitter's plan_head_products).
inline void head_mul_add(const float *base, const float *x, bool x_is_row, const float *s, float *out, int64_t rows,
                         int64_t heads, int64_t dim) {
    cuda::map("per-head scaling added (HeadProductsOp)", rows * heads * dim,
              cuda::HeadProductsOp<true>{base, x, x_is_row, s, out, heads, dim});
}
inline void head_sum(const float *x, float c, float *out, int64_t rows, int64_t heads, int64_t dim) {
    cuda::map("sum over heads (HeadSumOp)", rows * dim, cuda::HeadSumOp{x, c, out, heads, dim});
}
inline void head_repeat(const float *g, float c, float *out, int64_t rows, int64_t heads, int64_t dim) {
    cuda::map("copy to every head (HeadRepeatOp)", rows * heads * dim, cuda::HeadRepeatOp{g, c, out, heads, dim});
}
// Lanes per (destination, head) pair of the edge softmax kernels (edges.cuh, LaneGroup): the
// fewest of 4, 8, 16 and 32 that give each lane about one in-edge at the graph's average
// in-degree.  $MORPHGEN_CUDA_SOFTMAX_LANES=4|8|16|32 forces one, to time the choices on a GPU.
inline int softmax_lanes(int64_t num_nodes, int64_t num_edges) {
    if (const char *env = std::getenv("MORPHGEN_CUDA_SOFTMAX_LANES"); env && *env) {
        const std::string v(env);
        if (v != "4" && v != "8" && v != "16" && v != "32")
            throw Error("$MORPHGEN_CUDA_SOFTMAX_LANES must be 4, 8, 16 or 32, not '" + v + "'");
        return std::stoi(v);
    }
    const int64_t degree = num_nodes > 0 ? (num_edges + num_nodes - 1) / num_nodes : 0;
    return degree <= 4 ? 4 : degree <= 8 ? 8 : degree <= 16 ? 16 : 32;
}
// Destinations with more in-edges than this get a block per (destination, head) in the edge
// softmaxes (edges.cuh, BlockGroup): by default 8 per lane of the lane groups, so that no lane
// walks more than 8 edges; $MORPHGEN_CUDA_SOFTMAX_BLOCK_EDGES sets it (0: every destination
// with an in-edge gets blocks).
inline int64_t softmax_block_edges(int lanes) {
    return edges_setting("MORPHGEN_CUDA_SOFTMAX_BLOCK_EDGES", 8 * int64_t(lanes));
}
// Calls fn(G, grid, long_rows, long_edges) for the lane groups (G the lanes per pair, a
// compile-time constant, a group per (destination, head) pair, the long rows skipped), then, when
// the graph has long rows, for the blocks (G = 0, a block per (long row, head)).
template <class Fn>
inline void with_softmax_groups(const op::Graph &g, int64_t H, Fn fn) {
    const int64_t nodes = g.dev.num_nodes;
    const int lanes = softmax_lanes(nodes, g.dev.num_edges);
    const int64_t long_edges = softmax_block_edges(lanes);
    const auto &long_rows = g.softmax_long_rows(long_edges);
    const idx_t *rows = long_rows.rows.data();
    const dim3 grid(cuda::blocks_for(nodes * H * lanes));
    switch (lanes) {
        case 4: fn(std::integral_constant<int, 4>{}, grid, rows, long_edges); break;
        case 8: fn(std::integral_constant<int, 8>{}, grid, rows, long_edges); break;
        case 16: fn(std::integral_constant<int, 16>{}, grid, rows, long_edges); break;
        default: fn(std::integral_constant<int, 32>{}, grid, rows, long_edges); break;
    }
    if (long_rows.count > 0) fn(std::integral_constant<int, 0>{}, dim3(unsigned(long_rows.count * H)), rows, long_edges);
}

inline void edge_softmax_fwd(const float *s, const int64_t *indptr, int64_t num_nodes, int64_t H, float *alpha,
                             const op::Graph &g) {
    with_softmax_groups(g, H, [&](auto lanes, dim3 grid, const idx_t *rows, int64_t long_edges) {
        cuda::launch("edge softmax (edge_softmax_kernel)", cuda::edge_softmax_kernel<decltype(lanes)::value>, grid,
                     dim3(cuda::kThreads), s, indptr, num_nodes, H, alpha, rows, long_edges);
    });
}
inline void edge_attention_fwd(const float *a, const float *b, const int64_t *indptr, const int64_t *col,
                               int64_t num_nodes, int64_t H, float slope, float *s, float *alpha, const op::Graph &g) {
    with_softmax_groups(g, H, [&](auto lanes, dim3 grid, const idx_t *rows, int64_t long_edges) {
        cuda::launch("attention scores and edge softmax (edge_attention_kernel)",
                     cuda::edge_attention_kernel<decltype(lanes)::value>, grid, dim3(cuda::kThreads), a, b, indptr,
                     col, num_nodes, H, slope, s, alpha, rows, long_edges);
    });
}
inline void edge_softmax_act_bwd(const float *g, float p, DropoutKey key, const int64_t *edge_ids, const float *alpha,
                                 const float *s, float slope, const int64_t *indptr, int64_t num_nodes, int64_t H,
                                 float *de, float *dst_sum, const op::Graph &graph) {
    with_softmax_groups(graph, H, [&](auto lanes, dim3 grid, const idx_t *rows, int64_t long_edges) {
        cuda::launch("edge softmax backward with its dropout and leaky_relu (edge_softmax_act_grad_kernel)",
                     cuda::edge_softmax_act_grad_kernel<decltype(lanes)::value>, grid, dim3(cuda::kThreads), g, p,
                     key, edge_ids, alpha, s, slope, indptr, num_nodes, H, de, dst_sum, rows, long_edges);
    });
}
inline void edge_softmax_bwd(const float *alpha, const float *g, const int64_t *indptr, int64_t num_nodes, int64_t H,
                             float *ds, const op::Graph &graph) {
    edge_softmax_act_bwd(g, 0.0f, DropoutKey{0, 0, 0}, nullptr, alpha, nullptr, 1.0f, indptr, num_nodes, H, ds, nullptr,
                         graph);
}

}  // namespace mg
#endif

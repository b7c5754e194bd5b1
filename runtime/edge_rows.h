// The product rows of a typed linear of node rows read at one end of every edge (IR:
// edge_typed_linear, passes/edge_typed_linear.py), laid out on the host once at load time; every
// backend runs its kernels over this layout (OpenMP: kernels/edge_typed_linear.h, CUDA:
// ops.cuh).  Two layouts (Hector's materialisation choices):
//   * compact: one row per distinct (node, type) pair at that end;
//   * edge: one row per edge.
// Rows are type-major (type t owns rows [type_ptr[t], type_ptr[t+1])) and node-ordered inside a
// type; tiles of at most `tile_rows` rows never cross a type.  Host-only C++.
#ifndef MORPHGEN_EDGE_ROWS_H
#define MORPHGEN_EDGE_ROWS_H

#include <algorithm>
#include <vector>

#include "op_types.h"

namespace mg {

namespace edge_rows_detail {
// Stable counting sort of `n` items by key[item] in [0, buckets): order[n], ptr[buckets + 1].
// items == nullptr: the items are 0..n-1.
inline void counting_sort(const idx_t *key, const idx_t *items, idx_t n, idx_t buckets, idx_t *order, idx_t *ptr) {
    std::fill(ptr, ptr + buckets + 1, idx_t(0));
    for (idx_t i = 0; i < n; ++i) ++ptr[key[items ? items[i] : i] + 1];
    for (idx_t b = 0; b < buckets; ++b) ptr[b + 1] += ptr[b];
    std::vector<idx_t> next(ptr, ptr + buckets);
    for (idx_t i = 0; i < n; ++i) {
        const idx_t item = items ? items[i] : i;
        order[next[size_t(key[item])]++] = item;
    }
}
}  // namespace edge_rows_detail

// A typed product of B diagonal blocks per type as a plain one over B times the rows: block b of
// row i is row i*B + b, of type type(i)*B + b, reading node n's columns of block b as node
// n*B + b.  Row-major storage makes the views free: x [N, B*D] is x [N*B, D], W [T, B*D, M] is
// W [T*B, D, M] and the products [E, B*M] are [E*B, M].  out[i*B + b] = index[i]*B + b.
inline void expand_block_types(const idx_t *index, idx_t n, idx_t B, std::vector<idx_t> &out) {
    out.resize(size_t(n * B));
    for (idx_t i = 0; i < n; ++i)
        for (idx_t b = 0; b < B; ++b) out[size_t(i * B + b)] = index[i] * B + b;
}

struct EdgeRowLayout {
    bool compact = false;
    idx_t types = 0, rows = 0, edge_count = 0, node_count = 0;
    idx_t blocks = 1;                          // B: types, rows and edges above are B times the product's
    std::vector<idx_t> type_ptr;               // [T + 1]: rows of each type
    std::vector<idx_t> row_type, row_node;     // [R]: the type of row r and the node it reads
    std::vector<idx_t> edge_ptr, edges;        // [R + 1], [E]: the edges of each row
    std::vector<idx_t> edge_far;               // [E] or empty: node at the far end of edges[j]
    std::vector<idx_t> node_ptr, node_rows;    // [N + 1], [R]: the rows of each node (input gradient)
    std::vector<idx_t> tile_row, tile_type;    // [tiles + 1], [tiles]: tile starts, then the last end
    // Products stored by row (store_rows): one [B*M] row per distinct (node, type) pair, the
    // edges reading theirs by index, instead of a copy per edge.
    std::vector<idx_t> row_store;              // [R]: where product row r goes, in rows of M floats
    std::vector<idx_t> edge_row, edge_row_by_src;  // [E / B]: the stored row of each edge, by CSR
                                                   // position over destinations / over sources

    // end[E]: the node at the read end of each edge; type[E] in [0, T).  False if an index is out
    // of range.  blocks: the products' weights are block diagonal, B blocks per type; the rows
    // are then those of B times the edges (expand_block_types below), and the kernels run one
    // block wide.  far[E] (optional): the node at each edge's other end, kept in the rows' edge
    // order (edge_far) for gradients summed from node rows read there (gathered_row_sums).
    bool build(const idx_t *end, const idx_t *type, idx_t E, idx_t T, idx_t N, bool compact_rows, idx_t tile_rows,
               idx_t blocks = 1, const idx_t *far = nullptr) {
        if (blocks > 1) {
            std::vector<idx_t> end_b, type_b, far_b;
            expand_block_types(end, E, blocks, end_b);
            expand_block_types(type, E, blocks, type_b);
            if (far) expand_block_types(far, E, blocks, far_b);
            const bool ok = build(end_b.data(), type_b.data(), E * blocks, T * blocks, N * blocks, compact_rows,
                                  tile_rows, 1, far ? far_b.data() : nullptr);
            this->blocks = blocks;
            return ok;
        }
        this->blocks = 1;
        using edge_rows_detail::counting_sort;
        for (idx_t e = 0; e < E; ++e)
            if (end[e] < 0 || end[e] >= N || type[e] < 0 || type[e] >= T || (far && (far[e] < 0 || far[e] >= N)))
                return false;
        compact = compact_rows;
        types = T, edge_count = E, node_count = N;
        // Edges by (type, node): sorted by node, then stably by type.
        std::vector<idx_t> by_node(static_cast<size_t>(E)), node_start(static_cast<size_t>(N + 1));
        std::vector<idx_t> edge_type_ptr(static_cast<size_t>(T + 1));
        edges.resize(size_t(E));
        counting_sort(end, nullptr, E, N, by_node.data(), node_start.data());
        counting_sort(type, by_node.data(), E, T, edges.data(), edge_type_ptr.data());
        // Rows: one per edge, or one per run of edges with the same (type, node).
        edge_ptr.clear();
        row_node.clear();
        row_type.clear();
        type_ptr.assign(size_t(T + 1), 0);
        for (idx_t t = 0; t < T; ++t) {
            for (idx_t i = edge_type_ptr[size_t(t)]; i < edge_type_ptr[size_t(t + 1)]; ++i) {
                const idx_t node = end[edges[size_t(i)]];
                if (!compact || i == edge_type_ptr[size_t(t)] || node != end[edges[size_t(i - 1)]]) {
                    edge_ptr.push_back(i);
                    row_node.push_back(node);
                    row_type.push_back(t);
                }
            }
            type_ptr[size_t(t + 1)] = idx_t(row_node.size());
        }
        rows = idx_t(row_node.size());
        edge_ptr.push_back(E);
        edge_far.clear();
        if (far) {
            edge_far.resize(size_t(E));
            for (idx_t j = 0; j < E; ++j) edge_far[size_t(j)] = far[edges[size_t(j)]];
        }
        node_ptr.resize(size_t(N + 1));
        node_rows.resize(size_t(rows));
        counting_sort(row_node.data(), nullptr, rows, N, node_rows.data(), node_ptr.data());
        tile_row.clear();
        tile_type.clear();
        for (idx_t t = 0; t < T; ++t)
            for (idx_t r = type_ptr[size_t(t)]; r < type_ptr[size_t(t + 1)]; r += tile_rows) {
                tile_row.push_back(r);
                tile_type.push_back(t);
            }
        tile_row.push_back(rows);      // tiles of a type are contiguous, so each ends where the next starts
        return true;
    }
    // Lays the products out by row (row_store, edge_row; edge_row_by_src too when t_eid, the
    // edge ids of the CSR over sources, is given).  The B blocks of one (node, type) pair are the
    // same row u of every block's types (rows of type t*B + b follow the nodes of type t in the
    // same order for each b), stored side by side: block b of row r goes to u*B + b.
    void store_rows(const idx_t *t_eid) {
        const idx_t B = blocks, T = types / B, E = edge_count / B;
        row_store.assign(size_t(rows), 0);
        edge_row.assign(size_t(E), 0);
        idx_t base = 0;   // stored rows of the types before t
        for (idx_t t = 0; t < T; ++t) {
            const idx_t n = type_ptr[size_t(t * B + 1)] - type_ptr[size_t(t * B)];
            for (idx_t b = 0; b < B; ++b)
                for (idx_t i = 0; i < n; ++i) {
                    const idx_t r = type_ptr[size_t(t * B + b)] + i;
                    row_store[size_t(r)] = (base + i) * B + b;
                    if (b == 0)
                        for (idx_t j = edge_ptr[size_t(r)]; j < edge_ptr[size_t(r + 1)]; ++j)
                            edge_row[size_t(edges[size_t(j)] / B)] = base + i;
                }
            base += n;
        }
        edge_row_by_src.clear();
        if (t_eid) {
            edge_row_by_src.resize(size_t(E));
            for (idx_t k = 0; k < E; ++k) edge_row_by_src[size_t(k)] = edge_row[size_t(t_eid[k])];
        }
    }
    idx_t tiles() const { return idx_t(tile_type.size()); }
    int64_t bytes() const {
        const size_t ints = type_ptr.size() + row_type.size() + row_node.size() + edge_ptr.size() + edges.size() +
                            edge_far.size() + row_store.size() + edge_row.size() + edge_row_by_src.size() +
                            node_ptr.size() + node_rows.size() + tile_row.size() + tile_type.size();
        return int64_t(ints * sizeof(idx_t));
    }
};

}  // namespace mg

#endif  // MORPHGEN_EDGE_ROWS_H

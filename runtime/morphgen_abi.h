/* The one C ABI shared by every morphgen backend.
 *
 * A generated library (OpenMP today; CUDA and MPI later) exports exactly these functions.
 * Python loads it through cffi and never needs to know which backend built it.
 *
 * Ownership: arrays handed to mg_set_* are BORROWED, not copied (the graph and features are the
 * largest objects of a run and a copy would double peak memory).  The caller keeps them alive
 * and unchanged until mg_destroy.  Everything the library allocates it frees in mg_destroy.
 * The one exception is mg_set_features_dense_donated: the caller gives the buffer up, and a
 * program that hoists an aggregation of the features out of the epoch may overwrite it with that
 * aggregation instead of allocating a second N x F array.
 *
 * Graph layout: edges sorted by destination.  indptr[N+1]/col[E] is the CSR over incoming edges
 * (col = source node); t_indptr/t_col/t_eid is the CSR over outgoing edges (t_col = destination,
 * t_eid = position of the edge in the destination-sorted order).  Per-edge arrays (etype, weights) are in
 * the destination-sorted order.
 *
 * Errors: functions returning int give 0 on success and -1 on failure; mg_train_epoch returns NaN
 * on failure.  mg_error then describes the failure.
 */
#ifndef MORPHGEN_ABI_H
#define MORPHGEN_ABI_H
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mg_ctx mg_ctx;

/* BEGIN CDEF (the text up to END CDEF is handed to cffi verbatim) */
mg_ctx *mg_create(int threads, uint64_t seed);
void mg_destroy(mg_ctx *ctx);
const char *mg_error(mg_ctx *ctx);
const char *mg_program_name(void);
const char *mg_backend_name(void);

int mg_num_size_symbols(void);
const char *mg_size_symbol(int i);
int mg_set_size(mg_ctx *ctx, int i, int64_t value);

int mg_set_graph(mg_ctx *ctx, int64_t num_nodes, int64_t num_edges,
                 const int64_t *indptr, const int64_t *col,
                 const int64_t *t_indptr, const int64_t *t_col, const int64_t *t_eid,
                 const int64_t *etype, const int64_t *ntype,
                 int64_t num_etypes, int64_t num_ntypes);
/* The graph's edge weights (float [E], in the destination-sorted order), which programs read as
 * e.edge_weight; optional for programs that do not. */
int mg_set_edge_weights(mg_ctx *ctx, const float *weight);
int mg_set_features_dense(mg_ctx *ctx, const float *x, int64_t rows, int64_t cols);
int mg_set_features_dense_donated(mg_ctx *ctx, float *x, int64_t rows, int64_t cols);
int mg_set_features_csr(mg_ctx *ctx, const int64_t *indptr, const int32_t *indices,
                        const float *data, int64_t rows, int64_t cols);
int mg_set_features_identity(mg_ctx *ctx, int64_t rows);
int mg_set_labels(mg_ctx *ctx, const int64_t *labels, const uint8_t *train_mask,
                  const uint8_t *val_mask, const uint8_t *test_mask);
/* Link prediction (programs with gnn.linkLoss): the (head, relation, tail, target 0/1) int64 rows
 * the loss scores, borrowed until the next call; set before every mg_train_epoch, usually with
 * fresh negatives.  Node-classification programs return -1. */
int mg_set_triples(mg_ctx *ctx, const int64_t *triples, int64_t count);
int mg_prepare(mg_ctx *ctx);

double mg_train_epoch(mg_ctx *ctx);
/* Epochs trained so far (a loaded checkpoint sets it): what keys the dropout streams, Adam's step
 * and, in the caller, each epoch's negative triples. */
int64_t mg_epoch(mg_ctx *ctx);
/* 1 when the last training epoch was replayed as one CUDA graph (the CUDA backend, from its
 * second epoch on, unless the kernels are timed; backends/cuda/graph.cuh), else 0. */
int mg_epoch_graph(mg_ctx *ctx);
int mg_evaluate(mg_ctx *ctx, double *loss_train_val_test_acc);
int mg_predict(mg_ctx *ctx, float *logits);

int mg_num_params(void);
const char *mg_param_name(int i);
int mg_param_rank(int i);
int64_t mg_param_numel(mg_ctx *ctx, int i);
/* On a distributed library (MPI) mg_get_param and mg_save_checkpoint are collective: every rank
 * calls them, in the same order (ranks step shares of a featureless table, and these bring the
 * whole table up to date first). */
int mg_get_param(mg_ctx *ctx, int i, float *out);
int mg_set_param(mg_ctx *ctx, int i, const float *in);

int mg_save_checkpoint(mg_ctx *ctx, const char *path);
int mg_load_checkpoint(mg_ctx *ctx, const char *path);
/* The caller's training state that checkpoints carry after the weights (the early-stopping
 * record): mg_set_checkpoint_extra copies n floats (n = 0: none), which every later
 * mg_save_checkpoint writes; mg_load_checkpoint replaces them with the file's (none: 0 floats).
 * mg_get_checkpoint_extra copies up to cap of them to out and returns how many there are. */
int mg_set_checkpoint_extra(mg_ctx *ctx, const float *data, int64_t n);
int64_t mg_get_checkpoint_extra(mg_ctx *ctx, float *out, int64_t cap);

/* Distributed backends (MPI): this rank's share of the graph, set after mg_set_graph.  comm is
 * the Fortran handle of the communicator (mpi4py's Comm.py2f()), so mpi.h stays out of this
 * header.  Local rows: num_owned owned nodes, then ghosts grouped by peer; peer k receives the
 * owned rows send_idx[send_ptr[k] .. send_ptr[k+1]) and fills this rank's ghost rows
 * [recv_ptr[k], recv_ptr[k+1]).  node_gid / edge_gid: global node id of each local row, global
 * (destination-sorted) position of each local edge; in_degree / out_degree: global degrees of
 * the local nodes.  Other backends return -1. */
int mg_set_partition(mg_ctx *ctx, int64_t comm, int64_t num_owned, int64_t global_nodes, int64_t num_peers,
                     const int64_t *peers, const int64_t *send_ptr, const int64_t *send_idx, const int64_t *recv_ptr,
                     const int64_t *node_gid, const int64_t *edge_gid, const int64_t *in_degree,
                     const int64_t *out_degree);

/* Distributed backends: the floats that the all-reduce of parameter i's gradient sums each
 * epoch (a table's gradient under Adam: the rows some rank's lookups write, not the table), 0
 * before the first epoch.  Other backends return -1. */
int64_t mg_reduced_floats(mg_ctx *ctx, int i);

int64_t mg_allocated_bytes(mg_ctx *ctx);
int mg_num_timers(void);
const char *mg_timer_name(int i);
int mg_read_timer(mg_ctx *ctx, int i, double *seconds, double *bytes, double *flops, int64_t *calls);
void mg_reset_timers(mg_ctx *ctx);
/* Whether the timers read the clock (1, the default) or only count calls, bytes and flops (0).
 * On a GPU a timed call records two events, read back after the epoch. */
void mg_time_kernels(mg_ctx *ctx, int on);
/* END CDEF */

#ifdef __cplusplus
}
#endif
#endif

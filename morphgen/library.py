"""Load a generated library through cffi and drive it: one `Session` per (library, dataset).

The library exports the C ABI of ``runtime/morphgen_abi.h``; the declarations handed to cffi are
read from that header (between its BEGIN CDEF / END CDEF markers), so the two never drift apart.
Arrays handed to the library are borrowed, so the session keeps a reference to each of them.
"""
from __future__ import annotations

import functools
import math
import os
import time
from pathlib import Path

import numpy as np

from .errors import InternalError, UserError
from .resources import usable_cores


# The arrays of a distributed library's share of the graph, in mg_set_partition's order.
PARTITION_ARRAYS = ("peers", "send_ptr", "send_idx", "recv_ptr", "node_gid", "edge_gid", "in_degree", "out_degree")


class RuntimeFailure(UserError):
    """The generated library rejected an input or failed at run time (message from mg_error)."""


@functools.lru_cache(maxsize=None)
def _ffi():
    import cffi
    import morphgen.runtime as runtime_pkg
    header = (Path(runtime_pkg.__file__).parent / "morphgen_abi.h").read_text()
    cdef = header.split("BEGIN CDEF")[1].split("/* END CDEF")[0]
    cdef = cdef.split("*/", 1)[1]
    ffi = cffi.FFI()
    ffi.cdef("typedef struct mg_ctx mg_ctx;\n" + cdef)
    return ffi


def load(path: str, backend: str = None):
    """dlopen a built library once per process; with `backend`, check that this backend built it."""
    lib = _dlopen(path)
    built_by = _str(_ffi(), lib.mg_backend_name())
    if backend is not None and built_by != backend:
        raise InternalError(f"the library {path} was built by the {built_by or 'unknown'} backend, "
                            f"not by {backend}")
    return lib


def openmp_wait_env(threads_on_machine: int) -> dict:
    """The environment for processes that together run `threads_on_machine` OpenMP threads on
    this machine: OMP_WAIT_POLICY=PASSIVE where they outnumber the cores, else nothing.

    libgomp's default lets a worker spin briefly after a parallel region before it sleeps.  A small
    graph's epoch is a hundred short regions, and a wake-up per region made GIN on citeseer 2.3x
    slower (10 ms against 4.3 ms an epoch, 2 threads).  Where threads outnumber cores, a spinning
    worker holds a core that another process's thread needs, and the run collapses: there the
    workers must sleep.  A policy the user set is kept.
    """
    if "OMP_WAIT_POLICY" in os.environ or threads_on_machine <= usable_cores():
        return {}
    return {"OMP_WAIT_POLICY": "PASSIVE"}


@functools.lru_cache(maxsize=None)
def _dlopen(path: str):
    try:
        return _ffi().dlopen(str(path))
    except OSError as err:
        raise InternalError(f"cannot load generated library {path}: {err}") from err


def _str(ffi, ptr) -> str:
    return ffi.string(ptr).decode() if ptr != ffi.NULL else ""


class Session:
    """A context of a generated library bound to one graph, its features and labels."""

    def __init__(self, library_path, layout, features, labels, masks, sizes: dict,
                 threads: int, seed: int, donate_features: bool = False, partition: dict = None):
        """``donate_features``: the caller gives up the dense feature array; the program may
        overwrite it (with an aggregation of it hoisted out of the epoch) instead of copying it.
        ``partition``: a distributed library's share of the graph (the arguments of
        mg_set_partition by name: comm, num_owned, global_nodes and PARTITION_ARRAYS)."""
        self.ffi = _ffi()
        self.lib = load(str(library_path))
        self._keep = []                      # borrowed arrays must outlive the context
        self.ctx = self.lib.mg_create(int(threads), int(seed) & 0xFFFFFFFFFFFFFFFF)
        if self.ctx == self.ffi.NULL:
            raise InternalError("mg_create failed")
        try:
            self._bind(layout, features, labels, masks, sizes, donate_features, partition)
        except BaseException:
            self.close()
            raise

    # -- set-up ------------------------------------------------------------------------
    def _ptr(self, arr, ctype):
        if arr is None:
            return self.ffi.NULL
        self._keep.append(arr)
        return self.ffi.cast(ctype, arr.ctypes.data)

    def _check(self, rc: int, what: str):
        if rc != 0:
            raise RuntimeFailure(f"morphgen: error: {what}: {_str(self.ffi, self.lib.mg_error(self.ctx))}")

    def _bind(self, layout, features, labels, masks, sizes, donate_features, partition):
        lib = self.lib
        for i in range(lib.mg_num_size_symbols()):
            name = _str(self.ffi, lib.mg_size_symbol(i))
            if name not in sizes:
                raise InternalError(f"size symbol {name} was not bound")
            self._check(lib.mg_set_size(self.ctx, i, int(sizes[name])), f"size {name}")
        i64 = "int64_t *"
        self._check(lib.mg_set_graph(
            self.ctx, layout.num_nodes, layout.num_edges,
            self._ptr(layout.indptr, i64), self._ptr(layout.col, i64),
            self._ptr(layout.t_indptr, i64), self._ptr(layout.t_col, i64), self._ptr(layout.t_eid, i64),
            self._ptr(layout.etype, i64), self._ptr(layout.ntype, i64),
            layout.num_etypes, layout.num_ntypes), "graph")
        if layout.edge_weight is not None:
            self._check(lib.mg_set_edge_weights(self.ctx, self._ptr(layout.edge_weight, "float *")), "edge weights")
        if partition is not None:
            self._bind_partition(partition)
        kind, payload = features
        if kind == "dense":
            x = np.ascontiguousarray(payload, dtype=np.float32)
            # a converted copy is ours to give; the caller's own array only when donated
            if (donate_features or x is not payload) and x.flags.writeable:
                self._check(lib.mg_set_features_dense_donated(self.ctx, self._ptr(x, "float *"), *x.shape),
                            "features")
            else:
                self._check(lib.mg_set_features_dense(self.ctx, self._ptr(x, "float *"), *x.shape), "features")
        elif kind == "csr":
            x = payload
            if x.shape[1] > np.iinfo(np.int32).max:
                raise UserError(f"morphgen: error: features: {x.shape[1]} columns; at most 2^31 - 1 are supported")
            # 32-bit column indices as scipy stores them: borrowed without a copy
            indptr = np.ascontiguousarray(x.indptr, dtype=np.int64)
            indices = np.ascontiguousarray(x.indices, dtype=np.int32)
            data = np.ascontiguousarray(x.data, dtype=np.float32)
            self._check(lib.mg_set_features_csr(self.ctx, self._ptr(indptr, i64), self._ptr(indices, "int32_t *"),
                                                self._ptr(data, "float *"), *x.shape), "features")
        else:
            self._check(lib.mg_set_features_identity(self.ctx, layout.num_nodes), "features")
        if labels is not None:           # a link-prediction program has none: it scores triples
            # a copy, as the masks are: the library reads it every epoch, and the caller's array
            # edited after binding (a label out of range) must not reach the kernels unchecked
            y = np.array(labels, dtype=np.int64, order="C", copy=True)
            # unlabelled nodes (label -1) never count, whatever the masks say
            m = [np.ascontiguousarray(np.asarray(mask, bool) & (y >= 0), dtype=np.uint8) for mask in masks]
            self._check(lib.mg_set_labels(self.ctx, self._ptr(y, i64), *(self._ptr(a, "uint8_t *") for a in m)),
                        "labels")
        t0 = time.perf_counter()
        self._check(lib.mg_prepare(self.ctx), "prepare")
        self.prepare_seconds = time.perf_counter() - t0     # load-time structures and invariant values

    def _bind_partition(self, p: dict):
        arrays = [np.ascontiguousarray(p[k], dtype=np.int64) for k in PARTITION_ARRAYS]
        self._check(self.lib.mg_set_partition(
            self.ctx, int(p["comm"]), int(p["num_owned"]), int(p["global_nodes"]), int(arrays[0].shape[0]),
            *(self._ptr(a, "int64_t *") for a in arrays)), "partition")

    # -- training -------------------------------------------------------------------------
    def set_triples(self, triples: np.ndarray) -> None:
        """The (head, relation, tail, target) rows a link-prediction loss scores from now on;
        the array is kept alive here until the next call."""
        t = np.ascontiguousarray(triples, dtype=np.int64).reshape(-1, 4)
        self._check(self.lib.mg_set_triples(self.ctx, self.ffi.cast("int64_t *", t.ctypes.data), t.shape[0]),
                    "triples")
        self._triples = t

    def epoch(self) -> int:
        """Epochs trained so far, counting those of a loaded checkpoint."""
        return int(self.lib.mg_epoch(self.ctx))

    def epoch_graph(self) -> bool:
        """Whether the last training epoch was replayed as one CUDA graph."""
        return bool(self.lib.mg_epoch_graph(self.ctx))

    def train_epoch(self) -> float:
        loss = self.lib.mg_train_epoch(self.ctx)
        if math.isnan(loss):
            err = _str(self.ffi, self.lib.mg_error(self.ctx))
            if err:
                raise RuntimeFailure(f"morphgen: error: training epoch failed: {err}")
        return float(loss)

    def evaluate(self) -> dict:
        out = self.ffi.new("double[4]")
        self._check(self.lib.mg_evaluate(self.ctx, out), "evaluate")
        return {"loss": out[0], "train_acc": out[1], "val_acc": out[2], "test_acc": out[3]}

    def predict(self, num_nodes: int, num_classes: int) -> np.ndarray:
        logits = np.empty((num_nodes, num_classes), np.float32)
        self._check(self.lib.mg_predict(self.ctx, self.ffi.cast("float *", logits.ctypes.data)), "predict")
        return logits

    # -- parameters and checkpoints -------------------------------------------------------
    def param_names(self) -> list:
        return [_str(self.ffi, self.lib.mg_param_name(i)) for i in range(self.lib.mg_num_params())]

    def get_params(self) -> dict:
        out = {}
        for i, name in enumerate(self.param_names()):
            buf = np.empty(self.lib.mg_param_numel(self.ctx, i), np.float32)
            self._check(self.lib.mg_get_param(self.ctx, i, self.ffi.cast("float *", buf.ctypes.data)), name)
            out[name] = buf
        return out

    def set_params(self, params: dict):
        for i, name in enumerate(self.param_names()):
            if name not in params:
                continue
            n = self.lib.mg_param_numel(self.ctx, i)
            buf = np.ascontiguousarray(params[name], dtype=np.float32).reshape(-1)
            if buf.size != n:
                raise RuntimeFailure(f"morphgen: error: parameter {name} needs {n} values, got {buf.size}")
            self._check(self.lib.mg_set_param(self.ctx, i, self.ffi.cast("float *", buf.ctypes.data)), name)

    def save_checkpoint(self, path):
        """Written beside the file and renamed onto it; through a symbolic link, onto its target."""
        real = os.path.realpath(path)
        self._check(self.lib.mg_save_checkpoint(self.ctx, real.encode()), f"save checkpoint {path}")

    def load_checkpoint(self, path):
        self._check(self.lib.mg_load_checkpoint(self.ctx, str(path).encode()), f"load checkpoint {path}")

    def set_checkpoint_state(self, values: np.ndarray):
        """Floats of the caller's own training state that later checkpoints carry (copied)."""
        buf = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
        self._check(self.lib.mg_set_checkpoint_extra(self.ctx, self.ffi.cast("float *", buf.ctypes.data), buf.size),
                    "checkpoint state")

    def checkpoint_state(self) -> np.ndarray:
        """The caller's state of the last loaded checkpoint (or the last set): empty if none."""
        n = int(self.lib.mg_get_checkpoint_extra(self.ctx, self.ffi.NULL, 0))
        out = np.empty(n, np.float32)
        self.lib.mg_get_checkpoint_extra(self.ctx, self.ffi.cast("float *", out.ctypes.data), n)
        return out

    # -- profiling --------------------------------------------------------------------------
    def allocated_bytes(self) -> int:
        return int(self.lib.mg_allocated_bytes(self.ctx))

    def reduced_floats(self) -> list:
        """A distributed library: per parameter, the floats its gradient's all-reduce sums each
        epoch (fewer than the parameter's for a table whose lookups write some rows only)."""
        return [int(self.lib.mg_reduced_floats(self.ctx, i)) for i in range(self.lib.mg_num_params())]

    def timers(self) -> list:
        s, b, f = (self.ffi.new("double *") for _ in range(3))
        calls = self.ffi.new("int64_t *")
        rows = []
        for i in range(self.lib.mg_num_timers()):
            self.lib.mg_read_timer(self.ctx, i, s, b, f, calls)
            rows.append({"kernel": _str(self.ffi, self.lib.mg_timer_name(i)), "seconds": s[0],
                         "bytes": b[0], "flops": f[0], "calls": calls[0]})
        return rows

    def reset_timers(self):
        self.lib.mg_reset_timers(self.ctx)

    def time_kernels(self, on: bool):
        """Whether the kernel timers read the clock (on by default); calls, bytes and flops are
        counted either way.  Off spares a GPU two events per kernel call."""
        self.lib.mg_time_kernels(self.ctx, 1 if on else 0)

    def close(self):
        if getattr(self, "ctx", None) is not None and self.ctx != self.ffi.NULL:
            self.lib.mg_destroy(self.ctx)
        self.ctx = None
        self._keep.clear()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

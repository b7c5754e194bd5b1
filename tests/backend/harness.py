"""Run one IR program through a backend (OpenMP unless told) and through the numpy interpreter."""
from __future__ import annotations

import numpy as np

from morphgen.pipeline import edge_type_pairs, include_dirs
from morphgen.passes import run_default
from morphgen.backends import require
from morphgen.interp import Interpreter
from morphgen.ir import Optimizer
from morphgen.layout import GraphLayout
from morphgen.library import Session
from morphgen.backends.openmp.emitter import OpenMPEmitter
from morphgen.toolchain import compile_shared
from tests.ir.helpers import perturbed_params


def sizes_for(graph, x, classes):
    return {"F": graph.num_nodes if x is None else x.shape[1], "C": classes, "N": graph.num_nodes,
            "etypes": graph.num_etypes, "ntypes": graph.num_ntypes}


def build(program, graph, x, classes, sanitize=False, backend="openmp", edge_typed_layout="auto"):
    """``edge_typed_layout``: as `morphgen train --edge-typed-layout` (gathered: not fused)."""
    program.featureless = x is None
    program.bind(sizes_for(graph, x, classes))
    chosen = require(backend)
    # rewrites, backward and fusion exactly as `morphgen train` does for this backend
    fused = chosen.capabilities.edge_typed_linear and edge_typed_layout != "gathered"
    run_default(program, bases_per_lookup=chosen.capabilities.bases_per_lookup,
                edge_typed_layout=edge_typed_layout if fused else None,
                edge_pairs=edge_type_pairs(graph) if fused else None,
                graph_constants=chosen.capabilities.hoist_invariants)
    sources = chosen.emitter_class()(program).emit()
    if backend == "openmp":     # the default build, under a name of its own (cached apart from `train`'s)
        return compile_shared(sources, name=f"test_model_{backend}", include_dirs=include_dirs(), sanitize=sanitize,
                              precompiled_header=OpenMPEmitter.ops_header,
                              prebuilt_units=OpenMPEmitter.ops_units)
    return chosen.build(sources, sanitize=sanitize)


def session(lib, program, graph, x, labels, mask, features="dense", seed=0, threads=2):
    import scipy.sparse as sp
    layout = GraphLayout.from_graph(graph)
    if x is None:
        payload = ("identity", None)
    elif features in ("csr", "csr_unsorted"):
        matrix = sp.csr_matrix(np.asarray(x, np.float32))
        if features == "csr_unsorted":     # each row's non-zeros in decreasing column order: valid CSR, not canonical
            for v in range(matrix.shape[0]):
                row = slice(matrix.indptr[v], matrix.indptr[v + 1])
                matrix.indices[row], matrix.data[row] = matrix.indices[row][::-1].copy(), matrix.data[row][::-1].copy()
            matrix.has_sorted_indices = False
        payload = ("csr", matrix)
    else:
        payload = ("dense", np.asarray(x, np.float32))
    n = graph.num_nodes
    masks = None if labels is None else (mask, np.zeros(n, bool), np.zeros(n, bool))
    return Session(lib, layout, payload, labels, masks, program.sizes, threads, seed)


def gradients_by_sgd(program, sess, params):
    """One epoch with SGD(lr=1): the weights move by exactly minus their gradient."""
    sess.set_params(params)
    loss = sess.train_epoch()
    after = sess.get_params()
    return loss, {k: params[k].reshape(-1) - after[k] for k in params}


def reference(program, graph, x, labels, mask, params):
    """The interpreter's loss, and its gradients with the new values of the untrainable params
    (running statistics) under their own names: the backend's SGD step leaves those at
    ``params - new``, which is what gradients_by_sgd reads for them."""
    interp = Interpreter(program, graph, x, labels, mask, dtype=np.float64)
    loss, grads, _ = interp.run({k: v.astype(np.float64) for k, v in params.items()})
    for name, new in interp.state_updates.items():
        grads[name] = params[name].astype(np.float64) - new
    return loss, grads


def assert_matches_interpreter(program, graph, x, labels, mask, classes, features="dense", backend="openmp",
                               edge_typed_layout="auto"):
    """The backend's first-epoch loss and every weight gradient (read back through one SGD step
    with learning rate 1) equal the float64 interpreter's, from the same perturbed weights."""
    import pytest
    lib = build(use_sgd(program), graph, x, classes, backend=backend, edge_typed_layout=edge_typed_layout)
    params = {k: v.astype(np.float32) for k, v in perturbed_params(program).items()}
    ref_loss, ref_grads = reference(program, graph, x, labels, mask, params)
    sess = session(lib, program, graph, x, labels, mask, features=features)
    loss, grads = gradients_by_sgd(program, sess, params)
    assert loss == pytest.approx(ref_loss, rel=1e-4, abs=1e-5)
    for name, g in ref_grads.items():
        np.testing.assert_allclose(grads[name], g.reshape(-1), rtol=2e-3, atol=2e-5, err_msg=name)


def use_sgd(program):
    program.optimizer = Optimizer(kind="sgd", lr=1.0, weight_decay=0.0)
    return program

"""Differential testing of generated programs: a backend (OpenMP unless told) against the numpy
interpreter.

`check(fp, variant, backend=...)` compiles one generated program for one variant of the pipeline, trains
it a few epochs, and compares every epoch's loss and every weight gradient with the float64
interpreter running the same program with no passes at all.  Variants:

* ``plain``: no rewrites and no fusion plan (the emitter lowers op by op), dense features;
* ``passes``: every pass (reordering, concat split, operator reordering, hoisting of graph
  constants and invariant aggregations, fusion) as `morphgen train` runs them for dense features;
* ``sparse``: every pass as for sparse features, the features handed over as CSR (or dense
  when the program reads them outside a product, as `morphgen train` falls back);
* ``featureless``: every pass, no feature matrix (the identity), for programs that read the
  features only through weights.

Each epoch starts from the oracle's parameters: the backend steps by SGD with learning rate 1,
so its update is minus its gradient; the oracle then moves on with its own float64 gradient.
Comparing epoch by epoch keeps float32 drift out of the verdict, and the dropout masks change
with the epoch counter on both sides.
"""
from __future__ import annotations

import numpy as np

from morphgen.pipeline import include_dirs
from morphgen.autodiff import differentiate
from morphgen.backends import require
from morphgen.frontend import compile_source
from morphgen.interp import Interpreter, init_params
from morphgen.ir import Optimizer
from morphgen.passes import run_default
from morphgen.backends.openmp.emitter import OpenMPEmitter
from morphgen.toolchain import compile_shared

from tests.backend.harness import session, sizes_for
from tests.fuzz.generator import FuzzProgram
from tests.ir.helpers import random_data, random_graph

VARIANTS = ("plain", "passes", "sparse", "featureless")
EPOCHS = 3
ORACLE_LR = 0.1
LOSS_RTOL = 1e-4
GRAD_RTOL = 1e-4          # of the largest gradient entry of the same weight
GRAD_ATOL = 1e-6
# The generated kernels are built without optimisation: the lowering, not the compiler, is
# under test here, and an -O0 build takes a fraction of the time.
BUILD_FLAGS = ("-O0",)


class Mismatch(AssertionError):
    pass


class WildProgram(Mismatch):
    """Inconclusive, not a discrepancy: the oracle's own loss leaves float32's range (a generated
    product of products under SGD with learning rate 1 grows without bound), so no float32
    backend can carry the epoch; the float32 interpreter overflows there too."""


FLOAT32_MAX = float(np.finfo(np.float32).max)


def read_back_resolution(params: np.ndarray) -> np.ndarray:
    """Per entry, how finely p - fl(p - g) shows a gradient g of the float32 parameters p: fl
    rounds to half the spacing of the floats around p - g, which is at most the spacing around
    p while |g| <= |p| (a larger g is held to GRAD_RTOL of itself, far coarser)."""
    return np.spacing(np.abs(params.astype(np.float32))).astype(np.float64)


def data_for(fp: FuzzProgram, featureless: bool):
    graph = random_graph(n=14, e=36, seed=fp.seed % 97, etypes=3 if fp.typed else 1, ntypes=2 if fp.typed else 1,
                         weighted=fp.weighted)
    x, labels, mask = random_data(graph, None if featureless else 6, classes=3, seed=fp.seed % 89)
    if x is not None:
        x[np.random.default_rng(fp.seed).random(x.shape) < 0.5] = 0.0      # something for the sparse path
    if fp.seed % 3 == 0:        # few training rows (3 of 14): the kernels that compute those rows alone run
        few = np.zeros_like(mask)
        few[np.flatnonzero(mask & (labels >= 0))[:3]] = True
        mask = few
    return graph, x, labels, mask


def _program(fp: FuzzProgram, graph, x, classes):
    program = compile_source(fp.source, filename=f"{fp.name}.mp")
    program.featureless = x is None
    program.bind(sizes_for(graph, x, classes))
    return program


def check(fp: FuzzProgram, variant: str, classes: int = 3, backend: str = "openmp") -> dict:
    """Raise Mismatch when the backend and the oracle disagree; return what was compared."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}")
    graph, x, labels, mask = data_for(fp, featureless=variant == "featureless")
    oracle_program = _program(fp, graph, x, classes)
    differentiate(oracle_program)
    program = _program(fp, graph, x, classes)
    program.optimizer = Optimizer(kind="sgd", lr=1.0, weight_decay=0.0)
    if variant == "plain":
        differentiate(program)
        program.fusion = []
    else:
        caps = require(backend).capabilities
        # as `morphgen train` runs them for this backend, with the edge typed layout alternating by seed
        run_default(program, dense_features=variant == "passes", bases_per_lookup=caps.bases_per_lookup,
                    edge_typed_layout=("compact", "edge")[fp.seed % 2] if caps.edge_typed_linear else None,
                    graph_constants=caps.hoist_invariants)
    chosen = require(backend)
    emitter = chosen.emitter_class()(program)
    sources = emitter.emit()
    features = "csr" if variant == "sparse" and not emitter.needs_dense_features else "dense"
    if backend == "openmp":
        lib = compile_shared(sources, name="fuzz", include_dirs=include_dirs(), flags=BUILD_FLAGS,
                             precompiled_header=OpenMPEmitter.ops_header,
                             prebuilt_units=OpenMPEmitter.ops_units)
    else:
        lib = chosen.build(sources)
    sess = session(lib, program, graph, x, labels, mask, features=features, seed=fp.seed)
    oracle = Interpreter(oracle_program, graph, x, labels, mask, dtype=np.float64, seed=fp.seed)
    params = {k: v.astype(np.float32) for k, v in init_params(oracle_program, seed=fp.seed).items()}
    losses = []
    try:
        for epoch in range(EPOCHS):
            sess.set_params(params)
            loss = sess.train_epoch()
            stepped = sess.get_params()
            oracle.epoch = epoch
            ref_loss, ref_grads, _ = oracle.run({k: v.astype(np.float64) for k, v in params.items()})
            where = f"{fp.name} [{variant}] epoch {epoch}"
            if not abs(ref_loss) <= FLOAT32_MAX:
                raise WildProgram(f"{where}: the oracle's loss {ref_loss!r} is beyond float32's range "
                                  f"(the generator produced a wild program)")
            if abs(loss - ref_loss) > LOSS_RTOL * max(1.0, abs(ref_loss)):
                raise Mismatch(f"{where}: loss {loss!r}, oracle {ref_loss!r}")
            for name, ref in ref_grads.items():
                before = params[name].reshape(-1)
                got = before - stepped[name]
                ref = ref.reshape(-1)
                tol = GRAD_RTOL * float(np.max(np.abs(ref))) + GRAD_ATOL
                # The gradient is read back through a float32 step, p - fl(p - g): that resolves g
                # to half an ulp of p only (a bias the oracle's step made large; seed 4910).
                excess = np.abs(got - ref) - read_back_resolution(before)
                if not float(np.max(excess)) <= tol:
                    worst = int(np.argmax(excess))
                    raise Mismatch(f"{where}: gradient of {name} differs by {abs(got[worst] - ref[worst]):.3g} "
                                   f"(tolerance {tol:.3g} plus the read-back's "
                                   f"{read_back_resolution(before)[worst]:.3g}, largest oracle entry "
                                   f"{np.max(np.abs(ref)):.3g})")
            losses.append(loss)
            params = {k: (v - ORACLE_LR * ref_grads[k]).astype(np.float32) if k in ref_grads else v
                      for k, v in params.items()}
    finally:
        sess.close()
    return {"losses": losses, "features": features}


def variants_for(fp: FuzzProgram) -> tuple:
    """`plain` always, plus one pipeline variant chosen by the seed (each program costs two builds)."""
    others = ["passes", "sparse"] + (["featureless"] if fp.features_only_through_weights else [])
    return ("plain", others[fp.seed % len(others)])

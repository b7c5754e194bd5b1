"""Run in a subprocess with the AddressSanitizer runtime preloaded (see test_sanitized.py).

``python -m tests.e2e.sanitized_worker check``: every fixture's ASan+UBSan build computes the
same loss and gradients as the numpy interpreter; exit 1 on a mismatch.
``python -m tests.e2e.sanitized_worker out-of-bounds``: a graph layout with a column index past
the last node is handed to the library, which must be reported by the sanitizer (the check that
the sanitized runs can fail at all).
"""
from __future__ import annotations

import sys

import numpy as np

from morphgen.layout import GraphLayout
from morphgen.library import Session
from tests.backend.harness import build, gradients_by_sgd, reference, session, use_sgd
from tests.ir import models
from tests.ir.helpers import perturbed_params, random_data, random_graph

FIXTURES = {
    "gcn": (lambda: models.gcn(dropout=0.0), 1, 5),
    "sage_max": (lambda: models.sage("max"), 1, 5),
    "rgcn_featureless": (models.rgcn, 3, None),
    "gat": (models.gat, 1, 5),
}


def fixture(name):
    """(program, graph, x, labels, mask, library) of one fixture, built with sanitizers."""
    make, etypes, width = FIXTURES[name]
    graph = random_graph(n=12, e=30, seed=11, etypes=etypes, ntypes=1)
    x, labels, mask = random_data(graph, width, classes=3)
    program = use_sgd(make())
    lib = build(program, graph, x, 3, sanitize=True)
    return program, graph, x, labels, mask, lib


def check(name) -> list:
    program, graph, x, labels, mask, lib = fixture(name)
    params = {k: v.astype(np.float32) for k, v in perturbed_params(program).items()}
    ref_loss, ref_grads = reference(program, graph, x, labels, mask, params)
    problems = []
    for threads in (1, 2):
        sess = session(lib, program, graph, x, labels, mask, threads=threads)
        loss, grads = gradients_by_sgd(program, sess, params)
        sess.set_params(params)
        logits = sess.predict(graph.num_nodes, 3)
        sess.close()
        if not np.isfinite(logits).all():
            problems.append(f"{name}: non-finite logits")
        if not np.isclose(loss, ref_loss, rtol=1e-4, atol=1e-5):
            problems.append(f"{name} ({threads} threads): loss {loss} vs interpreter {ref_loss}")
        for key, g in ref_grads.items():
            if not np.allclose(grads[key], g.reshape(-1), rtol=2e-3, atol=2e-5):
                problems.append(f"{name} ({threads} threads): gradient of {key} differs from the interpreter")
    return problems


def out_of_bounds():
    program, graph, x, labels, mask, lib = fixture("gcn")
    layout = GraphLayout.from_graph(graph)
    layout.col = layout.col.copy()
    layout.col[-1] = graph.num_nodes + 4096           # a neighbour far past the last row
    n = graph.num_nodes
    sess = Session(lib, layout, ("dense", np.asarray(x, np.float32)), labels,
                   (mask, np.zeros(n, bool), np.zeros(n, bool)), program.sizes, 1, 0)
    sess.set_params({k: v.astype(np.float32) for k, v in perturbed_params(program).items()})
    sess.predict(n, 3)
    print("no sanitizer report")


def main(argv) -> int:
    if argv[1:] == ["out-of-bounds"]:
        out_of_bounds()
        return 0
    names = argv[2:] or sorted(FIXTURES)
    problems = [p for name in names for p in check(name)]
    for p in problems:
        print(p, file=sys.stderr)
    print(f"checked {', '.join(names)}: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

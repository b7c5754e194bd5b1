"""The example programs, as lowered by the front end, through the default passes: generated
gradients agree with finite differences and the passes keep the numerics."""
from pathlib import Path

import numpy as np
import pytest

from morphgen.autodiff import differentiate
from morphgen.frontend import compile_file
from morphgen.interp import Interpreter
from morphgen.passes import run_default

from .helpers import finite_difference_check, perturbed_params, random_data, random_graph

EXAMPLES = sorted(Path(__file__).resolve().parents[2].joinpath("examples").glob("*.mp"))
SIZES = {"F": 5, "C": 3, "etypes": 3, "ntypes": 2, "N": 10}


def _compiled(path):
    prog = compile_file(str(path))
    return prog.bind({s: SIZES[s] for s in prog.symbols()})


def test_examples_exist():
    assert {p.stem for p in EXAMPLES} >= {"gcn", "sage", "gin", "gat", "rgcn", "rgat", "hgt"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_gradients_after_default_passes(path):
    g = random_graph(10, 26, seed=1, etypes=3, ntypes=2, weighted=True)
    plain = _compiled(path)
    differentiate(plain)
    optimised = _compiled(path)
    run_default(optimised, g.num_nodes, g.num_edges)
    x, labels, mask = random_data(g, None if plain.featureless else SIZES["F"], SIZES["C"])
    params = perturbed_params(plain)
    loss, grads = finite_difference_check(optimised, g, x, labels, mask, params, max_entries=10)
    ref_loss, ref_grads, _ = Interpreter(plain, g, x, labels, mask, seed=5).run(params)
    assert loss == pytest.approx(ref_loss, rel=1e-12)
    for k in ref_grads:
        np.testing.assert_allclose(grads[k], ref_grads[k], rtol=1e-9, atol=1e-12, err_msg=k)

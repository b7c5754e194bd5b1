"""Programs that read the dataset's edge weights: the OpenMP backend's loss and weight gradients
equal the interpreter's on both feature paths, the GCN layers that weigh their edges compute
the weighted example, and a library given no weights refuses to run."""
import numpy as np
import pytest

from morphgen.frontend import compile_source
from morphgen.graph import Graph, with_self_loops
from morphgen.interp import Interpreter
from morphgen.library import RuntimeFailure
from tests.backend.harness import assert_matches_interpreter, build, session
from tests.backend.weighted_programs import LAYER_NAMES, LAYERS, weighted_programs
from tests.ir.helpers import perturbed_params, random_data, random_graph

PROGRAMS = weighted_programs()


@pytest.mark.parametrize("features", ["dense", "csr"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_weighted_programs_match_interpreter(name, features):
    """24 input features: wider than gcn_layers' 16, so its first aggregation stays after the
    product (read narrower first, it would aggregate the raw features, which the sparse path
    keeps in their own format: `train` lowers such a program for the dense path)."""
    graph = random_graph(n=40, e=200, seed=4, weighted=True)
    x, labels, mask = random_data(graph, 24, classes=3)
    assert_matches_interpreter(PROGRAMS[name](), graph, x, labels, mask, classes=3, features=features)


def test_weighted_aggregations_of_the_raw_features_match_interpreter():
    """6 input features, narrower than the layer's 16: the reordering aggregates x itself."""
    graph = random_graph(n=40, e=200, seed=4, weighted=True)
    x, labels, mask = random_data(graph, 6, classes=3)
    assert_matches_interpreter(PROGRAMS["gcn_layers"](), graph, x, labels, mask, classes=3)


def _interpreter_loss(program, graph, x, labels, mask, params):
    program.bind({"F": x.shape[1], "C": 3})
    values = Interpreter(program, graph, x, labels, mask, dtype=np.float64).forward(params, training=False)
    return float(values[program.loss.id])


def test_gcn_layers_weighing_edges_compute_the_example():
    """`gnn.layer(..., edge_weight = true)` is examples/gcn_weighted.mp (PyG's GCNConv given the
    weights), also when the graph holds the self loops (gnn.addSelfLoops: they weigh 1)."""
    graph = random_graph(n=40, e=200, seed=4, weighted=True)
    x, labels, mask = random_data(graph, 6, classes=3)
    example = PROGRAMS["gcn_weighted"]()
    params = perturbed_params(example.bind({"F": 6, "C": 3}))
    expected = _interpreter_loss(example, graph, x, labels, mask, params)
    renamed = {LAYER_NAMES[k]: v for k, v in params.items()}
    layers = PROGRAMS["gcn_layers"]()
    assert _interpreter_loss(layers, graph, x, labels, mask, renamed) == pytest.approx(expected, rel=1e-12)
    looped = compile_source(LAYERS.replace("gnn.layer(F, 16", "gnn.addSelfLoops();\n    gnn.layer(F, 16"))
    assert looped.self_loops
    assert _interpreter_loss(looped, with_self_loops(graph), x, labels, mask, renamed) == pytest.approx(
        expected, rel=1e-12)


def test_the_weights_are_read_in_the_edges_order_not_as_given():
    """The library holds edges sorted by destination: a graph given in another order must weigh
    each edge by its own weight (the same graph, edges shuffled, gives the same loss)."""
    graph = random_graph(n=40, e=200, seed=4, weighted=True)
    order = np.random.default_rng(0).permutation(graph.num_edges)
    shuffled = Graph(graph.num_nodes, graph.src[order], graph.dst[order], edge_weight=graph.edge_weight[order])
    x, labels, mask = random_data(graph, 6, classes=3)
    program = PROGRAMS["attention"]()
    lib = build(program, graph, x, 3)
    losses = [session(lib, program, g, x, labels, mask).evaluate()["loss"] for g in (graph, shuffled)]
    assert losses[0] == pytest.approx(losses[1], rel=1e-6)


def test_a_library_given_no_weights_says_so():
    graph = random_graph(n=40, e=200, seed=4, weighted=True)
    x, labels, mask = random_data(graph, 6, classes=3)
    program = PROGRAMS["gcn_weighted"]()
    lib = build(program, graph, x, 3)
    unweighted = Graph(graph.num_nodes, graph.src, graph.dst)
    with pytest.raises(RuntimeFailure, match="reads e.edge_weight, but the graph has no edge weights"):
        session(lib, program, unweighted, x, labels, mask)

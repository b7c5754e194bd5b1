"""Programs that read the dataset's edge weights: the OpenMP backend's loss and weight gradients
equal the interpreter's on both feature paths, and a library given no weights refuses to run."""
import numpy as np
import pytest

from morphgen.graph import Graph
from tests.backend.harness import assert_matches_interpreter, build, session
from tests.backend.weighted_programs import weighted_programs
from tests.ir.helpers import random_data, random_graph

PROGRAMS = weighted_programs()


@pytest.mark.parametrize("features", ["dense", "csr"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_weighted_programs_match_interpreter(name, features):
    graph = random_graph(n=40, e=200, seed=4, weighted=True)
    x, labels, mask = random_data(graph, 6, classes=3)
    assert_matches_interpreter(PROGRAMS[name](), graph, x, labels, mask, classes=3, features=features)


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
    with pytest.raises(Exception, match="reads e.edge_weight, but the graph has no edge weights"):
        session(lib, program, unweighted, x, labels, mask)

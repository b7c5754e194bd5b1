import numpy as np
import pytest

from morphgen.graph import Graph
from morphgen.partition import build_layouts, partition_graph

from tests.partition.partition_graphs import check_layouts, grid, messy, stars


def test_hand_computed_path():
    # 0 -> 1 -> 2 -> 3 and 3 -> 0, parts {0,1} and {2,3}
    g = Graph(4, [0, 1, 2, 3], [1, 2, 3, 0])
    a = np.array([0, 0, 1, 1])
    l0, l1 = build_layouts(g, a, 2)
    assert l0.owned.tolist() == [0, 1] and l0.ghosts.tolist() == [3]
    assert l1.owned.tolist() == [2, 3] and l1.ghosts.tolist() == [1]
    # part 1: row of node 2 has source 1 (ghost, local 2); row of node 3 has source 2 (local 0)
    assert l1.indptr.tolist() == [0, 1, 2] and l1.indices.tolist() == [2, 0]
    assert l1.edge_ids.tolist() == [1, 2]
    assert l0.indptr.tolist() == [0, 1, 2] and l0.indices.tolist() == [2, 0]
    assert list(l0.send) == [1] and l0.send[1].tolist() == [1]
    assert l1.recv[0].tolist() == [2] and l1.send[0].tolist() == [1] and l0.recv[1].tolist() == [2]
    check_layouts(g, a, [l0, l1])


@pytest.mark.parametrize("strategy", ["auto", "metis", "components", "greedy"])
@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_invariants_on_messy_graph(strategy, k):
    g = messy()
    r = partition_graph(g, k, strategy=strategy, max_imbalance=1.5) if strategy == "metis" \
        else partition_graph(g, k, strategy=strategy)
    check_layouts(g, r.assignment, build_layouts(g, r.assignment, k))


def test_invariants_random_assignment_many_parts():
    g = grid(9, 11)
    a = np.random.default_rng(3).integers(0, 7, g.num_nodes)
    check_layouts(g, a, build_layouts(g, a, 7))


def test_checker_detects_a_broken_send_list():
    g = grid(4, 4)
    a = np.repeat([0, 1], 8)
    layouts = build_layouts(g, a, 2)
    layouts[0].send[1] = layouts[0].send[1][::-1].copy()
    with pytest.raises(AssertionError, match="send 0->1"):
        check_layouts(g, a, layouts)


def test_more_parts_than_nodes_leaves_empty_parts():
    g = Graph(3, [0, 1], [1, 2])
    r = partition_graph(g, 5)
    layouts = build_layouts(g, r.assignment, 5)
    check_layouts(g, r.assignment, layouts)
    assert sorted(l.num_owned for l in layouts) == [0, 0, 1, 1, 1]


def test_empty_graph():
    g = Graph(0, [], [])
    for strategy in ("auto", "metis", "components", "greedy"):
        r = partition_graph(g, 3, strategy=strategy)
        assert r.assignment.shape == (0,) and r.edge_cut == 0
        layouts = build_layouts(g, r.assignment, 3)
        check_layouts(g, r.assignment, layouts)
        assert all(l.num_local == 0 and l.indptr.tolist() == [0] for l in layouts)


def test_nodes_without_edges_and_single_part():
    g = Graph(10, [], [])
    r = partition_graph(g, 4)
    assert np.bincount(r.assignment, minlength=4).max() == 3   # 10 unit loads over 4 parts
    check_layouts(g, r.assignment, build_layouts(g, r.assignment, 4))
    one = partition_graph(stars([20]), 1)
    assert one.phase == "trivial" and not one.assignment.any()
    layouts = build_layouts(stars([20]), one.assignment, 1)
    assert layouts[0].num_ghosts == 0 and layouts[0].send == {} and layouts[0].recv == {}


def test_self_loops_and_duplicates_stay_local_and_counted():
    g = Graph(3, [0, 0, 0, 1, 2], [0, 1, 1, 2, 2])
    a = np.array([0, 0, 1])
    l0, l1 = build_layouts(g, a, 2)
    assert l0.indices.size == 3            # self loop 0->0 and both copies of 0->1
    assert l1.ghosts.tolist() == [1] and l1.indices.size == 2
    check_layouts(g, a, [l0, l1])

"""Swap refinement (swaps.py) and the silencing of METIS's C-level stdout (quiet.py)."""
import numpy as np
import pymetis
import pytest

from morphgen.partition import LoadModel, PartitionError, imbalance, partition_graph
from morphgen.partition.adjacency import symmetric_adjacency
from morphgen.partition.loads import part_loads
from morphgen.partition.refine import load_cap, refine_cut
from morphgen.partition.isolated import free_nodes
from morphgen.partition.quiet import _flush_c_stdio
from morphgen.partition.swaps import refine_with_swaps

from tests.partition.partition_graphs import grid, messy


def loads_of(g):
    return LoadModel().vertex_loads(g)


def cut_of(g, a):
    return int(np.count_nonzero(a[g.src] != a[g.dst]))


def test_swaps_fix_what_single_moves_cannot_at_a_full_cap():
    g = grid(12, 12)
    loads = loads_of(g)
    clean = (np.arange(144) >= 72).astype(np.int64)
    swapped = clean.copy()
    swapped[13], swapped[130] = 1, 0                      # two interior vertices (load 5) exchanged
    adj = symmetric_adjacency(g)
    # at bound 1.0 neither part has room: single moves are stuck ...
    assert np.array_equal(refine_cut(adj, loads, swapped, 2, bound=1.0), swapped)
    # ... but exchanging the two strays keeps both loads and restores the clean cut
    r = refine_with_swaps(adj, loads, swapped, 2, bound=1.0)
    assert cut_of(g, r) == cut_of(g, clean) < cut_of(g, swapped)
    assert part_loads(r, loads, 2).tolist() == [336, 336]


def test_adjacent_swap_partners_are_charged_for_their_shared_edge():
    # path 0-1-2-3 split {0,2} | {1,3}: swapping 1 and 2 (adjacent) gains 1 + 1 - 2*1 = 0, so no swap;
    # the loads are 2,3,3,2 so any single move breaks the cap at bound 1.0
    from morphgen.graph import Graph
    g = Graph(4, [0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2])
    loads = loads_of(g)
    start = np.array([0, 1, 0, 1], np.int64)
    r = refine_with_swaps(symmetric_adjacency(g), loads, start, 2, bound=1.0)
    assert cut_of(g, r) <= cut_of(g, start)
    assert imbalance(part_loads(r, loads, 2)) <= 1.0 + 1e-12


@pytest.mark.parametrize("seed", range(8))
def test_swaps_never_break_the_bound_nor_raise_the_cut_and_are_deterministic(seed):
    rng = np.random.default_rng(seed)
    g = messy(150, 1200, seed=seed)
    k = int(rng.integers(2, 7))
    bound = float(rng.choice([1.0, 1.02, 1.1]))
    loads = loads_of(g)
    adj = symmetric_adjacency(g)
    start = rng.integers(0, k, g.num_nodes)
    cap = load_cap(loads, k, bound)
    a = refine_with_swaps(adj, loads, start, k, bound=bound)
    assert a.shape == start.shape and a.dtype == np.int64 and a.min() >= 0 and a.max() < k
    assert cut_of(g, a) <= cut_of(g, start)
    assert cut_of(g, a) < cut_of(g, start)                # a random start always has paying moves
    before, after = part_loads(start, loads, k), part_loads(a, loads, k)
    within = before <= cap + 1e-9
    assert np.all(after[within] <= cap + 1e-9)            # no part within the cap leaves it
    assert np.all(after[~within] <= before[~within])      # a part over it only sheds load
    assert np.array_equal(a, refine_with_swaps(adj, loads, start, k, bound=bound))


def test_swap_refinement_option_keeps_the_bound_and_never_cuts_more():
    g = messy(300, 2400, seed=5)
    plain = partition_graph(g, 4, imbalance=1.01, max_imbalance=1.01)
    swapped = partition_graph(g, 4, imbalance=1.01, max_imbalance=1.01, swap_refinement=True)
    assert swapped.phase == plain.phase == "metis", plain.reason
    assert swapped.load_imbalance <= 1.01 + 1e-12
    assert swapped.edge_cut <= plain.edge_cut
    again = partition_graph(g, 4, imbalance=1.01, max_imbalance=1.01, swap_refinement=True)
    assert np.array_equal(again.assignment, swapped.assignment)
    with pytest.raises(PartitionError, match="swap_refinement"):
        partition_graph(g, 4, swap_refinement="yes")


def test_metis_noise_does_not_reach_stdout(capfd):
    g = messy()                                           # 60 nodes, 16 parts, tolerance 2.0
    adj = symmetric_adjacency(g)
    options = pymetis.Options(ufactor=1000, seed=0, ncuts=4)
    options.ctype = 1
    # the trigger: METIS itself prints this to file descriptor 1 for this input, weighted as
    # Phase I weighs it (free nodes 0)
    pymetis.part_graph(16, adjacency=pymetis.CSRAdjacency(adj.indptr, adj.indices),
                       vweights=np.where(free_nodes(adj), 0, loads_of(g)), eweights=adj.weights,
                       recursive=True, options=options)
    _flush_c_stdio()                                      # C stdio buffers it until then
    assert "Cannot bisect" in capfd.readouterr().out
    r = partition_graph(g, 16, imbalance=2.0, max_imbalance=2.0)
    assert r.phase in ("metis", "components", "greedy")
    out = capfd.readouterr().out
    assert out == "", out


def test_captured_c_stdout_hands_back_the_text_and_restores_the_descriptor(capfd):
    import os
    from morphgen.partition.quiet import captured_c_stdout
    with captured_c_stdout() as got:
        os.write(1, b"from C\n")
    assert got.text == "from C"
    os.write(1, b"after\n")
    assert capfd.readouterr().out == "after\n"

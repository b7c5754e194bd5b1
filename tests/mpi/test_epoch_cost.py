"""--partitioner auto: the epoch cost model reads the program as the MPI lowering does, and the
chooser takes the candidate it predicts fastest, the tightest bound on ties."""
from __future__ import annotations

import numpy as np

from morphgen.backends.mpi.epoch_cost import CANDIDATE_BOUNDS, TIE, EpochCostModel, EpochWork, choose_partition, epoch_work
from morphgen.data.synthetic import rmat
from morphgen.pipeline import lower
from tests.e2e.support import example


def test_gcn_work_is_what_the_mpi_lowering_runs():
    """examples/gcn.mp, F = 64, C = 8: layer 1 aggregates x W (16 wide), which each rank computes
    for its ghost rows from their loaded features, so only layer 2's 8-wide product is exchanged."""
    work = epoch_work(lower(example("gcn"), {"F": 64, "C": 8}, False, True))
    assert work.aggregations == ((16, 3), (8, 3))
    assert work.exchanges == (8,)
    assert work.local_flops_per_row == 8 * 64 * 16
    assert work.owned_flops_per_row == 8 * 16 * 8


def test_aggregations_of_the_loaded_features_have_no_backward():
    work = epoch_work(lower(example("sage"), {"F": 8, "C": 4}, False, False))
    assert work.aggregations[0] == (8, 2) and 8 not in work.exchanges


class EdgeCountModel(EpochCostModel):
    """Aggregation priced by the local edge count instead of a timed kernel: deterministic."""
    def spmm_seconds_per_column(self, lay) -> float:
        return lay.indices.shape[0] * 1e-9


def _graph():
    return rmat(4096, 60_000, seed=1, symmetric=True, dedup=True)


def test_the_fastest_predicted_candidate_is_chosen():
    g = _graph()
    work = EpochWork(aggregations=((32, 3),), exchanges=(32,), owned_flops_per_row=0.0, local_flops_per_row=0.0)
    for halo_gbs in (1e-3, 1e3):        # exchanges dominate, then aggregation balance does
        assignment, how = choose_partition(g, 4, EdgeCountModel(work, 1, dense_gflops=10.0, halo_gbs=halo_gbs))
        predicted = {p["candidate"]: p["epoch_s"] for p in how["predictions"]}
        assert list(predicted) == [f"morphgen {b:.2f}" for b in CANDIDATE_BOUNDS] + ["metis"]
        fastest = min(predicted.values())
        assert predicted[how["chosen"]] * (1 - TIE) <= fastest, how     # within the tie margin of the best
        assert assignment.shape == (g.num_nodes,) and set(np.unique(assignment)) == {0, 1, 2, 3}


def test_ties_keep_the_tightest_bound():
    work = EpochWork(aggregations=(), exchanges=(), owned_flops_per_row=0.0, local_flops_per_row=0.0)
    _, how = choose_partition(_graph(), 2, EdgeCountModel(work, 1, dense_gflops=10.0, halo_gbs=1.0))
    assert how["chosen"] == "morphgen 1.03"

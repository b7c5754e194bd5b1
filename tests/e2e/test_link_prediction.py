"""Link prediction end to end: the R-GCN example trains on a knowledge graph of triples, is ranked
by the filtered evaluation, and the data and program mismatches are clear errors."""
import json

import numpy as np
import pytest

import morphgen
from morphgen.data import LinkDataset, load_dataset
from morphgen.data.errors import DataError
from morphgen.link_eval import filtered_ranks, ranking_metrics
from morphgen.negative_sampling import epoch_triples

from tests.e2e.support import (RELATIONS, assert_clean_failure, datasets_dir, example, knowledge_graph,
                               link_dataset, run_cli, write_link_npz)

def test_the_example_learns_a_structured_knowledge_graph():
    data = link_dataset()
    model = morphgen.compile(example("rgcn_link"), threads=2, seed=1)
    model.bind(data)
    before = model.evaluate()
    result = model.fit(epochs=60)
    losses = [row["loss"] for row in result.history]
    assert losses[-1] < 0.5 * losses[0]
    # ranking every node: random scores give an MRR near ln(60) / 60 ~ 0.07 and Hits@10 ~ 0.17
    final = result.final
    assert final["test_mrr"] > max(0.35, before["test_mrr"] + 0.15), final
    assert 0.8 <= final["test_hits@10"] <= 1.0 and final["test_hits@1"] <= final["test_hits@3"], final


def test_filtered_ranks_match_a_brute_force_count():
    rng = np.random.default_rng(3)
    z, rel = rng.normal(size=(9, 4)), rng.normal(size=(2, 4))
    z[5] = z[4]                                                    # a tie
    known = np.array([[0, 0, 1], [0, 0, 2], [3, 1, 4], [5, 1, 4], [0, 1, 4]])
    queries = known[[0, 2]]
    ranks = filtered_ranks(z, rel, queries, known)
    expected = []
    for pos in (2, 0):                                             # tails, then heads
        for h, r, t in queries:
            true = (t if pos == 2 else h)
            scores = {c: float(((z[c] if pos == 0 else z[h]) * rel[r] * (z[t] if pos == 0 else z[c])).sum())
                      for c in range(9)}
            filtered = {c for a, b, c2 in known.tolist() for c in [c2 if pos == 2 else a]
                        if (b == r and ((pos == 2 and a == h) or (pos == 0 and c2 == t)))} - {true}
            rest = [s for c, s in scores.items() if c not in filtered]
            expected.append(((np.array(rest) > scores[true]).sum() + 1 + (np.array(rest) >= scores[true]).sum()) / 2)
    np.testing.assert_allclose(ranks, expected)
    metrics = ranking_metrics(z, rel, queries, known)
    assert metrics["mrr"] == pytest.approx(np.mean(1 / np.array(expected)))


def test_negatives_corrupt_one_end_and_are_reproducible():
    pos = np.array([[1, 0, 2], [3, 1, 4], [5, 2, 6]] * 200)
    t = epoch_triples(pos, 1000, 2, seed=7, epoch=3)
    assert t.shape == (1800, 4) and (t[:600, 3] == 1).all() and (t[600:, 3] == 0).all()
    neg, orig = t[600:, :3], np.tile(pos, (2, 1))
    assert (neg[:, 1] == orig[:, 1]).all()
    kept_head, kept_tail = neg[:, 0] == orig[:, 0], neg[:, 2] == orig[:, 2]
    assert (kept_head | kept_tail).all() and 0.4 < kept_head.mean() < 0.6
    assert np.array_equal(t, epoch_triples(pos, 1000, 2, seed=7, epoch=3))
    assert not np.array_equal(t, epoch_triples(pos, 1000, 2, seed=7, epoch=4))


def test_train_command_reports_the_ranking(tmp_path):
    data = write_link_npz(tmp_path / "kg.npz")
    proc = run_cli("train", example("rgcn_link"), "--dataset", data, "--epochs", "3", "--threads", "2",
                   "--json", tmp_path / "run.json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "test_mrr" in proc.stdout and "valid_hits@10" in proc.stdout
    report = json.loads((tmp_path / "run.json").read_text())
    assert 0.0 < report["test_mrr"] <= 1.0 and len(report["history"]) == 3


def test_a_program_and_a_dataset_of_different_tasks_are_refused(tmp_path):
    data = write_link_npz(tmp_path / "kg.npz")
    assert_clean_failure(run_cli("train", example("gcn"), "--dataset", data, "--epochs", "1"), 2,
                         "is a link-prediction dataset (triples, no labels)")
    assert_clean_failure(run_cli("train", example("rgcn_link"), "--dataset", "synthetic", "--epochs", "1"), 2,
                         "has no triples to score")


def test_a_backend_without_the_link_kernels_refuses_a_link_program():
    """Every registered backend has them; one that had not would say so before emitting anything."""
    import dataclasses
    from morphgen.api import CompiledModel
    from morphgen.backends import REGISTRY
    from morphgen.errors import UserError
    model = CompiledModel(example("rgcn_link"))
    model.lower_for(link_dataset())
    backend = REGISTRY["mpi"]
    without = dataclasses.replace(backend, capabilities=dataclasses.replace(backend.capabilities,
                                                                           link_prediction=False))
    with pytest.raises(UserError, match="predicts links .* which the mpi backend does not run yet"):
        without.check_program(model.program)


def test_wn18rr_loads_as_a_link_dataset():
    data = load_dataset("wn18rr", data_dir=datasets_dir())
    assert isinstance(data, LinkDataset)
    assert (data.num_nodes, data.num_edges, data.graph.num_etypes, data.num_relations) == (40943, 173670, 22, 11)
    assert [len(t) for t in (data.train_triples, data.valid_triples, data.test_triples)] == [86835, 3034, 3134]


@pytest.mark.parametrize("column,value,message", [
    (0, 99, r"train_triples: row 0: head 99 is outside \[0, 60\)"),
    (1, 3, r"train_triples: row 0: relation 3 is outside \[0, 3\)"),
])
def test_triples_outside_the_graph_name_the_row(tmp_path, column, value, message):
    train, valid, test, graph = knowledge_graph()
    train[0, column] = value
    with pytest.raises(DataError, match=message):
        LinkDataset("kg", graph, None, train, valid, test, RELATIONS)


def test_a_resumed_run_draws_the_negatives_of_the_uninterrupted_one(tmp_path):
    data = link_dataset()
    straight = morphgen.compile(example("rgcn_link"), threads=2, seed=4)
    straight.bind(data)
    straight.fit(epochs=6)
    first = morphgen.compile(example("rgcn_link"), threads=2, seed=4)
    first.bind(data)
    first.fit(epochs=3)
    first.save_checkpoint(tmp_path / "half.ckpt")
    resumed = morphgen.compile(example("rgcn_link"), threads=2, seed=4)
    resumed.bind(data)
    resumed.load_checkpoint(tmp_path / "half.ckpt")
    resumed.fit(epochs=3)
    for name, value in straight.get_params().items():
        np.testing.assert_array_equal(resumed.get_params()[name], value, err_msg=name)

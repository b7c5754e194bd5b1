import json

import numpy as np
import pytest

from morphgen.graph import Graph
from morphgen.partition import (PartitionError, build_layouts, load_part, load_partition, partition_graph,
                                quality_report, save_partition)
from morphgen.partition.cli import add_parser, run

from tests.partition.partition_graphs import DATASETS, check_layouts, grid, messy


def _same(a, b):
    for name in ("part", "num_parts", "num_global_nodes"):
        assert getattr(a, name) == getattr(b, name)
    for name in ("owned", "ghosts", "ghost_owner", "indptr", "indices", "edge_ids"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    for name in ("send", "recv"):
        da, db = getattr(a, name), getattr(b, name)
        assert sorted(da) == sorted(db)
        assert all(np.array_equal(da[q], db[q]) for q in da)


def test_save_load_round_trip_and_single_part_load(tmp_path):
    g = messy(80, 400, seed=5)
    r = partition_graph(g, 3)
    layouts = build_layouts(g, r.assignment, 3)
    save_partition(layouts, tmp_path / "p", meta={"strategy": "auto"})
    loaded = load_partition(tmp_path / "p")
    for a, b in zip(layouts, loaded):
        _same(a, b)
    check_layouts(g, r.assignment, loaded)
    # a rank needs only the manifest and its own file
    (tmp_path / "p" / "part-00000.npz").unlink()
    (tmp_path / "p" / "part-00002.npz").unlink()
    _same(layouts[1], load_part(tmp_path / "p", 1))
    with pytest.raises(PartitionError, match="part-00000.npz: part file missing"):
        load_part(tmp_path / "p", 0)


def test_load_errors_are_clear(tmp_path):
    with pytest.raises(PartitionError, match="no partition manifest"):
        load_part(tmp_path, 0)
    g = grid(3, 3)
    save_partition(build_layouts(g, np.zeros(9, np.int64), 1), tmp_path)
    with pytest.raises(PartitionError, match=r"part: must be in \[0, 1\)"):
        load_part(tmp_path, 1)
    (tmp_path / "part-00000.npz").write_bytes(b"not an archive")
    with pytest.raises(PartitionError, match="unreadable part file"):
        load_part(tmp_path, 0)
    (tmp_path / "manifest.json").write_text("{")
    with pytest.raises(PartitionError, match="unreadable manifest"):
        load_part(tmp_path, 0)


def test_quality_report_hand_computed():
    # 0->1, 1->2, 2->3, 3->0, 0->2 with parts {0,1} {2,3}
    g = Graph(4, [0, 1, 2, 3, 0], [1, 2, 3, 0, 2])
    q = quality_report(g, np.array([0, 0, 1, 1]), 2, feature_width=8, bytes_per_value=4)
    assert q.edge_cut == 3                        # 1->2, 3->0, 0->2
    assert q.ghosts_per_part == [1, 2]            # part 0 needs 3; part 1 needs 0 and 1
    assert q.ghost_nodes == 3 and q.halo_bytes == 3 * 8 * 4
    assert q.edges_per_part == [2, 3]
    assert q.load_imbalance_edges == pytest.approx(3 / 2.5)
    assert q.load_imbalance_nodes == 1.0
    assert q.load_imbalance_load == pytest.approx((3 + 2) / 4.5)   # in-degree + 1 per node


def test_quality_ghosts_agree_with_layouts():
    g = messy(120, 900, seed=9)
    r = partition_graph(g, 5)
    q = quality_report(g, r.assignment, 5)
    layouts = build_layouts(g, r.assignment, 5)
    assert q.ghosts_per_part == [l.num_ghosts for l in layouts]
    assert q.edges_per_part == [int(l.indices.size) for l in layouts]


def _cli(argv):
    import argparse
    parser = argparse.ArgumentParser(prog="morphgen")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.handler(args)


def test_cli_table_json_and_saved_parts(tmp_path, capsys):
    out, js = tmp_path / "parts", tmp_path / "r.json"
    code = _cli(["partition", str(DATASETS / "cora.npz"), "--parts", "4", "--json", str(js), "--out", str(out)])
    assert code == 0
    text = capsys.readouterr().out
    for name in ("auto", "metis", "components", "greedy", "vertex-metis", "chosen: auto -> metis"):
        assert name in text
    doc = json.loads(js.read_text())
    for key in ("parts", "strategy", "edge_cut", "ghost_nodes", "load_imbalance_edges",
                "load_imbalance_nodes", "seconds"):
        assert key in doc
    assert doc["parts"] == 4 and doc["strategy"] == "auto" and len(doc["comparison"]) == 5
    assert len(load_partition(out)) == 4


def test_cli_errors_exit_2_with_message(tmp_path, capsys):
    assert _cli(["partition", str(tmp_path / "missing.npz"), "--parts", "2"]) == 2
    assert capsys.readouterr().err.startswith("morphgen: error: ")
    assert _cli(["partition", str(DATASETS / "cora.npz"), "--parts", "0"]) == 2
    assert "num_parts" in capsys.readouterr().err
    assert _cli(["partition", str(DATASETS / "cora.npz"), "--parts", "2", "--imbalance", "0.9"]) == 2
    assert "imbalance" in capsys.readouterr().err

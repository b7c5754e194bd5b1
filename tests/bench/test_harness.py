"""Smoke and unit tests of `morphgen bench`, the sweeps and the suite plumbing (tiny graphs).

The end-to-end test runs the real `morphgen train` in a child process (no peers needed); the
parity and memory-cap tests start the PyG runner, which `pip install .[bench]` provides.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from morphgen.bench import harness, report, sparsity_cli, suite_cli, sweep
from morphgen.cli import main
from morphgen.errors import UserError

ROOT = Path(__file__).resolve().parents[2]
GCN = ROOT / "examples" / "gcn.mp"
GCN3 = ROOT / "examples" / "gcn3.mp"
TINY = "synthetic:nodes=240,edges=1600,features=12,classes=3,val=40,test=80,seed=1"
# The calibrated threshold is not what these tests exercise; pin it so they do not depend on it.
PIN_TAU = ["--sparsity-threshold", "0.5"]


# ----------------------------------------------------------------------------- end to end
def test_bench_smoke_without_peers(tmp_path):
    out = tmp_path / "b"
    code = main(["bench", str(GCN), "--dataset", TINY, "--peers", "none", "--epochs", "4", "--warmup", "1",
                 "--threads", "1", "--out", str(out), "--quick-machine", *PIN_TAU])
    assert code == 0
    data = json.loads((out / "bench.json").read_text())
    [m] = data["systems"]
    assert m["system"] == "morphgen" and m["error"] is None
    assert len(m["epoch_times_s"]) == 4
    assert m["epoch_time_s"] == pytest.approx(sorted(m["epoch_times_s"][1:])[1])   # median after warm-up
    assert m["peak_rss_bytes"] > 0 and m["final_loss"] > 0 and 0.0 <= m["test_acc"] <= 1.0
    assert m["compile_seconds"] is not None and m["config"]["feature_path"] == "dense"
    assert data["dataset"]["nodes"] == 240 and data["dataset"]["edges"] == 1600
    machine = data["machine"]
    assert machine["triad_gbs"] > 0 and machine["copy_gbs"] > 0 and machine["sgemm_gflops"] > 0
    assert data["analytic_minimum_bytes"] > 240 * 12 * 4           # at least the features
    assert data["kernels"], "per-kernel rates from --profile are reported"
    assert all(k["gb_per_s"] >= 0 and k["bound"] in ("memory", "compute") for k in data["kernels"])
    md = (out / "bench.md").read_text()
    assert "| morphgen |" in md and "triad" in md
    for png in ("epoch_time.png", "peak_memory.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_rounds_interleave_the_systems_and_keep_each_ones_fastest_median(tmp_path):
    out = tmp_path / "b"
    code = main(["bench", str(GCN), "--dataset", TINY, "--peers", "none", "--epochs", "3", "--warmup", "1",
                 "--threads", "1", "--out", str(out), "--quick-machine", "--no-profile", "--rounds", "3", *PIN_TAU])
    assert code == 0
    data = json.loads((out / "bench.json").read_text())
    [m] = data["systems"]
    assert data["rounds"] == 3 and m["error"] is None
    [note] = [n for n in data["notes"] if "interleaved" in n]
    medians = [float(t) for t in note.split("morphgen ")[1].split(" ms")[0].split(", ")]
    assert len(medians) == 3 and m["epoch_time_s"] * 1e3 == pytest.approx(min(medians), abs=0.005)
    assert "the fastest of 3 interleaved rounds per system" in (out / "bench.md").read_text()


def test_parity_with_pyg_and_peer_row(tmp_path):
    """Identical initial weights, dropout 0: the losses of the first three epochs (so the gradients
    and two Adam steps) agree within 1e-4 (GCN3, 3 layers)."""
    out = tmp_path / "p"
    code = main(["bench", str(GCN3), "--dataset", TINY, "--peers", "pyg", "--epochs", "3", "--warmup", "1",
                 "--threads", "1", "--out", str(out), "--quick-machine", "--parity", "--no-profile", *PIN_TAU])
    data = json.loads((out / "bench.json").read_text())
    par = data["parity"]["peers"]["pyg"]
    assert par["error"] is None, par
    assert par["abs_diff"] <= harness.PARITY_TOLERANCE and par["passed"] is True
    assert data["parity"]["epochs"] == harness.PARITY_EPOCHS == 3 and len(par["losses"]) == 3
    ours = data["parity"]["morphgen_losses"]
    assert len(set(ours)) == 3, "the epochs must have trained: equal losses would check no step"
    # GCN3 is well conditioned: nudged weights move its losses by rounding only, so every epoch's
    # tolerance stays at the floor
    assert len(data["parity"]["nudged_losses"]) == harness.PARITY_NUDGES
    assert data["parity"]["tolerances"] == pytest.approx(harness.parity_tolerances(ours))
    pyg = next(s for s in data["systems"] if s["system"] == "pyg")
    assert pyg["error"] is None and pyg["epoch_time_s"] > 0 and pyg["time_ratio_vs_morphgen"] > 0
    assert code == 0


def _peer(losses, error=None):
    return {"first_epoch_loss": losses[0] if losses else None, "epoch_losses": losses, "error": error}


def test_parity_fails_on_a_later_epoch_that_drifts():
    """The first loss checks only the forward: a wrong gradient or optimizer step shows later."""
    ours, tol = [1.5, 1.2, 1.0], [1e-4] * 3
    assert harness.parity_row(ours, _peer([1.5, 1.2, 1.0 + 5e-5]), tol)["passed"] is True
    row = harness.parity_row(ours, _peer([1.5, 1.2003, 1.0]), tol)
    assert row["passed"] is False and row["abs_diff"] == pytest.approx(3e-4)
    assert harness.parity_row(ours, _peer([1.5, None, 1.0]), tol)["passed"] is False     # not finite
    assert harness.parity_row(ours, _peer([1.5, 1.2003, 1.0]), [1e-4, 1e-3, 1e-4])["passed"] is True


def test_parity_names_a_peer_that_ran_other_epochs_or_failed():
    tol = [1e-4] * 3
    row = harness.parity_row([1.5, 1.2, 1.0], _peer([1.5]), tol)
    assert row["passed"] is None and row["error"] == "it reported 1 epoch losses, not 3"
    row = harness.parity_row([1.5, 1.2, 1.0], _peer([], error="out of memory (cap 1 GiB)"), tol)
    assert row["passed"] is None and row["error"] == "out of memory (cap 1 GiB)"


def test_parity_tolerance_is_relative_above_one_and_follows_morphgens_own_drift():
    ours = [0.5, 20.0, 1.6]
    assert harness.parity_tolerances(ours) == pytest.approx([1e-4, 2e-3, 1.6e-4])
    # morphgen from nudged weights: the third epoch moved 1e-3 in one run, 2e-4 in the other
    nudged = [[0.5, 20.0, 1.601], [0.5, 20.0, 1.6002]]
    assert harness.parity_tolerances(ours, nudged) == pytest.approx([1e-4, 2e-3, harness.PARITY_DRIFT_FACTOR * 1e-3])


def test_nudged_weights_lie_one_rounding_away():
    params = {"W": np.linspace(-2, 2, 4001, dtype=np.float32), "b": np.zeros(3, np.float32)}
    nudged = harness.nudge(params)
    assert set(nudged) == set(params) and all(nudged[k].dtype == np.float32 for k in params)
    assert np.array_equal(nudged["b"], params["b"])                 # zeros stay zeros
    changed = nudged["W"] != params["W"]
    assert 0.2 < changed.mean() < 0.9
    np.testing.assert_allclose(nudged["W"], params["W"], rtol=1e-6)
    assert not np.array_equal(harness.nudge(params, 1)["W"], nudged["W"])


def test_parity_trains_one_epoch_where_the_peer_keeps_only_diagonal_blocks(tmp_path):
    assert harness.parity_epochs(harness.program_shape(GCN3)) == harness.PARITY_EPOCHS
    hgt = harness.program_shape(ROOT / "examples" / "hgt.mp")       # HGTConv's own blocks
    assert not hgt.block_diagonal and harness.parity_epochs(hgt) == harness.PARITY_EPOCHS
    full = tmp_path / "hgt_full.mp"
    full.write_text((ROOT / "examples" / "hgt.mp").read_text().replace("[g.etypes][2][32][32]", "[g.etypes][64][64]"))
    assert harness.parity_epochs(harness.program_shape(full)) == 1


def test_full_relation_matrices_go_to_the_peer_as_their_diagonal_blocks():
    full = np.arange(2 * 4 * 4, dtype=np.float32).reshape(2, 4, 4)
    blocks = harness._diagonal_blocks(full.reshape(-1), (2, 4, 2), heads=2)
    assert blocks.shape == (2, 4, 2)
    np.testing.assert_array_equal(blocks[1, :2], full[1, :2, :2])
    np.testing.assert_array_equal(blocks[1, 2:], full[1, 2:, 2:])


def test_a_parity_check_that_could_not_run_is_reported():
    """`--parity` on a program the peers cannot build: bench.md says why (it had crashed)."""
    lines = report._parity_lines({"error": "not comparable: layer 0: no GCN layer"})
    assert lines[0] == "Parity: not checked (not comparable: layer 0: no GCN layer)."


def test_peer_weight_decay_spares_the_norms_as_morphgen_does():
    import torch
    from morphgen.bench.peers.torch_loop import decay_groups, gin_mlp
    mlp = gin_mlp(torch, 5, 4, norm=True)
    decayed, spared = decay_groups(torch, mlp, 5e-4)
    assert decayed["weight_decay"] == 5e-4 and spared["weight_decay"] == 0.0
    assert {id(p) for p in spared["params"]} == {id(p) for m in (mlp[1], mlp[4]) for p in m.parameters()}
    assert {id(p) for p in decayed["params"]} == {id(mlp[0].weight), id(mlp[3].weight)}


def test_peer_over_memory_cap_is_reported_not_estimated(tmp_path):
    shape = harness.program_shape(GCN)
    data = harness.prepare_dataset(TINY, None, tmp_path)
    assert data.peer_path == data.path            # no normalisation in gcn.mp: one file
    spec = harness.peer_spec(shape, data, epochs=2, warmup=1, threads=1, sparse_features=False)
    entry = harness.run_peer_capped("pyg", data.path, spec, tmp_path, cap_gib=0.25, timeout_s=120)
    assert entry["error"] is not None and entry["error"].startswith("out of memory (cap 0.25 GiB)")
    assert entry["epoch_time_s"] is None and entry["final_loss"] is None and entry["epoch_times_s"] == []


# ----------------------------------------------------------------------------- program shape
# Written here so the test does not follow edits of the examples; dropout on every layer's input.
THREE_LAYERS_INPUT_DROPOUT = """
function g3(Graph g, propNode<float[F]> x, propNode<int[C]> y) {
    gnn.layer(F, 32, dropout = 0.5);
    gnn.layer(32, 32, dropout = 0.5);
    gnn.layer(32, C, dropout = 0.5);
    gnn.optimizer("adam", lr = 0.01, weight_decay = 5e-4);
    for (int epoch = 0; epoch < 200; epoch++) {
        for (int l = 0; l < 3; l++) {
            gnn.forwardPass(l, "GCN", "Sum");
        }
        gnn.loss("cross_entropy");
        for (int l = 2; l >= 0; l--) {
            gnn.backPropagation(l);
        }
        gnn.optimizerStep();
    }
}
"""

def test_peers_drop_the_input_as_the_program_unless_told_not_to(tmp_path):
    prog = tmp_path / "g3.mp"
    prog.write_text(THREE_LAYERS_INPUT_DROPOUT)
    shape = harness.program_shape(prog)
    data = harness.prepare_dataset(TINY, None, tmp_path)
    spec = lambda **kw: harness.peer_spec(shape, data, epochs=2, warmup=1, threads=1, sparse_features=False, **kw)
    assert spec()["input_dropout"] == 0.5 and spec()["dropout"] == 0.5
    assert spec(input_dropout=0.0)["input_dropout"] == 0.0 and spec(input_dropout=0.0)["dropout"] == 0.5
    assert spec(dropout=0.0)["input_dropout"] == 0.0                # the parity check: no dropout anywhere


def test_program_shape_of_a_three_layer_gcn(tmp_path):
    prog = tmp_path / "g3.mp"
    prog.write_text(THREE_LAYERS_INPUT_DROPOUT)
    s = harness.program_shape(prog)
    assert s.layers == ["F", 32, 32, "C"] and s.dropouts == [0.5, 0.5, 0.5]
    assert s.bias and s.optimizer == "adam" and s.lr == 0.01 and s.weight_decay == 5e-4
    assert s.unsupported is None and s.hidden_dropout == 0.5 and s.input_dropout == 0.5
    assert any("input features" in n for n in s.notes)
    assert s.resolved_layers(100, 7) == [100, 32, 32, 7]


def test_feature_normalization_is_given_to_the_peers_applied(tmp_path):
    prog = tmp_path / "norm.mp"
    text = "\n".join(line for line in GCN.read_text().splitlines() if "normalizeFeatures" not in line)
    prog.write_text(text.replace('gnn.optimizer(', 'gnn.normalizeFeatures("row");\n    gnn.optimizer(', 1))
    s = harness.program_shape(prog)
    assert s.feature_normalization == "row" and s.unsupported is None
    data = harness.prepare_dataset(TINY, None, tmp_path, feature_normalization=s.feature_normalization)
    assert data.peer_path != data.path
    with np.load(data.path) as raw, np.load(data.peer_path) as peer:
        assert np.allclose(np.abs(peer["x"]).sum(axis=1), 1.0, atol=1e-5)
        assert not np.allclose(np.abs(raw["x"]).sum(axis=1), 1.0)
        assert np.array_equal(raw["edge_index"], peer["edge_index"])


def test_program_shape_of_sage_mean_and_max(tmp_path):
    s = harness.program_shape(ROOT / "examples" / "sage.mp")
    assert s.unsupported is None, s.unsupported
    assert (s.conv, s.aggr, s.layers, s.bias) == ("sage", "mean", ["F", 64, "C"], True)
    prog = tmp_path / "sage_max.mp"
    prog.write_text((ROOT / "examples" / "sage.mp").read_text().replace('"Mean"', '"Max"'))
    s = harness.program_shape(prog)
    assert s.unsupported is None and (s.conv, s.aggr) == ("sage", "max")
    data = harness.prepare_dataset(TINY, None, tmp_path)
    spec = harness.peer_spec(s, data, epochs=2, warmup=1, threads=1, sparse_features=False)
    assert spec["model"] == "sage" and spec["aggr"] == "max" and spec["self_loops"] is False


def test_program_shape_of_gat(tmp_path):
    s = harness.program_shape(ROOT / "examples" / "gat.mp")
    assert s.unsupported is None, s.unsupported
    assert (s.conv, s.layers, s.heads, s.activation) == ("gat", ["F", 64, "C"], [8, 1], "elu")
    assert s.attention_dropout == 0.6 and s.negative_slope == 0.2 and s.self_loops and s.bias
    plain = harness.program_shape(harness.without_dropout(ROOT / "examples" / "gat.mp", tmp_path))
    assert plain.attention_dropout == 0.0 and plain.dropouts == [0.0, 0.0]


def test_program_shape_of_gin():
    s = harness.program_shape(ROOT / "examples" / "gin.mp")
    assert s.unsupported is None, s.unsupported
    assert (s.conv, s.layers, s.norms, s.self_loops) == ("gin", ["F", 64, 64, "C"], [True, True, False], False)
    assert s.dropouts == [0.0, 0.5, 0.5] and s.feature_normalization == "row"


def test_program_shape_of_a_gcn_weighing_its_edges(tmp_path):
    s = harness.program_shape(ROOT / "examples" / "bench" / "gcn3_weighted.mp")
    assert s.unsupported is None, s.unsupported
    assert (s.conv, s.aggr, s.layers, s.edge_weight, s.self_loops) == ("gcn", "sum", ["F", 32, 32, "C"], True, True)
    data = harness.prepare_dataset(TINY + ",weighted=1", None, tmp_path)
    assert harness.peer_spec(s, data, epochs=2, warmup=1, threads=1, sparse_features=False)["edge_weight"] is True
    assert "edge_weight" not in harness.peer_spec(harness.program_shape(GCN3), data, epochs=2, warmup=1, threads=1,
                                                  sparse_features=False)
    mixed = tmp_path / "mixed.mp"
    mixed.write_text((ROOT / "examples" / "bench" / "gcn3_weighted.mp").read_text().replace(
        "gnn.layer(32, C, dropout = 0.5, edge_weight = true);", "gnn.layer(32, C, dropout = 0.5);"))
    assert "some layers weigh their edges and some do not" in harness.program_shape(mixed).unsupported


def test_program_shape_of_a_gcn_written_out(tmp_path):
    """examples/gcn_weighted.mp writes GCN's weighted normalisation out: the peers build the same
    GCN layers as for the directives, from the program's own weights; an unweighted written-out
    GCN is GCN too, and row scales other than rsqrt(degree + 1) are not."""
    s = harness.program_shape(ROOT / "examples" / "gcn_weighted.mp")
    assert s.unsupported is None, s.unsupported
    assert (s.conv, s.aggr, s.layers, s.edge_weight, s.self_loops) == ("gcn", "sum", ["F", 16, "C"], True, True)
    assert s.dropouts == [0.5, 0.5] and s.bias
    assert s.parameter_names == [{"W": "W1", "b": "b1"}, {"W": "W2", "b": "b2"}]
    text = (ROOT / "examples" / "gcn_weighted.mp").read_text()
    plain = tmp_path / "gcn_written_out.mp"
    plain.write_text(text.replace("Sum(e in v.incoming_edges(): e.edge_weight)", "v.in_degree")
                     .replace(" * e.edge_weight", ""))
    s = harness.program_shape(plain)
    assert s.unsupported is None, s.unsupported
    assert (s.conv, s.edge_weight) == ("gcn", False)
    other = tmp_path / "other_scale.mp"
    other.write_text(text.replace("+ 1); }", "+ 2); }"))
    assert "not GCN's rsqrt(degree + 1)" in harness.program_shape(other).unsupported
    from tests.backend.written_out_programs import GCN_MESSAGE_PASSING
    message_passing = tmp_path / "gcn_message_passing.mp"
    message_passing.write_text(GCN_MESSAGE_PASSING)
    s = harness.program_shape(message_passing)
    assert s.unsupported is None, s.unsupported
    assert (s.conv, s.edge_weight, s.layers) == ("gcn", False, ["F", 16, "C"])
    mixed = tmp_path / "mixed_weights.mp"
    mixed.write_text(text.replace("Sum(e in v.incoming_edges(): e.src.z2 * e.edge_weight)",
                                  "Sum(e in v.incoming_edges(): e.src.z2)"))
    assert "do not weigh the edges alike" in harness.program_shape(mixed).unsupported


@pytest.mark.parametrize("program", ["bench/gcn3_weighted.mp", "gcn_weighted.mp"])
def test_parity_of_a_gcn_weighing_its_edges_with_both_peers(tmp_path, program):
    """The peers' weighted GCNs (GCNConv given the weights; GraphConv given PyG's coefficients)
    train as morphgen's for three epochs from the same weights: for the layer directives, and for
    the GCN written out (its dropout calls set to 0 for the parity run)."""
    out = tmp_path / "w"
    code = main(["bench", str(ROOT / "examples" / program), "--dataset", TINY + ",weighted=1",
                 "--peers", "pyg,dgl", "--epochs", "3", "--warmup", "1", "--threads", "1", "--out", str(out),
                 "--quick-machine", "--parity", "--no-profile", *PIN_TAU])
    data = json.loads((out / "bench.json").read_text())
    for peer in ("pyg", "dgl"):
        par = data["parity"]["peers"][peer]
        assert par["error"] is None and par["passed"] is True, par
    assert code == 0


def test_a_program_the_peers_cannot_build_is_named(tmp_path):
    prog = tmp_path / "gcn_tanh.mp"
    prog.write_text((ROOT / "examples" / "gcn.mp").read_text().replace("relu", "tanh"))
    s = harness.program_shape(prog)
    assert s.unsupported and "layer 0" in s.unsupported, s.unsupported


def test_program_shape_of_rgcn_and_its_basis_decomposition():
    s = harness.program_shape(ROOT / "examples" / "rgcn.mp")
    assert s.unsupported is None, s.unsupported
    assert (s.conv, s.aggr, s.layers, s.bias, s.num_bases, s.self_loops) == ("rgcn", "mean", ["F", 16, "C"], True,
                                                                             None, False)
    assert s.parameter_names == [{"W": "W1", "S": "S1", "b": "b1"}, {"W": "W2", "S": "S2", "b": "b2"}]
    s = harness.program_shape(ROOT / "examples" / "rgcn_bases.mp")
    assert s.unsupported is None, s.unsupported
    assert (s.conv, s.layers, s.num_bases) == ("rgcn", ["F", 16, "C"], 30)
    assert s.parameter_names[1] == {"A": "A2", "V": "V2", "S": "S2", "b": "b2"}


@pytest.mark.parametrize("edit,new,reason", [(" / e.rel_degree", "", "not divided by e.rel_degree"),
                                             ("e.src.x * W1", "e.dst.x * W1", "gather the dst end"),
                                             (" + v.x * S1", "", "are not R-GCN's")])
def test_an_rgcn_the_peers_cannot_build_is_named(tmp_path, edit, new, reason):
    """No 1/c_(i,r), messages from the destination, no self-loop weight: refused, never approximated."""
    prog = tmp_path / "rgcn_edit.mp"
    text = (ROOT / "examples" / "rgcn.mp").read_text()
    assert edit in text
    prog.write_text(text.replace(edit, new, 1))
    s = harness.program_shape(prog)
    assert s.unsupported and f"layer 0: " in s.unsupported and reason in s.unsupported, s.unsupported


def test_rgcn_initial_weights_reach_the_peers_under_their_names(tmp_path):
    s = harness.program_shape(ROOT / "examples" / "rgcn_bases.mp")
    data = harness.PreparedData(path=tmp_path / "d.npz", peer_path=tmp_path / "d.npz", name="d", num_nodes=5,
                                num_edges=9, num_features=5, num_classes=3, feature_sparsity=0.8, feature_nnz=5,
                                num_relations=4, featureless=True)
    spec = harness.peer_spec(s, data, epochs=1, warmup=0, threads=1, sparse_features=False, dropout=0.0,
                             init_weights=tmp_path / "w.npz")
    assert (spec["model"], spec["layers"], spec["num_relations"], spec["num_bases"]) == ("rgcn", [5, 16, 3], 4, 30)
    shapes = {"A1": (4, 30), "V1": (30, 5, 16), "S1": (5, 16), "b1": (16,),
              "A2": (4, 30), "V2": (30, 16, 3), "S2": (16, 3), "b2": (3,)}
    params = {k: np.arange(np.prod(v), dtype=np.float32) for k, v in shapes.items()}   # flat, as get_params
    from morphgen.bench.peers.spec import parse_spec
    harness.write_init_weights(params, parse_spec(spec), s.parameter_names)
    with np.load(tmp_path / "w.npz") as w:
        assert w["layer0.V"].shape == (30, 5, 16) and w["layer0.V"][1, 0, 0] == 5 * 16   # row-major
        assert np.array_equal(w["layer1.A"], params["A2"].reshape(4, 30)) and w["layer1.b"].shape == (3,)
    with pytest.raises(harness.BenchError, match="'V2' has"):
        harness.write_init_weights({**params, "V2": params["V2"][:-1]}, parse_spec(spec), s.parameter_names)


def test_peer_variants_time_both_pyg_rgcn_convolutions():
    rgcn = harness.program_shape(ROOT / "examples" / "rgcn.mp")
    assert [label for label, _ in harness.peer_variants("pyg", rgcn)] == ["RGCNConv", "FastRGCNConv"]
    assert harness.peer_variants("dgl", rgcn) == ((None, {}),)
    assert harness.peer_variants("pyg", harness.program_shape(GCN)) == ((None, {}),)


def test_without_dropout_rewrites_only_dropout(tmp_path):
    p = harness.without_dropout(GCN, tmp_path)
    text = p.read_text()
    assert "dropout = 0.0" in text and "0.5" not in text and "lr = 0.01" in text
    assert harness.program_shape(p).dropouts == [0.0, 0.0]
    written = harness.without_dropout(ROOT / "examples" / "gcn_weighted.mp", tmp_path).read_text()
    assert "dropout(v.x, 0.0)" in written and "dropout(v.h, 0.0)" in written and "0.5" not in written


def test_dropout_calls_lose_their_rate_only():
    from morphgen.bench.program_shape import _without_dropout_calls
    text = "dropout(relu(f(a, b)), 0.5) + dropout(v.x,0.25) + my_dropout(v.x, 0.5) + dropout(v.x, p) + dropout(v.x, 1e-1)"
    assert _without_dropout_calls(text) == ("dropout(relu(f(a, b)), 0.0) + dropout(v.x, 0.0) + my_dropout(v.x, 0.5) "
                                            "+ dropout(v.x, p) + dropout(v.x, 0.0)")


def test_bad_input_names_the_option(tmp_path, capsys):
    assert main(["bench", str(GCN), "--peers", "pyg,torch", "--out", str(tmp_path)]) == 2
    assert "--peers: unknown peer 'torch'" in capsys.readouterr().err
    assert main(["bench", str(tmp_path / "missing.mp"), "--out", str(tmp_path)]) == 2
    assert "missing.mp: no such file" in capsys.readouterr().err
    assert main(["bench", str(GCN), "--epochs", "3", "--warmup", "3", "--out", str(tmp_path)]) == 2
    assert "--warmup" in capsys.readouterr().err
    assert main(["bench", str(GCN), "--dataset", "synthetic:nodes=-5", "--peers", "none",
                 "--quick-machine", "--out", str(tmp_path)]) == 2
    assert "nodes" in capsys.readouterr().err
    assert main(["bench", str(GCN), "--rounds", "0", "--out", str(tmp_path)]) == 2
    assert "--rounds: must be >= 1, got 0" in capsys.readouterr().err


# ----------------------------------------------------------------------------- numbers
def test_fit_exponent_recovers_power_laws():
    xs = [2.0 ** k for k in range(18, 25)]
    assert sweep.fit_exponent(xs, [3e-9 * x for x in xs]) == pytest.approx(1.0)
    assert sweep.fit_exponent(xs, [1e-12 * x ** 1.5 for x in xs]) == pytest.approx(1.5)
    assert sweep.fit_exponent(xs[:1], [1.0]) is None


def test_sweep_points_double_edges_with_nodes_in_proportion():
    pts = sweep.sweep_points(18, 24)
    assert [e for e, _ in pts] == [2 ** k for k in range(18, 25)]
    assert all(n == e // sweep.SWEEP_DEGREE for e, n in pts)
    with pytest.raises(harness.BenchError, match="--sweep-min"):
        sweep.sweep_points(20, 18)


def test_crossover_interpolates_the_sign_change():
    s = [0.0, 0.5, 0.9, 0.99]
    c = sparsity_cli.crossover(s, [None, 1.5, 0.5, 0.1])          # ratio 1 halfway from 0.5 to 0.9
    assert c["kind"] == "interpolated" and c["sparsity"] == pytest.approx(0.7)
    assert sparsity_cli.crossover(s, [2.0, 1.5, 1.2, 1.1])["kind"] == "above_grid"
    assert sparsity_cli.crossover(s, [0.9, 0.5, 0.3, 0.1]) == {"sparsity": 0.0, "kind": "below_grid"}
    # noise below 1 at a low sparsity does not count: sparse must win from the crossover on
    c = sparsity_cli.crossover(s, [0.95, 1.2, 0.8, 0.1])
    assert c["kind"] == "interpolated" and 0.5 < c["sparsity"] < 0.9


def test_the_picked_path_is_timed_against_the_faster_one():
    def row(dense, sparse, auto):
        return {"dense": {"epoch_time_s": dense, "error": None}, "sparse": {"epoch_time_s": sparse, "error": None},
                "auto": auto}
    assert sparsity_cli.auto_ratio(row(0.02, 0.01, "sparse")) == 1.0
    assert sparsity_cli.auto_ratio(row(0.02, 0.01, "dense")) == pytest.approx(2.0)
    assert sparsity_cli.auto_ratio(row(0.02, None, "dense")) == 1.0       # sparsity 0: no sparse run
    assert sparsity_cli.auto_ratio(row(0.02, None, "sparse")) is None     # the pick was not timed
    summary = {"model": "m.mp", "command": "morphgen sweep-sparsity m.mp", "nodes": 10, "edges": 20, "classes": 2,
               "threads": 2, "epochs": 5, "warmup": 1, "calibration": {"rho": 0.4, "tau": 0.6},
               "runs": [dict(row(0.02, 0.01, "dense"), width=8, sparsity=0.9, ratio=0.5),
                        dict(row(0.02, 0.03, "dense"), width=8, sparsity=0.5, ratio=1.5)],
               "crossovers": {"8": {"sparsity": 0.7, "kind": "interpolated"}}}
    text = sparsity_cli.markdown(summary)
    assert "| 8 | 0.9 | 20.00 | 10.00 | 0.500 | dense | 2.000 |" in text
    assert "within 5% of the faster path at 1 of 2 points; at most 2.000x" in text


def test_ratios_and_kernel_limits():
    systems = [{"system": "morphgen", "epoch_time_s": 0.1, "peak_rss_bytes": 100, "error": None},
               {"system": "pyg", "epoch_time_s": 0.3, "peak_rss_bytes": 400, "error": None},
               {"system": "dgl", "epoch_time_s": None, "peak_rss_bytes": None, "error": "out of memory"}]
    report.add_ratios(systems)
    assert systems[1]["time_ratio_vs_morphgen"] == pytest.approx(3.0)
    assert systems[1]["memory_ratio_vs_morphgen"] == pytest.approx(4.0)
    assert systems[2]["time_ratio_vs_morphgen"] is None
    rows = report.kernel_limits([{"kernel": "spmm", "seconds": 1.0, "bytes": 5e9, "flops": 1e9, "calls": 3},
                                 {"kernel": "gemm", "seconds": 1.0, "bytes": 1e8, "flops": 50e9, "calls": 3}],
                                {"triad_gbs": 10.0, "sgemm_gflops": 100.0})
    by = {r["kernel"]: r for r in rows}
    assert by["spmm"]["bound"] == "memory" and by["spmm"]["fraction_of_limit"] == pytest.approx(0.5)
    assert by["gemm"]["bound"] == "compute" and by["gemm"]["fraction_of_limit"] == pytest.approx(0.5)


# ----------------------------------------------------------------------------- suite docs
def test_suite_refreshes_a_docs_file_only_when_named(tmp_path, monkeypatch):
    """A suite run writes its results under --out; a markdown file (the repository's
    docs/benchmarks.md under the working directory included) changes only when --docs names it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(suite_cli, "run_graph", lambda args, graph, where, model: {"error": "not run here"})
    before = f"# Benchmarks\n\n{suite_cli.BEGIN_MARK}\nold table\n{suite_cli.END_MARK}\n"
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "benchmarks.md").write_text(before)
    common = ["bench-suite", "--model", str(GCN), "--only", "cora", "--peers", "none", "--out", "out"]
    main(common)
    assert (tmp_path / "out" / "suite.md").is_file()
    assert (tmp_path / "docs" / "benchmarks.md").read_text() == before
    main(common + ["--docs", "docs/benchmarks.md"])
    assert "old table" not in (tmp_path / "docs" / "benchmarks.md").read_text()


def test_suite_markers_replace_only_between():
    text = f"# Benchmarks\n\nintro\n\n{suite_cli.BEGIN_MARK}\nold table\n{suite_cli.END_MARK}\n\nfooter\n"
    new = suite_cli.replace_between_markers(text, "new table")
    assert "old table" not in new and "new table" in new
    assert new.startswith("# Benchmarks\n\nintro\n\n") and new.endswith("\n\nfooter\n")
    appended = suite_cli.replace_between_markers("# B\n", "t")
    assert appended.endswith(f"{suite_cli.BEGIN_MARK}\nt\n{suite_cli.END_MARK}\n")
    with pytest.raises(harness.BenchError, match="in that order"):
        suite_cli.replace_between_markers(f"{suite_cli.END_MARK}\n{suite_cli.BEGIN_MARK}\n", "t")


def test_suite_shapes_match_the_paper():
    by = {g.name: g for g in suite_cli.SUITE}
    assert "nodes=89250,edges=899756,features=500" in by["flickr-like"].dataset
    assert "nodes=169343,edges=1166243,features=128" in by["arxiv-like"].dataset
    assert "nodes=65755,edges=251550,features=61278" in by["nell-like"].dataset
    assert "sparsity=0.992" in by["nell-like"].dataset
    assert "nodes=29120,edges=14326986" in by["reddit-1/8"].dataset
    with pytest.raises(harness.BenchError, match="unknown graph 'reddit'"):
        suite_cli.select("reddit")


def test_suite_relational_graphs_are_selected_apart():
    assert [g.name for g in suite_cli.select("aifb,mutag")] == ["aifb", "mutag"]
    assert suite_cli.select(None, relational=True) == list(suite_cli.RELATIONAL)
    assert not set(suite_cli.RELATIONAL) & set(suite_cli.select(None))      # not in the default suite
    assert suite_cli.all_relational([ROOT / "examples" / "rgcn.mp", ROOT / "examples" / "rgcn_bases.mp"])
    assert suite_cli.all_relational([ROOT / "examples" / "rgcn.mp", ROOT / "examples" / "hgt.mp"])
    assert not suite_cli.all_relational([ROOT / "examples" / "rgcn.mp", GCN])
    assert not suite_cli.all_relational([ROOT / "examples" / "rgat.mp"])         # no peer: not relational
    assert suite_cli.marks("openmp", True, relational=True) == suite_cli.RELATIONAL_MARKS
    assert suite_cli.marks("openmp", True) == suite_cli.MODELS_MARKS


def test_suite_tables_are_kept_per_kernel_isa():
    """An AVX-512 run and an AVX2 run refresh different sections and plots; the GPU suite and the
    single-model CPU suite are not keyed."""
    avx512 = suite_cli.marks("openmp", True, isa="avx512")
    assert avx512 == ("<!-- bench-suite-models-avx512:begin -->", "<!-- bench-suite-models-avx512:end -->")
    assert suite_cli.marks("openmp", True, relational=True, isa="avx2")[1] == "<!-- bench-suite-relational-avx2:end -->"
    assert suite_cli.marks("openmp", False, isa="avx512") == (suite_cli.BEGIN_MARK, suite_cli.END_MARK)
    assert suite_cli.marks("cuda", True, isa="avx512") == suite_cli.GPU_MARKS
    assert suite_cli.marks("openmp", True, isa="unknown (no compiler)") == suite_cli.MODELS_MARKS
    plots = suite_cli.for_isa(suite_cli.MODELS_PLOTS, "avx2")
    assert [p[-1] for p in plots] == ["suite_models_avx2_epoch_time.png", "suite_models_avx2_peak_memory.png"]
    assert [p[:-1] for p in plots] == [p[:-1] for p in suite_cli.MODELS_PLOTS]
    docs = "# B\n\n<!-- bench-suite-models-avx2:begin -->\navx2 table\n<!-- bench-suite-models-avx2:end -->\n"
    both = suite_cli.replace_between_markers(docs, "avx512 table", avx512)
    assert "avx2 table" in both and "avx512 table" in both


def test_a_suite_row_without_a_modelled_minimum_or_a_peer_figure_says_why():
    """HGT has no analytic minimum; PyG ran out of memory; DGL cannot build the model: the row
    shows "–", the cap and "not comparable", and the reason is listed once under the table."""
    graph = suite_cli.RELATIONAL[0]
    why = "DGL's HGTConv is another model"
    report = {"suite_model": "hgt", "analytic_minimum_bytes": None,
              "dataset": {"nodes": 5, "edges": 9, "edge_types": 3, "features": 5, "featureless": True,
                          "feature_sparsity": 0.8},
              "systems": [{"system": "morphgen", "error": None, "epoch_time_s": 0.002, "peak_rss_bytes": 2**20},
                          {"system": "pyg", "error": "out of memory (cap 17.7 GiB): out of memory: [enforce fail"},
                          {"system": "dgl", "error": f"not comparable: {why}"}]}
    rows = [(graph, report), (graph, {**report, "suite_model": "hgt2"})]
    line = suite_cli.suite_table(rows, ("pyg", "dgl"))[2]
    assert "| 2.0 | out of memory (cap 17.7 GiB) | not comparable | – | – | 1 | – | – | – | – |" in line, line
    assert suite_cli.not_comparable_lines(rows)[2] == f"- dgl on hgt, hgt2: {why}"


# ----------------------------------------------------------------------------- edge layouts
def test_edge_layouts_table_names_the_pick_and_its_distance_to_the_best_fixed_layout():
    from morphgen.bench import layouts_cli
    row = {"model": "examples/rgat.mp", "graph": "typed-10", "shape_of": "", "loss_spread": 0.0,
           "pairs": {"src": 30, "dst": 60, "edges": 100}, "errors": {}, "picked": "compact, edge",
           "times": {"gathered": 0.4, "edge": 0.2, "compact": 0.1, "auto": 0.11},
           "peak_rss_bytes": {"gathered": 300 * 2**20, "auto": 200 * 2**20}}
    text = layouts_cli.markdown([row], "morphgen bench-edge-layouts", 2, "a CPU", rounds=2)
    assert "| typed-10 | rgat | 100 | 30% / 60% | 400.0 | 200.0 | 100.0 | 110.0 | compact, edge | 1.10 (compact) " \
           "| 300 / 200 | 0.0e+00 |" in text
    assert layouts_cli.best_fixed({"gathered": None, "edge": 0.3, "compact": 0.2, "auto": 0.1}) == ("compact", 0.2)
    assert layouts_cli.best_fixed({"gathered": None, "auto": 0.1}) == (None, None)
    assert "the fastest of 2 interleaved runs" in text


def test_edge_layouts_smoke(tmp_path, monkeypatch):
    """Four runs of R-GAT on a small typed graph: every layout trains, the losses agree."""
    from morphgen.bench import layouts_cli
    monkeypatch.setenv("MORPHGEN_OPT_LEVEL", "0")      # numbers and plumbing, not speed: builds 5x faster
    monkeypatch.setattr(layouts_cli, "GRAPHS", layouts_cli.GRAPHS + (layouts_cli.LayoutGraph(
        "tiny-typed", "synthetic:nodes=240,edges=1600,features=12,classes=3,val=40,test=80,etypes=4,seed=1", ""),))
    docs = tmp_path / "benchmarks.md"
    docs.write_text(f"# B\n\n{layouts_cli.MARKS[0]}\nold\n{layouts_cli.MARKS[1]}\n")
    code = main(["bench-edge-layouts", "--model", str(ROOT / "examples" / "rgat.mp"), "--only", "tiny-typed",
                 "--epochs", "3", "--warmup", "1", "--threads", "1", "--out", str(tmp_path / "out"),
                 "--docs", str(docs)])
    assert code == 0
    [row] = json.loads((tmp_path / "out" / "edge_layouts.json").read_text())
    assert all(row["times"][k] > 0 for k in layouts_cli.LAYOUTS) and not row["errors"]
    assert row["loss_spread"] <= layouts_cli.LOSS_TOLERANCE
    assert "| tiny-typed | rgat |" in docs.read_text() and "old" not in docs.read_text()


def test_edge_layouts_refuses_an_unknown_graph(tmp_path):
    code = main(["bench-edge-layouts", "--only", "nope", "--out", str(tmp_path)])
    assert code != 0


def test_the_faster_run_of_a_system_or_layout_is_kept_and_any_failure():
    from morphgen.bench.harness import faster_run as _faster
    fast, slow, failed = {"epoch_time_s": 0.1}, {"epoch_time_s": 0.2}, {"epoch_time_s": None, "error": "x"}
    assert _faster(None, slow) is slow and _faster(slow, fast) is fast and _faster(fast, slow) is fast
    assert _faster(fast, failed) is failed and _faster(failed, fast) is failed


def test_bench_commands_leave_docs_alone_unless_named_and_refuse_a_file_as_out(tmp_path, monkeypatch):
    from morphgen.bench import cli as bench_cli
    from morphgen.cli import build_parser
    parser = build_parser()
    assert parser.parse_args(["bench-edge-layouts"]).docs is None
    assert parser.parse_args(["bench-suite"]).docs is None
    monkeypatch.setenv("MORPHGEN_DATA", str(tmp_path))
    args = parser.parse_args(["bench", "examples/gcn.mp", "--out", str(tmp_path / "out")])
    bench_cli.check_common(args)
    assert args.data_dir == str(tmp_path)            # $MORPHGEN_DATA, as train looks names up
    (tmp_path / "afile").write_text("mine")
    args = parser.parse_args(["bench", "examples/gcn.mp", "--out", str(tmp_path / "afile")])
    with pytest.raises(UserError, match="exists and is not a folder"):
        bench_cli.check_common(args)


@pytest.mark.parametrize("command", [["bench", "examples/gcn.mp"], ["bench-suite"], ["bench-edge-layouts"],
                                     ["sweep-sparsity", "examples/gcn.mp"]])
def test_bench_out_replaces_only_an_earlier_bench_output(tmp_path, command):
    """--out may be new, empty, or an earlier bench command's folder; files of the user's own
    under the names the commands write are never replaced."""
    import json
    from morphgen.bench import cli as bench_cli
    from morphgen.cli import build_parser
    parser = build_parser()
    out = tmp_path / "results"
    out.mkdir()
    (out / "notes.txt").write_text("mine")                   # a name no bench command writes
    bench_cli.check_common(parser.parse_args([*command, "--out", str(out)]))
    (out / "bench.md").write_text("my own notes")
    with pytest.raises(UserError, match="holds bench.md, which morphgen did not write"):
        bench_cli.check_common(parser.parse_args([*command, "--out", str(out)]))
    (out / "suite.json").write_text(json.dumps({"graphs": [], "geometric_mean_ratios": {}}))
    bench_cli.check_common(parser.parse_args([*command, "--out", str(out)]))   # an earlier suite's folder


def test_bench_warmup_default_leaves_an_epoch_to_time(tmp_path):
    from morphgen.bench import cli as bench_cli
    from morphgen.cli import build_parser
    parser = build_parser()
    args = parser.parse_args(["bench", "examples/gcn.mp", "--epochs", "2", "--out", str(tmp_path / "o")])
    bench_cli.check_args(args)
    assert args.warmup == 1
    args = parser.parse_args(["bench", "examples/gcn.mp", "--out", str(tmp_path / "o")])
    bench_cli.check_args(args)
    assert args.warmup == 3
    args = parser.parse_args(["bench", "examples/gcn.mp", "--epochs", "2", "--warmup", "2", "--out", str(tmp_path / "o")])
    with pytest.raises(UserError, match=re.escape("--warmup: must lie in [0, epochs) = [0, 2), got 2")):
        bench_cli.check_args(args)

"""The peers of the models the examples write out: APPNP, SGC, GCNII and EdgeConv.

program_shape recognises the first three from the compiler's folded form of GCN's normalisation
(propagation_shape.py), EdgeConv from its messages (edgeconv_shape.py); PyG's APPNP / SGConv /
GCN2Conv / EdgeConv and DGL's APPNPConv / SGConv / GCN2Conv / EdgeConv then train them from
morphgen's initial weights and must give morphgen's losses, epoch after epoch (the parity check
of `morphgen bench --parity`).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from morphgen.bench import harness
from morphgen.bench.peers.spec import SpecError, parse_spec
from morphgen.cli import main

ROOT = Path(__file__).resolve().parents[2]
APPNP = ROOT / "examples" / "appnp.mp"
SGC = ROOT / "examples" / "sgc.mp"
GCNII = ROOT / "examples" / "gcnii.mp"
EDGECONV = ROOT / "examples" / "edgeconv.mp"
TINY = "synthetic:nodes=240,edges=1600,features=12,classes=3,val=40,test=80,seed=1"


def test_program_shape_of_appnp():
    s = harness.program_shape(APPNP)
    assert s.unsupported is None, s.unsupported
    assert (s.conv, s.layers, s.hops, s.teleport, s.dropouts, s.bias) == ("appnp", ["F", 64, "C"], 10, 0.1,
                                                                          [0.5, 0.5], True)
    assert s.parameter_names == [{"W": "W1", "b": "b1"}, {"W": "W2", "b": "b2"}]
    assert s.feature_normalization == "row"


def test_program_shape_of_sgc():
    s = harness.program_shape(SGC)
    assert s.unsupported is None, s.unsupported
    assert (s.conv, s.layers, s.hops, s.dropouts, s.lr) == ("sgc", ["F", "C"], 2, [0.0], 0.2)
    assert s.parameter_names == [{"W": "W", "b": "b"}]


def test_program_shape_of_gcnii():
    s = harness.program_shape(GCNII)
    assert s.unsupported is None, s.unsupported
    assert (s.conv, s.layers, s.teleport, s.theta, s.dropouts) == ("gcnii", ["F"] + [64] * 5 + ["C"], 0.1, 0.5,
                                                                   [0.6] * 6)
    assert s.parameter_names == [{"W": "Win", "b": "bin"}, {"W": "W1"}, {"W": "W2"}, {"W": "W3"}, {"W": "W4"},
                                 {"W": "Wout", "b": "bout"}]


def test_program_shape_of_edgeconv():
    s = harness.program_shape(EDGECONV)
    assert s.unsupported is None, s.unsupported
    assert (s.conv, s.aggr, s.layers, s.dropouts, s.self_loops) == ("edgeconv", "max", ["F", 64, "C"], [0.5, 0.5],
                                                                    False)
    assert s.parameter_names == [{"W": ("Wi", "Wd"), "b": "b"}, {"W": "Wout", "b": "bout"}]


def test_edgeconv_s_two_matrices_reach_the_peers_stacked(tmp_path):
    """PyG's EdgeConv multiplies [x_v, x_u - x_v] by one matrix: Wi's rows, then Wd's."""
    spec = parse_spec({"model": "edgeconv", "layers": [2, 3, 2], "epochs": 2, "warmup": 0,
                       "init_weights": str(tmp_path / "w.npz")})
    params = {"Wi": np.arange(6, dtype=np.float32), "Wd": -np.arange(6, dtype=np.float32),
              "b": np.ones(3, np.float32), "Wout": np.zeros(6, np.float32), "bout": np.zeros(2, np.float32)}
    harness.write_init_weights(params, spec, [{"W": ("Wi", "Wd"), "b": "b"}, {"W": "Wout", "b": "bout"}])
    w = np.load(tmp_path / "w.npz")["layer0.W"]
    assert w.shape == (4, 3)
    assert np.array_equal(w[:2].ravel(), params["Wi"]) and np.array_equal(w[2:].ravel(), params["Wd"])
    with pytest.raises(harness.BenchError, match="no parameter 'Wd'"):
        harness.write_init_weights({k: v for k, v in params.items() if k != "Wd"}, spec,
                                   [{"W": ("Wi", "Wd"), "b": "b"}, {"W": "Wout", "b": "bout"}])


def test_the_peers_spec_carries_the_steps_and_the_teleport(tmp_path):
    data = harness.prepare_dataset(TINY, None, tmp_path)
    appnp = harness.peer_spec(harness.program_shape(APPNP), data, epochs=3, warmup=1, threads=1,
                              sparse_features=False)
    assert (appnp["model"], appnp["hops"], appnp["teleport"], appnp["layers"]) == ("appnp", 10, 0.1, [12, 64, 3])
    sgc = harness.peer_spec(harness.program_shape(SGC), data, epochs=3, warmup=1, threads=1, sparse_features=False)
    assert (sgc["model"], sgc["hops"], "teleport" in sgc) == ("sgc", 2, False)
    assert parse_spec(appnp).teleport == 0.1 and parse_spec(sgc).hops == 2
    gcnii = parse_spec(harness.peer_spec(harness.program_shape(GCNII), data, epochs=3, warmup=1, threads=1,
                                         sparse_features=False))
    assert (gcnii.teleport, gcnii.theta, gcnii.parameters(0), gcnii.parameters(1), gcnii.parameters(5)) == (
        0.1, 0.5, {"W": (12, 64), "b": (64,)}, {"W": (64, 64)}, {"W": (64, 3), "b": (3,)})


@pytest.mark.parametrize("program,edit,new,reason", [
    (APPNP, "* v.norm * 0.9 + v.h0 * 0.1", "* v.norm * 0.8 + v.h0 * 0.1", "not 1 - alpha"),
    (APPNP, "rsqrt(v.in_degree + 1)", "rsqrt(v.in_degree + 2)", "not GCN's rsqrt(in_degree + 1)"),
    (APPNP, " + v.h * v.norm) * v.norm * 0.9", ") * v.norm * 0.9", "self_loops"),
    (APPNP, "v.h = v.h0;", "v.h = v.hidden * W2;", "not APPNP's"),
    (GCNII, "gcniiLayer(g, h, h0, norm, W3, 0.1541507)", "gcniiLayer(g, h, h0, norm, W3, 0.154)",
     "not log(theta / l + 1) for one theta"),
    (GCNII, "v.p * (1 - beta) + v.p * W * beta", "v.h0 * (1 - beta) + v.p * W * beta", "not GCNII's form"),
    (GCNII, "v.out = dropout(v.h, 0.6) * Wout", "v.out = dropout(v.h, 0.5) * Wout", "the peers use one rate"),
    (EDGECONV, "(e.src.xd - e.dst.xd) * Wd", "(e.dst.xd - e.src.xd) * Wd", "not EdgeConv's form"),
    (EDGECONV, "e.dst.xd * Wi", "e.src.xd * Wi", "not EdgeConv's form"),
    (SGC, "v.out = v.twice * W + b", "v.out = dropout(v.twice, 0.5) * W + b", "SGConv has none"),
    (SGC, "(Sum(u in g.neighbors(v): u.once * u.norm) + v.once * v.norm) * v.norm",
     "Sum(u in g.neighbors(v): u.once * u.norm) * v.norm", "self_loops"),
])
def test_a_written_out_model_the_peers_cannot_build_is_named(tmp_path, program, edit, new, reason):
    """Another teleport share, another degree scale, no self loop, a teleport from elsewhere,
    betas of no one theta, a product of the wrong rows, dropout rates or dropout the peers do
    not have, EdgeConv's difference the other way round or its node term from the source: refused
    with the reason, never approximated."""
    text = program.read_text()
    assert edit in text
    edited = tmp_path / program.name
    edited.write_text(text.replace(edit, new, 1))
    s = harness.program_shape(edited)
    assert s.unsupported and reason in s.unsupported, s.unsupported


@pytest.mark.parametrize("over,field", [({"model": "appnp"}, "hops"), ({"model": "appnp", "hops": 2}, "teleport"),
                                        ({"model": "appnp", "hops": 0, "teleport": 0.1}, "hops"),
                                        ({"model": "appnp", "hops": 2, "teleport": 1.5}, "teleport"),
                                        ({"model": "sgc", "hops": 2, "teleport": 0.1, "layers": [4, 3]}, "teleport"),
                                        ({"model": "sgc", "hops": 2}, "layers"),
                                        ({"model": "gcn", "hops": 2}, "hops"),
                                        ({"model": "gcnii", "teleport": 0.1, "layers": [4, 8, 8, 3]}, "theta"),
                                        ({"model": "gcnii", "teleport": 0.1, "theta": 0.5}, "layers"),
                                        ({"model": "gcnii", "teleport": 0.1, "theta": 0.5,
                                          "layers": [4, 8, 6, 3]}, "layers"),
                                        ({"model": "appnp", "hops": 2, "teleport": 0.1, "theta": 0.5}, "theta"),
                                        ({"model": "edgeconv", "layers": [4, 8, 8, 3]}, "layers"),
                                        ({"model": "edgeconv", "aggr": "sum"}, "aggr")])
def test_bad_written_out_model_spec_names_the_field(over, field):
    spec = {"layers": [4, 8, 3], "epochs": 4, **over}
    with pytest.raises(SpecError, match=f"'{field}'"):
        parse_spec(spec)


def test_bench_of_appnp_checks_parity_with_both_peers(tmp_path):
    """`morphgen bench --parity` end to end: PyG's APPNP and DGL's APPNPConv train as morphgen's
    APPNP for three epochs from the same weights (the program's dropout calls set to 0)."""
    out = tmp_path / "b"
    code = main(["bench", str(APPNP), "--dataset", TINY, "--peers", "pyg,dgl", "--epochs", "3",
                 "--warmup", "1", "--threads", "1", "--out", str(out), "--quick-machine", "--parity",
                 "--no-profile", "--sparsity-threshold", "0.5"])
    data = json.loads((out / "bench.json").read_text())
    for peer in ("pyg", "dgl"):
        par = data["parity"]["peers"][peer]
        assert par["error"] is None and par["passed"] is True, par
        assert data["systems"][[s["system"] for s in data["systems"]].index(peer)]["error"] is None
    assert code == 0


@pytest.mark.parametrize("program", [SGC, GCNII, EDGECONV])
def test_parity_of_the_written_out_models_with_both_peers(tmp_path, program):
    """PyG's and DGL's SGC, GCNII and EdgeConv train as morphgen's for three epochs from the same
    weights (the parity check alone; the bench's timed runs are the test above's)."""
    shape = harness.program_shape(program)
    data = harness.prepare_dataset(TINY, None, tmp_path, keep=True, feature_normalization=shape.feature_normalization)
    report = harness.parity_check(program, shape, data, ["pyg", "dgl"], tmp_path, threads=1, seed=0,
                                  sparse_features=False, cap_gib=None, timeout_s=600, sparsity_threshold=0.5)
    for peer in ("pyg", "dgl"):
        par = report["peers"][peer]
        assert par["error"] is None and par["passed"] is True, par

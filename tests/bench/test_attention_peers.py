"""The relational attention peers: recognising HGT and R-GAT programs, their specs, and PyG's
HGTConv and RGATConv computing the same models.

The parity tests train examples/hgt.mp and examples/bench/rgat_pyg.mp with morphgen and with PyG
from the same weights, on a small heterogeneous graph that has every case the peers translate:
node types with features of their own (dense and sparse), a node type without (a learned row per
node), and an edge type that joins two node-type pairs (two PyG relations for HGTConv). The
weights are scaled up so the loss lies far from log(classes), where a wrong mapping could not hide.
Both whole models match (examples/hgt.mp declares HGTConv's block-diagonal relation matrices), so
their parity covers three epochs: the gradients and Adam's steps too. An HGT with full relation
matrices, of which HGTConv keeps the diagonal blocks, matches for its first epoch alone.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from morphgen.bench import harness
from morphgen.bench.peers.launcher import run_peer
from morphgen.bench.peers.spec import SpecError, parse_spec

ROOT = Path(__file__).resolve().parents[2]
HGT = ROOT / "examples" / "hgt.mp"
RGAT = ROOT / "examples" / "bench" / "rgat_pyg.mp"


# ----------------------------------------------------------------------------- the program
def test_program_shape_of_hgt():
    s = harness.program_shape(HGT)
    assert s.unsupported is None, s.unsupported
    assert (s.conv, s.layers, s.heads, s.self_loops) == ("hgt", ["F", 64, 64, "C"], [1, 2, 1], False)
    assert s.parameter_names[0] == {"W": "Win", "b": "bin"} and s.parameter_names[2] == {"W": "Wout", "b": "bout"}
    assert s.parameter_names[1]["Watt"] == "Watt" and s.parameter_names[1]["skip"] == "skip"
    assert s.block_diagonal == {} and not any("block diagonal" in n for n in s.notes)
    assert "gelu" in s.peer_unsupported["dgl"] and "pyg" not in s.peer_unsupported


def full_relations(tmp_path) -> Path:
    """examples/hgt.mp with full 64 x 64 relation matrices instead of HGTConv's 2 blocks."""
    text = HGT.read_text()
    for name in ("Watt", "Wmsg"):
        old = f"weight<float[g.etypes][2][32][32]> {name}"
        assert old in text
        text = text.replace(old, f"weight<float[g.etypes][64][64]> {name}")
    prog = tmp_path / "hgt_full.mp"
    prog.write_text(text)
    return prog


def test_an_hgt_with_full_relation_matrices_starts_them_block_diagonal(tmp_path):
    s = harness.program_shape(full_relations(tmp_path))
    assert s.unsupported is None, s.unsupported
    assert s.block_diagonal == {"Watt": 2, "Wmsg": 2} and "block diagonal" in s.notes[0]
    assert harness.parity_epochs(s) == 1


def test_an_hgt_with_one_block_diagonal_relation_matrix_is_refused(tmp_path):
    text = HGT.read_text().replace("weight<float[g.etypes][2][32][32]> Wmsg", "weight<float[g.etypes][64][64]> Wmsg")
    prog = tmp_path / "hgt_mixed.mp"
    prog.write_text(text)
    s = harness.program_shape(prog)
    assert s.unsupported and "one relation weight is block diagonal" in s.unsupported, s.unsupported


@pytest.mark.parametrize("edit,new,reason", [
    ("gelu(v.agg)", "relu(v.agg)", "expected gelu, found relu"),
    ("* 0.1767767", "* 0.125", "scaled by 0.125"),
    ("(1 - v.gate) * v.h", "(1 - v.gate) * v.k", "'h' value"),
    ("* mu[e.etype] ", "", "expected mul"),
])
def test_an_hgt_the_peers_cannot_build_is_named(tmp_path, edit, new, reason):
    """Not PyG's HGTConv (no gelu, another scale, the skip from another value, no prior): refused."""
    text = HGT.read_text()
    assert edit in text
    prog = tmp_path / "hgt_edit.mp"
    prog.write_text(text.replace(edit, new, 1))
    s = harness.program_shape(prog)
    assert s.unsupported and reason in s.unsupported, s.unsupported


def test_an_hgt_with_narrower_values_is_refused(tmp_path):
    """Values 32 wide (V: 64 x 32, Wmsg: 32 x 64): the dataflow is HGT's, but HGTConv's matrices
    are all as wide as its input, so the peer would train another model."""
    text = HGT.read_text()
    for old, new in (("float[g.ntypes][64][64]> V", "float[g.ntypes][64][32]> V"),
                     ("float[g.ntypes][64]> bV", "float[g.ntypes][32]> bV"),
                     ("float[g.etypes][2][32][32]> Wmsg", "float[g.etypes][32][64]> Wmsg"),
                     ("propNode<float[64]> val", "propNode<float[32]> val")):
        assert old in text
        text = text.replace(old, new)
    prog = tmp_path / "hgt_narrow.mp"
    prog.write_text(text)
    s = harness.program_shape(prog)
    assert s.unsupported == "V is not a full 64 x 64 matrix per type, as HGTConv's are", s.unsupported


def test_program_shape_of_rgat():
    s = harness.program_shape(RGAT)
    assert s.unsupported is None, s.unsupported
    assert (s.conv, s.layers, s.heads, s.activation, s.negative_slope) == ("rgat", ["F", 16, "C"], [2, 1], "elu", 0.2)
    assert s.parameter_names == [{"W": "W1", "Q": "Q1", "K": "K1", "b": "b1"}, {"W": "W2", "Q": "Q2", "K": "K2", "b": "b2"}]
    assert "no relational graph attention" in s.peer_unsupported["dgl"]


@pytest.mark.parametrize("program,edit,new,reason", [
    (RGAT, "scale_heads(e.m2, e.alpha2)) + b2;", "scale_heads(e.m2, e.alpha2));", "expected bias_add"),
    (RGAT, "e.dst.x * W1[e.etype] * Q1", "e.src.x * W1[e.etype] * Q1", "end = 'src', expected 'dst'"),
    (RGAT, "leaky_relu(e.dst.h * W2[e.etype] * Q2 + e.m2 * K2, 0.2)",
     "leaky_relu(e.dst.h * W2[e.etype] * Q2 + e.m2 * K2, 0.1)", "slopes differ"),
    (ROOT / "examples" / "rgat.mp", None, None, "not a stack of RGATConv layers"),
])
def test_an_rgat_the_peers_cannot_build_is_named(tmp_path, program, edit, new, reason):
    """No bias, the query read at the source, two slopes, Busbridge's per-relation attention vectors
    and a self term (examples/rgat.mp): refused, never approximated."""
    if edit is not None:
        text = program.read_text()
        assert edit in text
        program = tmp_path / "rgat_edit.mp"
        program.write_text(text.replace(edit, new, 1))
    s = harness.program_shape(program)
    assert s.unsupported and reason in s.unsupported, s.unsupported


def _hgt_spec(**over) -> dict:
    spec = {"model": "hgt", "layers": [7, 8, 8, 3], "heads": [1, 2, 1], "num_relations": 4, "num_node_types": 3,
            "dropout": 0.0, "epochs": 1, "warmup": 0}
    spec.update(over)
    return spec


def test_hgt_parameters_are_named_and_shaped():
    spec = parse_spec(_hgt_spec())
    assert spec.parameters(0) == {"W": (7, 8), "b": (3, 8)}
    conv = spec.parameters(1)
    assert conv["K"] == (3, 8, 8) and conv["bA"] == (3, 8) and conv["Watt"] == (4, 8, 4)   # 2 heads' 4 x 4 blocks
    assert conv["mu"] == (4, 2) and conv["skip"] == (3, 1)
    assert spec.parameters(2) == {"W": (8, 3), "b": (3,)}


@pytest.mark.parametrize("over,field", [({"num_node_types": None}, "num_node_types"),
                                        ({"layers": [7, 8, 4, 3]}, "layers"),
                                        ({"heads": [2, 2, 1]}, "heads"),
                                        ({"num_relations": None}, "num_relations")])
def test_bad_hgt_spec_names_the_field(over, field):
    with pytest.raises(SpecError, match=f"'{field}'"):
        parse_spec(_hgt_spec(**over))


def test_node_types_belong_to_hgt_only():
    with pytest.raises(SpecError, match="'num_node_types'.*hgt"):
        parse_spec({"model": "gcn", "layers": [4, 2], "num_node_types": 2})


def test_rgat_parameters_are_named_and_shaped():
    spec = parse_spec({"model": "rgat", "layers": [7, 16, 3], "heads": [2, 1], "num_relations": 4})
    assert spec.parameters(0) == {"W": (4, 7, 16), "Q": (16, 2), "K": (16, 2), "b": (16,)}
    assert spec.parameters(1) == {"W": (4, 16, 3), "Q": (3, 1), "K": (3, 1), "b": (3,)}
    with pytest.raises(SpecError, match="'num_relations'"):
        parse_spec({"model": "rgat", "layers": [7, 16, 3], "heads": [2, 1]})


def test_zero_off_diagonal_blocks():
    m = np.arange(2 * 4 * 4, dtype=np.float32).reshape(2, 4, 4) + 1
    z = harness.zero_off_diagonal_blocks(m, 2)
    assert np.array_equal(z[:, :2, :2], m[:, :2, :2]) and np.array_equal(z[:, 2:, 2:], m[:, 2:, 2:])
    assert not z[:, :2, 2:].any() and not z[:, 2:, :2].any()


# ----------------------------------------------------------------------------- parity with PyG
def _typed_graph(path: Path) -> Path:
    """3 node types: "a" with dense features, "b" with sparse ones, "c" with none; edge type 3
    joins (a, c) and (b, c)."""
    rng = np.random.default_rng(3)
    counts = {"a": 12, "b": 9, "c": 7}
    ntype = np.repeat(np.arange(3), list(counts.values()))
    rng.shuffle(ntype)
    of = {t: np.flatnonzero(ntype == t) for t in range(3)}
    src, dst, etype = [], [], []
    for r, (s, d) in enumerate([(0, 1), (1, 0), (2, 0), (0, 2), (1, 2)]):
        for _ in range(14):
            src.append(rng.choice(of[s])), dst.append(rng.choice(of[d])), etype.append(min(r, 3))
    xb = rng.standard_normal((counts["b"], 4)).astype(np.float32)
    xb[rng.random(xb.shape) < 0.6] = 0
    rows, cols = np.nonzero(xb)
    n = ntype.size
    y = rng.integers(0, 3, n)
    train = np.zeros(n, bool); train[of[0][:8]] = True; train[of[1][:5]] = True
    test = np.zeros(n, bool); test[of[0][8:]] = True
    meta = json.dumps({"node_type_names": ["a", "b", "c"]})
    np.savez(path, num_nodes=n, node_type=ntype, num_node_types=3, edge_index=np.array([src, dst]),
             edge_type=np.array(etype), num_edge_types=4, y=y, train_mask=train, val_mask=np.zeros(n, bool),
             test_mask=test, meta=np.array(meta),
             x_a=rng.standard_normal((counts["a"], 5)).astype(np.float32),
             x_b_indptr=np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=counts["b"]))]),
             x_b_indices=cols, x_b_data=xb[rows, cols], x_b_shape=np.array(xb.shape))
    return path


def _parity_case(work: Path, program: Path, epochs: int) -> dict:
    """morphgen's first `epochs` losses of `program` from scaled weights, and the peers' spec."""
    from morphgen.api import CompiledModel
    data = harness.prepare_dataset(str(_typed_graph(work / "typed.npz")), None, work, keep=True)
    shape = harness.program_shape(program)
    # Built at -O0 (toolchain.optimisation_flags): numbers, not speed, and the build is 5x faster.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MORPHGEN_OPT_LEVEL", "0")
        model = CompiledModel(program, threads=1, seed=5).bind(data.dataset)
    params = {k: np.array(v, np.float32) * 3 for k, v in model.get_params().items()}
    for name, heads in shape.block_diagonal.items():
        params[name] = harness.zero_off_diagonal_blocks(params[name].reshape(-1, 64, 64), heads).reshape(-1)
    model.set_params(params)
    losses = [float(model.session.train_epoch()) for _ in range(epochs)]
    spec = harness.peer_spec(shape, data, epochs=epochs, warmup=0, threads=1, sparse_features=False, dropout=0.0,
                             init_weights=work / "w.npz")
    harness.write_init_weights(params, parse_spec(spec), shape.parameter_names, shape.block_diagonal)
    return {"losses": losses, "spec": spec, "data": data, "work": work}


@pytest.fixture(scope="module")
def hgt_parity(tmp_path_factory):
    return _parity_case(tmp_path_factory.mktemp("hgt"), HGT, 3)


@pytest.fixture(scope="module")
def hgt_full_parity(tmp_path_factory):
    work = tmp_path_factory.mktemp("hgt_full")
    return _parity_case(work, full_relations(work), 1)


@pytest.fixture(scope="module")
def rgat_parity(tmp_path_factory):
    return _parity_case(tmp_path_factory.mktemp("rgat"), RGAT, 3)


def test_the_parity_graph_is_typed_as_described(hgt_parity):
    data = hgt_parity["data"]
    assert (data.num_node_types, data.num_relations, data.num_classes) == (3, 4, 3)
    assert abs(hgt_parity["losses"][0] - math.log(3)) > 0.2, "the loss must lie far from log(classes)"


@pytest.mark.parametrize("sparse", [False, True])
def test_pyg_hgt_trains_as_morphgen_for_three_epochs(hgt_parity, sparse):
    spec = {**hgt_parity["spec"], "sparse_features": sparse}
    r = run_peer("pyg", hgt_parity["data"].peer_path, spec, out=hgt_parity["work"] / f"pyg_{sparse}.json",
                 timeout_s=300)
    assert r["error"] is None, r["error"]
    first, *_, last = hgt_parity["losses"]
    assert abs(last - first) > 0.05                                          # it moved
    assert r["first_epoch_loss"] == pytest.approx(first, abs=1e-4)
    assert r["final_loss"] == pytest.approx(last, abs=1e-4)
    assert "5 relations" in r["config"]["conv"] and "2 node type(s) read their own columns" in r["config"]["features"]


def test_pyg_hgt_matches_full_relation_matrices_started_block_diagonal(hgt_full_parity):
    r = run_peer("pyg", hgt_full_parity["data"].peer_path, hgt_full_parity["spec"],
                 out=hgt_full_parity["work"] / "pyg.json", timeout_s=300)
    assert r["error"] is None, r["error"]
    assert r["first_epoch_loss"] == pytest.approx(hgt_full_parity["losses"][0], abs=1e-4)


def test_pyg_rgat_trains_as_morphgen_for_three_epochs(rgat_parity):
    r = run_peer("pyg", rgat_parity["data"].peer_path, rgat_parity["spec"], out=rgat_parity["work"] / "pyg.json",
                 timeout_s=300)
    assert r["error"] is None, r["error"]
    first, *_, last = rgat_parity["losses"]
    assert abs(first - math.log(3)) > 0.2 and abs(last - first) > 0.05      # far from chance, and it moved
    assert r["first_epoch_loss"] == pytest.approx(first, abs=1e-4)
    assert r["final_loss"] == pytest.approx(last, abs=1e-4)
    assert r["config"]["conv"].startswith("RGATConv(heads=[2, 1]")


def test_block_diagonal_weights_outside_hgt_are_not_given_to_the_peers(tmp_path):
    """Only HGTConv's relation matrices are block diagonal among the peers' layers: an R-GCN-like
    program with a blocked relation weight is refused by name, never run on full matrices."""
    prog = tmp_path / "blocked_rgcn.mp"
    prog.write_text("""function m(Graph g, propNode<float[F]> x, propNode<int[C]> y) {
    weight<float[F][8]> W0 = glorot;
    weight<float[g.etypes][2][4][4]> R = glorot;
    weight<float[8][C]> W1 = glorot;
    propNode<float[8]> h;  propNode<float[8]> a;  propNode<float[C]> out;
    gnn.optimizer("adam", lr = 0.01);
    for (int epoch = 0; epoch < 5; epoch++) {
        forall (v in g.nodes()) {
            v.h = relu(v.x * W0);
            v.a = Sum(e in v.incoming_edges(): e.src.h * R[e.etype]);
            v.out = v.a * W1;
        }
        gnn.loss(out, "cross_entropy");
        gnn.backPropagation();
        gnn.optimizerStep();
    }
}
""")
    s = harness.program_shape(prog)
    assert s.unsupported and "block-diagonal typed weights (R)" in s.unsupported, s.unsupported

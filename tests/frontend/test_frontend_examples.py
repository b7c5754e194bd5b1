"""The shipped examples compile to well-formed IR with the intended structure."""
import pytest

from tests.frontend.frontend_helpers import EXAMPLES, ROOT, SAFE_PARAM
from morphgen.frontend import compile_file, compile_source
from morphgen.grammar.ast import Coord
from morphgen.frontend.sema import CPP_KEYWORDS

NAMES = {p.stem for p in EXAMPLES}


def test_all_eight_examples_exist():
    assert {"gcn", "gcn3", "sage", "gin", "gat", "rgcn", "rgat", "hgt"} <= NAMES


def opcodes(prog):
    return [op.opcode for op in prog.forward]


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_compiles(path):
    prog = compile_file(path)
    prog.validate()
    assert prog.loss is not None and prog.loss.assoc == "scalar"
    assert prog.logits is not None and prog.logits.assoc == "node"
    link = prog.task == "link"           # link prediction: scores triples, has no labels
    assert prog.forward[-1].opcode == ("link_loss" if link else "cross_entropy")
    assert prog.inputs["features"].assoc == "node"
    assert ("labels" not in prog.inputs) if link else prog.inputs["labels"].dtype == "i64"
    for op in prog.forward:
        assert isinstance(op.loc, Coord) and op.loc.file == str(path) and op.loc.line >= 1
    for p in prog.params:
        assert SAFE_PARAM.match(p.name) and p.name not in CPP_KEYWORDS
    sizes = {"F": 7, "C": 3, "etypes": 2, "ntypes": 2}
    prog.bind(sizes)
    assert prog.logits.shape == ((32,) if link else (3,))


def test_gcn_expansion_exact():
    prog = compile_file(EXAMPLES[0].parent / "gcn.mp")
    assert opcodes(prog) == ["dropout", "linear", "aggregate", "bias_add", "relu",
                             "dropout", "linear", "aggregate", "bias_add", "cross_entropy"]
    agg = prog.forward[2]
    assert agg.attrs == {"reduce": "sum", "norm": "gcn", "self_loops": True}
    assert prog.forward[0].attrs == {"p": 0.5}
    assert [p.name for p in prog.params] == ["layer0.W", "layer0.b", "layer1.W", "layer1.b"]
    assert prog.param("layer0.W").value.shape == ("F", 16)
    assert prog.param("layer1.W").value.shape == (16, "C")
    assert prog.param("layer0.b").init == "zeros" and prog.param("layer0.W").init == "glorot"
    assert prog.epochs == 200
    o = prog.optimizer
    assert (o.kind, o.lr, o.weight_decay) == ("adam", 0.01, 5e-4)
    assert prog.logits is prog.forward[-2].output
    assert prog.feature_normalization == "row"
    # the loss op points at the gnn.loss directive
    lines = (ROOT / "examples" / "gcn.mp").read_text().splitlines()
    loss_line = next(i for i, text in enumerate(lines, 1) if "gnn.loss(" in text)
    assert prog.forward[-1].loc.line == loss_line


def test_gcn3_has_three_layers():
    prog = compile_file(EXAMPLES[0].parent / "gcn3.mp")
    assert opcodes(prog).count("aggregate") == 3
    assert opcodes(prog).count("relu") == 2          # the last layer has no activation
    assert prog.param("layer1.W").value.shape == (32, 32)


def test_sage_uses_mean_and_two_weights():
    prog = compile_file(EXAMPLES[0].parent / "sage.mp")
    aggs = [op for op in prog.forward if op.opcode == "aggregate"]
    assert all(op.attrs["reduce"] == "mean" and op.attrs["norm"] == "none" for op in aggs)
    assert {"layer0.W_neigh", "layer0.W_self", "layer0.b"} <= {p.name for p in prog.params}


@pytest.mark.parametrize("name,weights,init", [
    ("gcn", ("layer0.W", "layer1.W"), "glorot"),
    ("gat", ("layer0.W", "layer0.a_src", "layer0.a_dst"), "glorot"),
    ("sage", ("layer0.W_neigh", "layer0.W_self", "layer1.W_self"), "uniform"),
    ("gin", ("layer0.W1", "layer0.W2"), "glorot"),
])
def test_layer_weights_start_as_their_kind_defaults(name, weights, init):
    prog = compile_file(EXAMPLES[0].parent / f"{name}.mp")
    assert {prog.param(w).init for w in weights} == {init}
    biases = [p for p in prog.params if p.name.startswith("layer0.b")]    # gin.mp: batch norm's shift
    assert all(p.init == "zeros" for p in biases) and (biases or name == "gin")


def test_layer_init_argument_overrides_the_kind_default():
    source = (EXAMPLES[0].parent / "sage.mp").read_text().replace(
        "gnn.layer(F, 64, dropout = 0.5);", 'gnn.layer(F, 64, dropout = 0.5, init = "glorot");')
    assert 'init = "glorot"' in source
    prog = compile_source(source)
    assert prog.param("layer0.W_neigh").init == "glorot" and prog.param("layer1.W_neigh").init == "uniform"


def test_gin_is_sum_plus_self_then_mlp():
    prog = compile_file(EXAMPLES[0].parent / "gin.mp")
    ops = opcodes(prog)
    # no bias before a batch norm (it would cancel): the norm's shift is the bias
    assert ops[:11] == ["aggregate", "add", "linear", "batch_standardize", "mul", "bias_add", "relu",
                        "linear", "batch_standardize", "mul", "bias_add"]
    assert prog.forward[1].inputs[0] is prog.inputs["features"]
    state = {p.name for p in prog.params if not p.trainable}
    assert state == {f"layer{l}.norm{k}.running_{s}" for l in (0, 1) for k in (1, 2) for s in ("mean", "var")}
    assert not any(p.weight_decay for p in prog.params if ".norm" in p.name)


def test_gat_attention_structure():
    prog = compile_file(EXAMPLES[0].parent / "gat.mp")
    ops = opcodes(prog)
    assert ops.count("edge_softmax") == 2 and ops.count("scatter") == 2
    lrelu = [op for op in prog.forward if op.opcode == "leaky_relu"]
    assert all(op.attrs["alpha"] == 0.2 for op in lrelu)
    assert [op.attrs for op in prog.forward if op.opcode == "elu"] == [{"alpha": 1.0}]
    assert prog.optimizer.lr == 0.005
    assert prog.self_loops
    assert [op.attrs.get("heads", 1) for op in prog.forward if op.opcode == "dot"] == [8, 8, 1, 1]
    assert ops.count("head_mul") == 1 and "head_mean" not in ops      # hidden heads concatenated
    edge_dropouts = [op for op in prog.forward if op.opcode == "dropout" and op.output.assoc == "edge"]
    assert [op.attrs["p"] for op in edge_dropouts] == [0.6, 0.6]


def test_rgcn_relational_ops():
    prog = compile_file(EXAMPLES[0].parent / "rgcn.mp")
    ops = opcodes(prog)
    assert ops.count("typed_linear") == 2 and ops.count("scatter") == 2
    scalars = [op for op in prog.forward if op.opcode == "graph_scalar"]
    assert [op.attrs["kind"] for op in scalars] == ["rel_degree"]      # shared, not re-emitted
    w1 = prog.param("W1").value
    assert w1.domain == "etype" and w1.shape == ("etypes", "F", 16)
    assert prog.epochs == 50


def test_rgat_uses_typed_param_and_dot():
    prog = compile_file(EXAMPLES[0].parent / "rgat.mp")
    ops = opcodes(prog)
    assert ops.count("typed_param") == 4 and ops.count("dot") == 4
    assert ops.count("edge_softmax") == 2


def test_hgt_typed_linear_on_nodes_and_edges_with_two_heads():
    prog = compile_file(EXAMPLES[0].parent / "hgt.mp")
    typed = [op for op in prog.forward if op.opcode == "typed_linear"]
    assocs = sorted(op.inputs[0].assoc for op in typed)
    assert assocs == ["edge", "edge", "node", "node", "node", "node"]
    assert [op.attrs["heads"] for op in prog.forward if op.opcode in ("dot", "head_mul")] == [2, 2]
    assert any(op.opcode == "scale" and op.attrs["c"] == pytest.approx(32 ** -0.5) for op in prog.forward)
    assert prog.optimizer.kind == "adam"
    # the relation matrices: two 32 x 32 diagonal blocks per edge type, stored [T, 64, 32]
    params = {p.name: p for p in prog.params}
    for name in ("Watt", "Wmsg"):
        assert params[name].blocks == 2 and params[name].value.shape == ("etypes", 64, 32)
    edge = [op for op in typed if op.inputs[0].assoc == "edge"]
    assert [(op.attrs.get("blocks"), op.output.width) for op in edge] == [(2, 64), (2, 64)]
    assert all("blocks" not in op.attrs for op in typed if op.inputs[0].assoc == "node")

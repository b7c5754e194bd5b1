"""Language constructs lower to the intended IR ops."""
import re

import pytest

from morphgen.frontend import CompileError, check_source, compile_source

HEAD = "function m(Graph g, propNode<float[F]> x, propNode<int[C]> y) {\n"


def program(decls, body, loss="out"):
    return (HEAD + decls + '    gnn.optimizer("sgd", lr = 0.1, momentum = 0.9);\n'
            "    for (int epoch = 0; epoch < 3; epoch++) {\n" + body +
            f'        gnn.loss({loss}, "cross_entropy");\n        gnn.backPropagation();\n'
            "        gnn.optimizerStep();\n    }\n}\n")


def ops(prog):
    return [op.opcode for op in prog.forward]


def test_neighbors_mean_max_degrees_and_builtins():
    src = program("""    weight<float[F][8]> W = glorot;  weight<float[16][C]> O = glorot;
    propNode<float[16]> h;  propNode<float[C]> out;
""", """        forall (v in g.nodes()) {
            float t = v.x * W;
            v.h = concat(Mean(u in g.neighbors(v): u.x * W), Max(e in v.outgoing_edges(): e.dst.x * W));
            v.h = sigmoid(v.h) * tanh(v.h) + exp(v.h) - elu(v.h, 0.5);
            v.out = leaky_relu(v.h * O, 0.2) / v.in_degree;
            v.out = v.out * v.out_degree + -v.out;
        }
""")
    prog = compile_source(src)
    prog.validate()
    o = ops(prog)
    scatters = [op for op in prog.forward if op.opcode == "scatter"]
    assert [(s.attrs["reduce"], s.attrs["end"]) for s in scatters] == [("mean", "dst"), ("max", "src")]
    assert "concat" in o and "neg" in o and "sigmoid" in o and "exp" in o
    gathers = [op.attrs["end"] for op in prog.forward if op.opcode == "gather"]
    assert gathers == ["src", "dst"]        # u is the source of v's in-edges; e.dst of out-edges
    kinds = [op.attrs["kind"] for op in prog.forward if op.opcode == "graph_scalar"]
    assert kinds == ["in_degree", "out_degree"]
    assert prog.optimizer.kind == "sgd" and prog.optimizer.momentum == 0.9
    concat = next(op for op in prog.forward if op.opcode == "concat")
    assert concat.output.shape == (16,)


def test_static_loops_if_while_and_constants_unroll():
    src = program("""    weight<float[F][C]> W = glorot;  propNode<float[C]> out;
    int n = 0;
    while (n < 3) { n += 1; }
    float scale = 1.0 / 4;
""", """        forall (v in g.nodes()) {
            v.out = v.x * W;
            for (int i = 0; i < n; i++) {
                if (i % 2 == 0 && !false) {
                    v.out = v.out * scale;
                } else {
                    v.out = relu(v.out);
                }
            }
        }
""")
    prog = compile_source(src)
    assert ops(prog) == ["linear", "scale", "relu", "scale", "cross_entropy"]
    assert prog.forward[1].attrs["c"] == 0.25


def test_edge_forall_defines_edge_properties():
    src = program("""    weight<float[F][C]> W = glorot;  weight<float[C]> a = glorot;
    propEdge<float> s;  propEdge<float> alpha;  propNode<float[C]> z;  propNode<float[C]> out;
""", """        forall (v in g.nodes()) { v.z = dropout(v.x, 0.5) * W; }
        forall (e in g.edges()) {
            e.s = leaky_relu(dot(e.src.z, a) + dot(e.dst.z, e.src.z), 0.2);
            e.alpha = edge_softmax(e.s);
        }
        forall (v in g.nodes()) { v.out = Sum(e in v.incoming_edges(): e.src.z * e.alpha); }
""")
    prog = compile_source(src)
    o = ops(prog)
    assert o[:3] == ["dropout", "linear", "gather"]
    assert "edge_softmax" in o
    soft = next(op for op in prog.forward if op.opcode == "edge_softmax")
    assert soft.inputs[0].assoc == "edge" and soft.output.shape == (1,)
    # e.src.z is gathered once and reused
    assert sum(1 for op in prog.forward if op.opcode == "gather" and op.attrs["end"] == "src") == 1


def test_property_reassignment_is_a_new_ssa_value():
    src = program("""    weight<float[F][C]> W = glorot;  propNode<float[C]> out;
""", """        forall (v in g.nodes()) { v.out = v.x * W; }
        forall (v in g.nodes()) { v.out = relu(v.out); }
""")
    prog = compile_source(src)
    assert prog.logits is prog.forward[-2].output and prog.forward[-2].opcode == "relu"


def test_dropout_zero_is_omitted_and_labels_without_size():
    src = ("function m(Graph g, propNode<float[F]> x, propNode<int> y) {\n"
           "    gnn.layer(F, 4, dropout = 0.0, bias = false, weight_decay = false);\n"
           "    gnn.layer(4, 3);\n    gnn.optimizer(\"adamw\", lr = 0.1, beta1 = 0.8, eps = 1e-6);\n"
           "    for (int epoch = 1; epoch <= 5; epoch += 2) {\n"
           "        for (int l = 0; l < 2; l++) { gnn.forwardPass(l, \"GCN\", \"Mean\"); }\n"
           "        gnn.loss(\"cross_entropy\");\n        gnn.backPropagation();\n"
           "        gnn.optimizerStep();\n    }\n}\n")
    prog = compile_source(src)
    assert ops(prog)[:3] == ["linear", "aggregate", "relu"]       # no dropout, no bias
    assert prog.forward[1].attrs == {"reduce": "mean", "norm": "none", "self_loops": True}
    assert prog.param("layer0.W").weight_decay is False
    assert prog.epochs == 3
    assert (prog.optimizer.beta1, prog.optimizer.eps) == (0.8, 1e-6)


def test_errors_are_reported_even_after_earlier_errors():
    src = program("    weight<float[F][C]> W = glorot;  propNode<float[C]> out;\n",
                  "        forall (v in g.nodes()) { v.out = v.x * Wx; }\n"
                  "        forall (v in g.nodes()) { v.out = relu(v.out) * 3 + 1; }\n")
    diags = check_source(src, "m.mp")
    assert [d.message for d in diags] == ["undeclared name 'Wx'; did you mean 'W'?"]
    src2 = program("    weight<float[F][C]> W = glorot;  propNode<float[C]> out;\n",
                   "        forall (v in g.nodes()) { v.out = v.x * Wx; }\n"
                   "        forall (v in g.nodes()) { v.out = v.x * W + false; }\n")
    msgs = [d.message for d in check_source(src2, "m.mp")]
    assert msgs == ["undeclared name 'Wx'; did you mean 'W'?",
                    "the constant added in '+' must be a number, got a boolean"]


def test_syntax_recovery_reports_several_errors():
    src = HEAD + "    int a = ;\n    int b = 2 +;\n    c d e;\n}\n"
    diags = check_source(src, "s.mp")
    assert [(d.line, d.col) for d in diags] == [(2, 13), (3, 16), (4, 7)]


def test_check_file_reports_unreadable_files(tmp_path):
    from morphgen.frontend import check_file, compile_file
    missing = tmp_path / "nope.mp"
    [d] = check_file(missing)
    assert d.message.startswith("cannot read the file") and (d.line, d.col) == (1, 1)
    binary = tmp_path / "bin.mp"
    binary.write_bytes(b"function \xff\xfe")
    [d] = check_file(binary)
    assert "not valid UTF-8" in d.message
    with pytest.raises(CompileError):
        compile_file(binary)


def test_empty_and_deeply_nested_inputs():
    assert [d.message for d in check_source("", "e.mp")] == ["unexpected end of input, expected 'function'"]
    deep = program("    propNode<float[F]> out;\n",
                   "        forall (v in g.nodes()) { v.out = " + "(" * 3000 + "v.x" + ")" * 3000 + "; }\n")
    diags = check_source(deep, "d.mp")
    assert diags and all(d.line >= 1 for d in diags)


def test_parser_is_built_once_and_writes_no_files():
    from pathlib import Path

    import morphgen.grammar as grammar_pkg
    from morphgen.grammar.parser import grammar
    assert grammar() is grammar()
    folder = Path(grammar_pkg.__file__).parent
    assert not list(folder.glob("parsetab*")) and not list(folder.glob("parser.out"))
    assert not list(folder.glob("lextab*"))


@pytest.mark.parametrize("header,epochs", [
    ("int epoch = 0; epoch < 200; epoch++", 200),
    ("int epoch = 10; epoch > 0; epoch -= 3", 4),
    ("int epoch = 1; epoch <= 7; epoch += 2", 4),
    ("int e = 0; e * e < 50; e++", 8),                 # not closed form: counted by stepping
])
def test_epoch_count(header, epochs):
    src = program("    weight<float[F][C]> W = glorot;  propNode<float[C]> out;\n",
                  "        forall (v in g.nodes()) { v.out = v.x * W; }\n"
                  ).replace("int epoch = 0; epoch < 3; epoch++", header)
    assert compile_source(src).epochs == epochs


@pytest.mark.parametrize("header,message", [
    ("int epoch = 0; epoch < 100000000000; epoch++",
     "the training loop runs 100000000000 epochs; the limit is 10000000"),
    ("int epoch = 0; epoch < 10; epoch--",
     "the training loop never ends: its step moves the counter away from the bound"),
    ("int epoch = 5; epoch < 3; epoch++", "the training loop runs zero epochs"),
])
def test_bad_epoch_loops(header, message):
    src = program("    weight<float[F][C]> W = glorot;  propNode<float[C]> out;\n",
                  "        forall (v in g.nodes()) { v.out = v.x * W; }\n"
                  ).replace("int epoch = 0; epoch < 3; epoch++", header)
    assert [d.message for d in check_source(src, "e.mp")] == [message]


def test_a_width_one_weight_is_a_learned_scalar():
    # It scales every feature (GIN's eps); other widths must match the rows they multiply.
    decl = "    weight<float[F][16]> W = glorot;  weight<float[1]> s = ones;\n    propNode<float[16]> out;\n"
    assert check_source(program(decl, "        forall (v in g.nodes()) { v.out = v.x * W * s; }\n"),
                        "ir.mp") == []
    [d] = check_source(program(decl.replace("float[1]", "float[4]"),
                               "        forall (v in g.nodes()) { v.out = v.x * W * s; }\n"), "ir.mp")
    assert (d.col, d.message) == (51, "shape mismatch: widths 16 and 4 differ")


def test_attention_heads_lower_to_per_head_ops():
    src = program("""    weight<float[F][12]> W = glorot;  weight<float[12]> a = glorot;
    weight<float[3][C]> O = glorot;
    propNode<float[12]> z;  propNode<float[4]> s;  propEdge<float[4]> al;  propNode<float[C]> out;
""", """        forall (v in g.nodes()) {
            v.z = v.x * W;
            v.s = dot(v.z, a, heads = 4);
        }
        forall (e in g.edges()) { e.al = edge_softmax(e.src.s + e.dst.s); }
        forall (v in g.nodes()) {
            v.out = mean_heads(Sum(e in v.incoming_edges(): scale_heads(e.src.z, e.al)), heads = 4) * O;
        }
""")
    prog = compile_source(src)
    prog.validate()
    by_code = {op.opcode: op for op in prog.forward}
    assert by_code["dot"].attrs["heads"] == 4 and by_code["dot"].output.shape == (4,)
    assert by_code["edge_softmax"].output.shape == (4,)
    assert by_code["head_mul"].attrs["heads"] == 4 and by_code["head_mul"].output.shape == (12,)
    assert by_code["head_mean"].output.shape == (3,)


@pytest.mark.parametrize("concat,out_width", [(True, 16), (False, 8)])
def test_gat_layer_heads_concatenate_or_average(concat, out_width):
    flag = "true" if concat else "false"
    src = (HEAD + f"    gnn.addSelfLoops();\n    gnn.layer(F, 8, heads = 2, concat = {flag}, attention_dropout = 0.5);\n"
           f"    gnn.layer({out_width}, C);\n" + '    gnn.optimizer("adam", lr = 0.01);\n'
           "    for (int epoch = 0; epoch < 3; epoch++) {\n"
           '        gnn.forwardPass(0, "GAT", "Sum");\n        gnn.forwardPass(1, "GAT", "Sum");\n'
           '        gnn.loss("cross_entropy");\n        gnn.backPropagation();\n        gnn.optimizerStep();\n    }\n}\n')
    prog = compile_source(src)
    assert prog.self_loops
    shapes = {p.name: p.value.shape for p in prog.params}
    assert shapes["layer0.W"] == ("F", 16) and shapes["layer0.a_src"] == (16,)
    assert shapes["layer0.b"] == (out_width,) and shapes["layer1.W"] == (out_width, "C")
    o = ops(prog)
    assert o.count("head_mul") == 1 and o.count("head_mean") == (0 if concat else 1)
    attention_dropouts = [op for op in prog.forward if op.opcode == "dropout" and op.output.assoc == "edge"]
    assert len(attention_dropouts) == 1 and attention_dropouts[0].attrs["p"] == 0.5


def _two_layers(layer0: str, forward0: str, self_loops: str = "") -> str:
    return (HEAD + self_loops + f"    gnn.layer({layer0});\n    gnn.layer(8, C, edge_weight = true);\n"
            '    gnn.optimizer("adam", lr = 0.01);\n    for (int epoch = 0; epoch < 3; epoch++) {\n'
            f'        gnn.forwardPass(0, {forward0});\n        gnn.forwardPass(1, "GCN", "Sum");\n'
            '        gnn.loss("cross_entropy");\n        gnn.backPropagation();\n        gnn.optimizerStep();\n    }\n}\n')


@pytest.mark.parametrize("self_loops", ["", "    gnn.addSelfLoops();\n"])
def test_gcn_layers_weighing_edges_read_the_weights_once(self_loops):
    prog = compile_source(_two_layers("F, 8, edge_weight = true", '"GCN", "Sum"', self_loops))
    weights = [op for op in prog.forward if op.opcode == "graph_scalar"]
    assert [op.attrs["kind"] for op in weights] == ["edge_weight"]          # one read, for both layers
    aggregations = [op for op in prog.forward if op.opcode == "aggregate"]
    assert len(aggregations) == 2 and all(
        op.inputs[1] is weights[0].output and op.attrs["norm"] == "gcn_weighted"
        and op.attrs["self_loops"] == (not self_loops) for op in aggregations)     # a loop weighs 1 either way


@pytest.mark.parametrize("layer0,forward0,message", [
    ("F, 8, edge_weight = true", '"SAGE", "Mean"', "6:28: error: layer 0 runs SAGE with Mean, but 'edge_weight' (declared "
                                                   "at line 2) applies to GCN layers with Sum only"),
    ("F, 8, edge_weight = true", '"GCN", "Mean"', "layer 0 runs GCN with Mean, but 'edge_weight'"),
    ("F, 8, edge_weight = 1", '"GCN", "Sum"', "edge_weight must be true or false, got an integer"),
])
def test_edge_weights_are_for_gcn_layers_that_sum(layer0, forward0, message):
    with pytest.raises(CompileError, match=re.escape(message)):
        compile_source(_two_layers(layer0, forward0))


UNUSED_STORE_DECLS = """    weight<float[F][16]> W = glorot;  weight<float[16][C]> O = glorot;
    propNode<float[16]> h;  propNode<float[C]> out;  propNode<float[C]> extra;  propNode<float[16]> early;
"""


def test_a_property_nothing_depends_on_is_a_located_warning_and_the_program_compiles():
    """A value assigned to a property that neither the loss nor the output depends on is
    dropped with the dead forward ops: a warning at the statement (once, however often it
    runs), the program still compiles, and an overwritten store counts as unused too."""
    src = program(UNUSED_STORE_DECLS, """        forall (v in g.nodes()) { v.early = v.x * W; }
        forall (v in g.nodes()) { v.h = relu(v.x * W); }
        for (int k = 0; k < 2; k++) {
            forall (v in g.nodes()) { v.early = v.h * 2.0; }
        }
        forall (v in g.nodes()) { v.out = v.h * O; }
        forall (v in g.nodes()) { v.extra = v.out + 1.0; }
""")
    diagnostics = check_source(src, "m.mp")
    assert [(d.severity, d.line, d.col) for d in diagnostics] == [("warning", 6, 43), ("warning", 9, 47),
                                                                  ("warning", 12, 43)]
    assert all("neither the loss nor the output depends on it" in d.message for d in diagnostics)
    assert {d.message.split("'")[1] for d in diagnostics} == {"early", "extra"}
    prog = compile_source(src, "m.mp")
    assert [d.line for d in prog.warnings] == [6, 9, 12]


def test_a_store_read_by_what_the_loss_needs_is_no_warning():
    """Stores that feed the loss, directly or through a helper called twice (one call's result
    used), and a property read again after its first store, warn about nothing."""
    src = (HEAD + """    weight<float[F][16]> W = glorot;  weight<float[16][C]> O = glorot;
    propNode<float[16]> h;  propNode<float[16]> a;  propNode<float[C]> out;
    gnn.optimizer("sgd", lr = 0.1);
    for (int epoch = 0; epoch < 3; epoch++) {
        forall (v in g.nodes()) { v.h = v.x * W; }
        forall (v in g.nodes()) { v.h = relu(v.h); }
        forall (v in g.nodes()) { v.a = Sum(u in g.neighbors(v): u.h); }
        forall (v in g.nodes()) { v.out = v.a * O; }
        gnn.loss(out, "cross_entropy");
        gnn.backPropagation();
        gnn.optimizerStep();
    }
}
""")
    assert check_source(src, "m.mp") == []
    assert compile_source(src, "m.mp").warnings == []

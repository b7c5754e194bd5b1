"""Functions calling functions (inlined at compile time) and directive layers reading and writing
explicit properties.  Each case is compared with the same program written out by hand: the
lowered IR must be the same, op for op."""
from pathlib import Path

import pytest

from morphgen.frontend import check_source, compile_file, compile_source

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

PROGRAM = """function m(Graph g, propNode<float[F]> x, propNode<int[C]> y) {
    weight<float[F][16]> W1 = glorot;  weight<float[16][C]> W2 = glorot;  weight<float[C]> b = zeros;
    propNode<float[16]> h;  propNode<float[C]> out;
    gnn.optimizer("adam", lr = 0.01);
    for (int epoch = 0; epoch < 3; epoch++) {
BODY
        gnn.loss(out, "cross_entropy");
        gnn.backPropagation();
        gnn.optimizerStep();
    }
}
"""


def program(body: str, helpers: str = "", after: str = "") -> str:
    return helpers + PROGRAM.replace("BODY", body) + after


def same_ir(a: str, b: str) -> None:
    pa, pb = compile_source(a), compile_source(b)
    assert pa.dump() == pb.dump()
    assert [p.name for p in pa.params] == [p.name for p in pb.params]


LIN = """function lin(Graph g, propNode<float[K]> a, propNode<float[M]> z, weight<float[K][M]> W, float p) {
    forall (v in g.nodes()) { v.z = dropout(v.a, p) * W; }
}
"""
BY_HAND = """        forall (v in g.nodes()) { v.h = dropout(v.x, 0.5) * W1; }
        forall (v in g.nodes()) { v.out = dropout(v.h, 0.25) * W2; }
"""


def test_a_function_called_twice_binds_its_widths_per_call():
    same_ir(program("        lin(g, x, h, W1, 0.5);\n        lin(g, h, out, W2, 0.25);\n", LIN),
            program(BY_HAND))


def test_functions_may_follow_the_program_and_call_each_other():
    helpers = """function both(Graph g, propNode<float[A]> x0, propNode<float[B]> mid, propNode<float[D]> o,
                weight<float[A][B]> U, weight<float[B][D]> V) {
    lin(g, x0, mid, U, 0.5);
    lin(g, mid, o, V, 0.25);
}
"""
    same_ir(program("        both(g, x, h, out, W1, W2);\n", after=helpers + LIN), program(BY_HAND))


def test_scalar_arguments_are_compile_time_values():
    helper = """function stack(Graph g, propNode<float[M]> z, weight<float[M]> b, int times) {
    for (int i = 0; i < times; i++) {
        forall (v in g.nodes()) { v.z = v.z + b; }
    }
}
"""
    start = "        forall (v in g.nodes()) { v.out = v.x * W1 * W2; }\n"
    twice = "        forall (v in g.nodes()) { v.out = v.out + b; }\n" * 2
    same_ir(program(start + "        stack(g, out, b, 2);\n", helper), program(start + twice))


def test_a_helper_may_assign_the_same_property_it_reads():
    helper = """function inplace(Graph g, propNode<float[M]> a, propNode<float[M]> z, weight<float[M]> b) {
    forall (v in g.nodes()) { v.z = v.a + b; }
    forall (v in g.nodes()) { v.z = v.a * v.z; }
}
"""
    start = "        forall (v in g.nodes()) { v.out = v.x * W1 * W2; }\n"
    by_hand = ("        forall (v in g.nodes()) { v.out = v.out + b; }\n"
               "        forall (v in g.nodes()) { v.out = v.out * v.out; }\n")
    same_ir(program(start + "        inplace(g, out, out, b);\n", helper), program(start + by_hand))


def test_local_properties_of_two_calls_are_distinct():
    helper = """function twice(Graph g, propNode<float[M]> z) {
    propNode<float[M]> t;
    forall (v in g.nodes()) { v.t = v.z * 2; }
    forall (v in g.nodes()) { v.z = v.t + v.z; }
}
"""
    start = "        forall (v in g.nodes()) { v.out = v.x * W1 * W2; }\n"
    assert check_source(program(start + "        twice(g, out);\n        twice(g, out);\n", helper)) == []


def test_the_layer_function_example_is_graphsage():
    prog = compile_file(EXAMPLES / "sage_layers.mp")
    assert [p.name for p in prog.params] == ["N1", "S1", "b1", "N2", "S2", "b2"]
    ops = [op.opcode for op in prog.forward]
    assert ops.count("dropout") == 2 and ops.count("relu") == 1
    assert [op.attrs["reduce"] for op in prog.forward if op.opcode == "scatter"] == ["mean", "mean"]


def test_an_error_in_a_function_names_the_call():
    src = program("        lin(g, x, h, W1, 0.5);\n        lin(g, h, out, W2, 0.25);\n",
                  LIN.replace("dropout(v.a, p) * W", "dropout(v.a, p) * W + v.zz"))
    messages = [(d.line, d.message) for d in check_source(src)]
    # the second call reads h, which the failed first call left unassigned: it stays silent
    assert messages == [(2, "node 'v' has no property 'zz'; did you mean 'z'? (in 'lin' called at line 9)")]


GCN2 = """function m(Graph g, propNode<float[F]> x, propNode<int[C]> y) {
    weight<float[F][32]> Win = glorot;  weight<float[C][C]> Wout = glorot;
    propNode<float[32]> h;  propNode<float[16]> mid;  propNode<float[C]> out;
    gnn.layer(32, 16);
    gnn.layer(16, C);
    gnn.optimizer("adam", lr = 0.01);
    for (int epoch = 0; epoch < 3; epoch++) {
        forall (v in g.nodes()) { v.h = relu(v.x * Win); }
        gnn.forwardPass(0, "GCN", "Sum", input = h, output = mid);
        gnn.forwardPass(1, "GCN", "Sum", output = out);
        forall (v in g.nodes()) { v.out = v.out + v.mid * Wmid; }
        gnn.loss(out, "cross_entropy");
        gnn.backPropagation();
        gnn.optimizerStep();
    }
}
"""


def test_directive_layers_read_and_write_explicit_properties():
    prog = compile_source(GCN2.replace("Wout = glorot;", "Wout = glorot;  weight<float[16][C]> Wmid = glorot;"))
    by_weight = {op.inputs[1].name: op for op in prog.forward if op.opcode == "linear"}
    h = next(op for op in prog.forward if op.opcode == "relu").output
    assert by_weight["layer0.W"].inputs[0] is h                     # layer 0 reads h, not x
    layer0_out = by_weight["layer1.W"].inputs[0]                    # layer 1 reads layer 0's output
    assert by_weight["Wmid"].inputs[0] is layer0_out                # and so does the explicit head
    assert prog.logits.name == "out"


def test_a_directive_output_of_the_wrong_width_is_located():
    src = GCN2.replace("input = h, output = mid);", "input = h, output = h);")
    src = src.replace(" + v.mid * Wmid", "")
    [d] = check_source(src)
    assert (d.line, d.col, d.message) == (
        9, 62, "layer 0 outputs 16 features, but property 'h' is declared with width 32")

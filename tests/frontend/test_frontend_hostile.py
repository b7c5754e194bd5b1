"""Hostile identifiers and strings never reach parameter names (or any generated name)."""
import pytest

from tests.frontend.frontend_helpers import SAFE_PARAM, assert_well_formed
from morphgen.frontend import CompileError, check_source, compile_source
from morphgen.frontend.sema import CPP_KEYWORDS

HEAD = "function m(Graph g, propNode<float[F]> x, propNode<int[C]> y) {\n"


def explicit(weight_name="W", prop_name="out"):
    return (HEAD + f"    weight<float[F][C]> {weight_name} = glorot;\n"
            f"    propNode<float[C]> {prop_name};\n"
            '    gnn.optimizer("adam", lr = 0.01);\n'
            "    for (int epoch = 0; epoch < 2; epoch++) {\n"
            f"        forall (v in g.nodes()) {{ v.{prop_name} = v.x * {weight_name}; }}\n"
            f'        gnn.loss({prop_name}, "cross_entropy");\n'
            "        gnn.backPropagation();\n        gnn.optimizerStep();\n    }\n}\n")


def directive(kind='"GCN"', agg='"Sum"', opt='"adam"', loss='"cross_entropy"',
              act='"relu"', init='"glorot"'):
    return (HEAD + f"    gnn.layer(F, 8, activation = {act}, init = {init});\n"
            "    gnn.layer(8, C);\n"
            f"    gnn.optimizer({opt}, lr = 0.01);\n"
            "    for (int epoch = 0; epoch < 2; epoch++) {\n"
            f"        gnn.forwardPass(0, {kind}, {agg});\n"
            f"        gnn.forwardPass(1, {kind}, {agg});\n"
            f"        gnn.loss({loss});\n"
            "        gnn.backPropagation();\n        gnn.optimizerStep();\n    }\n}\n")


MP_KEYWORDS = ["int", "float", "bool", "for", "if", "while", "in", "weight", "function", "true"]
CPP_ONLY = ["class", "delete", "template", "namespace", "operator", "return", "struct",
            "virtual", "typename", "new", "this", "static_cast", "main", "NULL", "std"]


@pytest.mark.parametrize("name", MP_KEYWORDS + CPP_ONLY)
@pytest.mark.parametrize("where", ["weight", "property"])
def test_keywords_as_names_are_rejected(name, where):
    src = explicit(weight_name=name) if where == "weight" else explicit(prop_name=name)
    diags = check_source(src, "h.mp")
    assert_well_formed(diags, "h.mp")
    if name in CPP_ONLY:
        assert diags[0].message == f"'{name}' is a reserved word of the generated C++; choose another name"
        assert diags[0].line == (2 if where == "weight" else 3)
    else:
        assert diags[0].message.startswith("syntax error")


@pytest.mark.parametrize("name", ["a__b", "__init", "_W", "W__", "_"])
def test_reserved_underscore_names_are_rejected(name):
    diags = check_source(explicit(weight_name=name), "h.mp")
    assert diags[0].message == (f"'{name}': names may not start with '_' or contain '__' "
                                "(reserved in C++)")


def test_very_long_names_are_rejected_and_the_limit_is_accepted():
    long = "w" * 65
    [d] = check_source(explicit(weight_name=long), "h.mp")
    assert d.message.endswith("is 65 characters long; the limit is 64")
    ok = compile_source(explicit(weight_name="w" * 64, prop_name="p" * 64))
    assert [p.name for p in ok.params] == ["w" * 64]


def test_plain_names_reach_params_unchanged_and_safe():
    prog = compile_source(explicit(weight_name="W_in2", prop_name="logits_v"))
    assert [p.name for p in prog.params] == ["W_in2"]
    for p in prog.params:
        assert SAFE_PARAM.match(p.name) and p.name not in CPP_KEYWORDS


HOSTILE = ['"; rm -rf /"', '"GCN\\"); system(\\"x"', '"\\n#include <evil>"', '""',
           '"GCN "', '"gcn"', '"\\u0000"', '"$(reboot)"']


@pytest.mark.parametrize("slot", ["kind", "agg", "opt", "loss", "act", "init"])
@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_strings_in_directives_are_rejected(slot, text):
    src = directive(**{slot: text})
    with pytest.raises(CompileError) as info:
        compile_source(src, "h.mp")
    diags = info.value.diagnostics
    assert_well_formed(diags, "h.mp")
    assert diags[0].message.startswith("unknown ")
    # the echoed string is escaped: no raw control characters or newlines in the message
    assert all(c.isprintable() for c in diags[0].message)


def test_hostile_function_and_symbol_names():
    for bad in ("class", "a__b", "_x"):
        src = explicit().replace("function m(", f"function {bad}(")
        assert check_source(src, "h.mp"), bad
        src = explicit().replace("float[F]> x", f"float[{bad}]> x")
        assert check_source(src, "h.mp"), bad


def test_size_symbol_names_never_reach_the_ir():
    src = explicit().replace("float[F]> x", "float[Features]> x").replace("[F][C]", "[Features][C]")
    prog = compile_source(src)
    assert prog.inputs["features"].shape == ("F",)       # canonical symbol, not the user's name
    assert prog.params[0].value.shape == ("F", "C")


@pytest.mark.parametrize("hostile", ["\x1b[2J\x1b[31m", "\u202e", "\x07", "\x00"])
@pytest.mark.parametrize("where", ["code", "name"])
def test_control_and_bidi_characters_are_shown_escaped_never_sent_to_the_terminal(hostile, where):
    """An escape sequence in a program would rewrite the user's terminal when its line is echoed;
    a bidi override would show the line in another order than the compiler reads it."""
    body = f"    int a = 1 {hostile};\n" if where == "code" else f"    int b{hostile} = 1;\n"
    source = "function m(Graph g, propNode<float[F]> x, propNode<int[C]> y) {\n" + body + "}\n"
    with pytest.raises(CompileError) as err:
        compile_source(source, filename="hostile.mp")
    text = str(err.value)
    assert "hostile.mp:2:" in text
    acting = [ch for ch in hostile if not ch.isprintable() or ch == "\u202e"]
    assert acting and not any(ch in text for ch in acting), repr(text)
    assert "\\x" in text or "\\u" in text

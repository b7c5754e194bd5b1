"""Limits of the language on hostile input: literals too large, names a builtin owns, nesting
deeper than the limit, long lines and many errors.  Each ends in located diagnostics (or a
program), never in a Python exception."""
import sys

import pytest

from morphgen import frontend
from morphgen.frontend import CompileError, check_source, compile_source
from morphgen.frontend.sema import BUILTIN_NAMES
from morphgen.grammar import ast as A
from morphgen.grammar.diagnostics import MAX_RENDERED, MAX_SHOWN_LINE, Diagnostic
from tests.frontend.frontend_helpers import assert_well_formed

HEAD = "function m(Graph g, propNode<float[F]> x, propNode<int[C]> y) {\n"
TRAIN = ("    weight<float[F][C]> W = glorot;\n"
         "    propNode<float[C]> out;\n"
         '    gnn.optimizer("adam", lr = 0.01);\n'
         "    for (int epoch = 0; epoch < 2; epoch++) {\n"
         "        forall (v in g.nodes()) { v.out = v.x * W; }\n"
         '        gnn.loss(out, "cross_entropy");\n'
         "        gnn.backPropagation();\n"
         "        gnn.optimizerStep();\n"
         "    }\n}\n")
MARK = "@@"


def located(template: str, name: str):
    """``template`` with MARK replaced by ``name``, and the (line, col) of the first MARK."""
    at = template.index(MARK)
    line = template.count("\n", 0, at) + 1
    col = at - (template.rfind("\n", 0, at) + 1) + 1
    return template.replace(MARK, name), (line, col)


def messages(diags):
    return [(d.line, d.col, d.message) for d in diags]


# -- literals ------------------------------------------------------------------------------

@pytest.mark.parametrize("where", [
    "    int n = @@;\n",
    "    propNode<float[@@]> h;\n",
    "    gnn.layer(F, @@);\n",
])
def test_integer_literal_beyond_pythons_digit_limit_is_a_located_error(where):
    src, at = located(HEAD + where + TRAIN, "9" * 5000)      # int() refuses > 4300 digits
    diags = check_source(src, "big.mp")
    assert messages(diags) == [(*at, "integer literal too large")]
    assert_well_formed(diags, "big.mp")


def test_integer_literals_are_int64():
    src, at = located(HEAD + "    int n = @@;\n" + TRAIN, str(2 ** 63))
    assert messages(check_source(src)) == [(*at, "integer literal too large")]
    compile_source(HEAD + f"    int n = {2 ** 63 - 1};\n" + TRAIN)
    # C reads 010 as octal 8: a leading zero is refused, not read as decimal, and a long run of
    # zeros is not echoed whole
    src = (HEAD + TRAIN).replace("epoch < 2", "epoch < " + "0" * 5000 + "3")
    (message,) = [m for *_, m in messages(check_source(src))]
    assert message.startswith("an integer literal may not start with 0 (") and len(message) < 200, message
    src, at = located(HEAD + "    int n = @@;\n" + TRAIN, "010")
    assert messages(check_source(src)) == [(*at, "an integer literal may not start with 0 ('010'): write it "
                                                 "without the leading zeros (octal literals are not supported)")]


@pytest.mark.parametrize("literal", ["1e999", "1.0e400", "9" * 400 + ".0", "." + "9" * 5000 + "e400"])
def test_float_literal_that_overflows_is_a_located_error(literal):
    src, at = located(HEAD + "    float s = @@;\n" + TRAIN, literal)
    assert messages(check_source(src)) == [(*at, "float literal too large")]


def test_digits_of_other_scripts_are_not_numbers():
    src, at = located(HEAD + "    int n = @@;\n" + TRAIN, "\u0663")     # ARABIC-INDIC DIGIT THREE
    assert messages(check_source(src))[0] == (*at, "illegal character '\\u0663'")


# -- names a builtin owns ------------------------------------------------------------------

DECLARATIONS = {
    "node property": HEAD + "    propNode<float> @@;\n" + TRAIN,
    "edge property": HEAD + "    propEdge<float[4]> @@;\n" + TRAIN,
    "weight": HEAD + "    weight<float[4]> @@ = zeros;\n" + TRAIN,
    "local": HEAD + "    int @@ = 1;\n" + TRAIN,
    "temporary in forall": (HEAD + TRAIN).replace("{ v.out", "{ float @@ = 1.0; v.out"),
    "forall variable": HEAD + "    forall (@@ in g.nodes()) { }\n" + TRAIN,
    "reduction variable": (HEAD + "    propNode<float[C]> s;\n" + TRAIN).replace(
        "v.out = v.x * W;", "v.s = Sum(@@ in v.incoming_edges(): v.x * W); v.out = v.x * W + v.s;"),
    "labels parameter": (HEAD + TRAIN).replace("propNode<int[C]> y", "propNode<int[C]> @@"),
    "graph parameter": (HEAD + TRAIN).replace("Graph g", "Graph @@").replace("g.nodes", "@@.nodes"),
    "size symbol": (HEAD + TRAIN).replace("float[F]> x", "float[@@]> x").replace("[F][C]", "[@@][C]"),
}


@pytest.mark.parametrize("kind", sorted(DECLARATIONS))
@pytest.mark.parametrize("name", sorted(BUILTIN_NAMES))
def test_declaring_a_name_a_builtin_owns_is_one_error_at_the_declaration(name, kind):
    src, at = located(DECLARATIONS[kind], name)
    diags = check_source(src, "s.mp")
    if name == "gnn" and kind == "graph parameter":
        diags = diags[:1]        # gnn.nodes() still reads as a directive: a second error there
    assert messages(diags) == [(*at, f"'{name}' is {BUILTIN_NAMES[name]}; choose another name")]


def test_every_declaration_template_is_valid_with_an_ordinary_name():
    for kind, template in DECLARATIONS.items():
        assert check_source(template.replace(MARK, "zz"), "s.mp") == [], kind


def test_builtin_names_cover_what_the_checker_resolves_itself():
    for name in ("in_degree", "out_degree", "rel_degree", "ntype", "etype", "src", "dst",
                 "relu", "dot", "edge_softmax", "Sum", "Mean", "Max", "gnn", "nodes", "neighbors"):
        assert name in BUILTIN_NAMES
    assert BUILTIN_NAMES["in_degree"] == "a builtin node property"


# -- nesting -------------------------------------------------------------------------------

LIMIT = frontend.MAX_NESTING
NEST_MSG = f"nesting too deep: more than {LIMIT} levels of blocks, statements and expressions"

# (opening text, closing text, innermost text, levels of the innermost text) at the top level
# of the function, levels counted as docs/language.md says
NESTINGS = {
    "blocks": ("{ ", "} ", "int a = 1;", 0),
    "if with braces": ("if (true) { ", "} ", "int a = 1;", 0),
    "if without braces": ("if (true) ", "", "int a = 1;", 0),
    "for": ("for (int i = 0; i < 1; i++) { ", "} ", "int a = 1;", 1),    # + the last condition
    "unary minus": ("int a = " + MARK, "", "1;", 0),
    "calls": ("forall (v in g.nodes()) { v.h = " + MARK, " }", "v.x;", 2),
}


def nested(kind, depth):
    """A program nested ``depth`` levels deep at the top of the function body."""
    opener, closer, inner, extra = NESTINGS[kind]
    depth -= extra
    if MARK in opener:          # an expression: prefix, then repeated operator
        prefix, op = opener.split(MARK)[0], {"unary minus": "- ", "calls": "relu("}[kind]
        tail = ")" * depth if kind == "calls" else ""
        body = prefix + op * depth + inner.rstrip(";") + tail + ";" + closer
    else:
        body = opener * depth + inner + closer * depth
    return HEAD + "    propNode<float[F]> h;\n    " + body + "\n" + TRAIN


@pytest.mark.parametrize("kind", sorted(NESTINGS))
def test_nesting_up_to_the_limit_compiles_one_more_level_is_located(kind):
    compile_source(nested(kind, LIMIT))                 # lowered all the way down, no RecursionError
    diags = check_source(nested(kind, LIMIT + 1), "n.mp")
    assert messages(diags)[0][2] == NEST_MSG and len(diags) == 1
    assert (diags[0].line, diags[0].col) != (1, 1) and diags[0].line == 3
    assert_well_formed(diags, "n.mp")


@pytest.mark.parametrize("opener", ["{ ", "if (true) ", "for (int i = 0; i < 1; i++) { "])
def test_thousands_of_nested_statements_report_the_first_level_past_the_limit(opener):
    src = HEAD + "    " + opener * 5000 + ";" + "}" * (5000 if "{" in opener else 0) + "\n" + TRAIN
    [d] = check_source(src, "n.mp")
    assert d.message == NEST_MSG and d.line == 2
    assert_well_formed([d], "n.mp")
    if "for" not in opener:     # for loops: their condition is the first construct past it
        assert d.col == 5 + len(opener) * LIMIT


def test_a_caller_deep_in_its_own_stack_can_still_compile_at_the_limit():
    src = nested("blocks", LIMIT)

    def descend(n):
        return compile_source(src) if n == 0 else descend(n - 1)

    limit = sys.getrecursionlimit()
    descend(limit - len(_frames()) - 60)                 # leaves ~60 frames of the stack
    assert sys.getrecursionlimit() == limit              # the extra room is given back


def _frames():
    f, out = sys._getframe(), []
    while f is not None:
        out.append(f)
        f = f.f_back
    return out


def test_a_recursion_error_despite_the_limit_is_still_located(monkeypatch):
    # simulate a lowering deeper than the room it is given: no limit, no extra room
    monkeypatch.setattr(frontend, "MAX_NESTING", 10 ** 6)
    monkeypatch.setattr(frontend, "_FRAMES_PER_LEVEL", 0)
    diags = check_source(HEAD + "    " + "{ " * 2000 + "int a = 1;" + "} " * 2000 + "\n" + TRAIN, "r.mp")
    assert [d.message for d in diags] == ["the program is nested too deeply"]
    assert diags[0].line == 2 and diags[0].col > 1


def test_too_deep_counts_body_braces_with_their_statement():
    fn = A.Function(None, "m", [], A.Block(None, [A.If(None, A.Bool(None, True),
                                                        A.Block(None, [A.Block(None, [])]), None)]))
    assert A.too_deep(fn, 2) is None          # the if, then the block inside its body
    assert isinstance(A.too_deep(fn, 1), A.Block)


# -- long lines and many errors -----------------------------------------------------------

def test_a_run_of_illegal_characters_is_one_diagnostic():
    diags = check_source(HEAD + "    " + "@" * 8700 + "\n}\n", "l.mp")
    assert messages(diags) == [(2, 5, "8700 illegal characters '" + "@" * 40 + "...'")]
    assert len(str(CompileError(diags))) < 600


def test_long_source_lines_are_shown_around_the_caret():
    line = "".join(chr(ord("a") + i % 26) for i in range(5000))
    for col in (1, 2, 2500, 4990, 5000):
        _, text, caret = Diagnostic("f.mp", 1, col, "m", "error", line).render().split("\n")
        assert len(text) <= MAX_SHOWN_LINE
        assert text[len(caret) - 1] == line[col - 1] and caret.endswith("^")
        assert text.startswith("...") == (col > 100) and text.endswith("...") == (col < 4900)
    short = Diagnostic("f.mp", 1, 3, "m", "error", "\tab cd").render().split("\n")
    assert short[1:] == ["\tab cd", "\t ^"]


def test_the_first_diagnostics_are_rendered_then_a_count():
    src = HEAD + "    " + "@ " * 4350 + "\n}\n"
    with pytest.raises(CompileError) as info:
        compile_source(src, "c.mp")
    assert len(info.value.diagnostics) == 4350               # the API keeps every one
    text = str(info.value)
    assert text.count(": error: ") == MAX_RENDERED
    assert text.endswith(f"\n... and {4350 - MAX_RENDERED} more errors")


def test_check_prints_the_first_diagnostics_then_a_count(tmp_path, capsys):
    from morphgen.cli import main
    path = tmp_path / "c.mp"
    path.write_text(HEAD + "    " + "@ " * 100 + "\n}\n")
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count(": error: ") == MAX_RENDERED
    assert err.endswith(f"... and {100 - MAX_RENDERED} more errors\n100 errors\n")


def test_source_lines_are_the_lines_the_lexer_counts():
    # '\f' and '\v' are whitespace to the lexer, not line breaks; '\r\n' ends a line
    src = HEAD.replace("g,", "g,\f") + "    int a = 1;\r\n    int b = @;\v\n}\n"
    diags = check_source(src, "f.mp")
    assert (diags[0].line, diags[0].col) == (3, 13) and diags[0].source_line == "    int b = @;\v"


def test_a_megabyte_long_name_gives_a_short_message():
    diags = check_source(HEAD + "    int q = " + "w" * 1_000_000 + ";\n" + TRAIN, "n.mp")
    assert [d.line for d in diags] == [2]
    assert diags[0].message.startswith("undeclared name 'www") and len(diags[0].message) < 500


def test_unrolled_loops_do_not_rewalk_untaken_bodies(monkeypatch):
    """A loop asks once per iteration whether a statement calls a training directive; the
    answer is remembered, so an untaken inner body is walked once, not once per iteration."""
    visited = []
    real_walk = A.walk

    def counting_walk(node):
        for n in real_walk(node):
            visited.append(n)
            yield n

    monkeypatch.setattr(A, "walk", counting_walk)
    body = "".join(f"            int a{i} = {i};\n" for i in range(200))
    src = (HEAD + "    for (int i = 0; i < 500; i++) {\n        for (int j = 0; j < 0; j++) {\n"
           + body + "        }\n    }\n" + TRAIN)
    assert check_source(src) == []
    assert len(visited) < 20_000        # before: 500 iterations x ~1000 nodes


@pytest.mark.parametrize("loop", ["for (int i = 0; i < LIMIT; i++) { n += 1; }",
                                  "while (n < LIMIT) { n += 1; }"])
def test_a_loop_of_exactly_the_iteration_limit_compiles_one_more_is_located(loop):
    from morphgen.frontend.lower import LOOP_LIMIT
    for trips, ok in ((LOOP_LIMIT, True), (LOOP_LIMIT + 1, False)):
        source = HEAD + "    int n = 0;\n    " + loop.replace("LIMIT", str(trips)) + "\n" + TRAIN
        if ok:
            compile_source(source, filename="loop.mp")
        else:
            with pytest.raises(CompileError) as err:
                compile_source(source, filename="loop.mp")
            assert (3, 5, f"loop does not finish within {LOOP_LIMIT} iterations") in messages(err.value.diagnostics)


def test_a_byte_order_mark_at_the_start_of_a_file_is_dropped(tmp_path):
    """Some editors start UTF-8 files with one; it is no character of the program."""
    from morphgen.frontend import compile_file
    path = tmp_path / "bom.mp"
    path.write_bytes("\ufeff".encode("utf-8") + (HEAD + TRAIN).encode("utf-8"))
    assert compile_file(path).epochs == 2

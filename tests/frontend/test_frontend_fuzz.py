"""Random token-level mutations of the examples: compile_source returns a Program or raises
CompileError with well-formed diagnostics; it never raises anything else.  The second half
feeds the examples hostile sizes (huge literals, deep nesting, long lines) and names a builtin
owns: each case ends in located errors or a program, within a time bound."""
import re
import subprocess
import sys
import time

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.frontend.frontend_helpers import EXAMPLES, ROOT, SAFE_PARAM, assert_well_formed
from morphgen.frontend import MAX_NESTING, CompileError, compile_source
from morphgen.frontend.sema import BUILTIN_NAMES, CPP_KEYWORDS
from morphgen.grammar.diagnostics import MAX_RENDERED
from morphgen.grammar.lexer import INT_MAX

TOKEN = re.compile(r'\s+|//[^\n]*|"[^"\n]*"|\d+\.\d*(?:e-?\d+)?|\w+|&&|\|\||[<>=!+\-*/]=|\+\+|--|.')
SOURCES = [p.read_text() for p in EXAMPLES]
TOKENS = [TOKEN.findall(s) for s in SOURCES]
VOCAB = sorted({t for ts in TOKENS for t in ts if not t.isspace()}) + [
    "\u00e9", "\u202e", "\x00", "\ud7ff", "\U0001f600", "/*", "*/", '"', "@", "#", "\\", "1e999",
    "99999999999999999999999", "-0", "class", "__x", "epoch", "Sum", "forall", "in", "{", "}"]

mutation = st.one_of(
    st.tuples(st.just("delete"), st.integers(0, 10 ** 6)),
    st.tuples(st.just("duplicate"), st.integers(0, 10 ** 6)),
    st.tuples(st.just("swap"), st.integers(0, 10 ** 6), st.integers(0, 10 ** 6)),
    st.tuples(st.just("replace"), st.integers(0, 10 ** 6), st.sampled_from(VOCAB)),
    st.tuples(st.just("insert"), st.integers(0, 10 ** 6), st.sampled_from(VOCAB)),
    st.tuples(st.just("bytes"), st.integers(0, 10 ** 6), st.text(min_size=1, max_size=4)),
)


def mutate(tokens, muts):
    toks = list(tokens)
    for m in muts:
        if not toks:
            break
        i = m[1] % len(toks)
        if m[0] == "delete":
            del toks[i]
        elif m[0] == "duplicate":
            toks.insert(i, toks[i])
        elif m[0] == "swap":
            j = m[2] % len(toks)
            toks[i], toks[j] = toks[j], toks[i]
        elif m[0] == "replace":
            toks[i] = m[2]
        else:
            toks.insert(i, m[2])
    return "".join(toks)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(SOURCES) - 1), st.lists(mutation, min_size=1, max_size=4))
def test_mutated_examples_never_crash(which, muts):
    text = mutate(TOKENS[which], muts)
    try:
        prog = compile_source(text, "fuzz.mp")
    except CompileError as e:
        assert_well_formed(e.diagnostics, "fuzz.mp")
        assert str(e)
        return
    assert prog.loss is not None
    for p in prog.params:
        assert SAFE_PARAM.match(p.name) and p.name not in CPP_KEYWORDS
    prog.validate()


def test_unmutated_examples_pass_through_the_tokenizer():
    for tokens, source in zip(TOKENS, SOURCES):
        assert "".join(tokens) == source


# == hostile sizes and builtin names ======================================================

# Per case, generous for a slow CI machine: every case takes well under a second today (a
# quadratic step or a Python recursion would take minutes or crash).
CASE_SECONDS = 20
HOSTILE = settings(max_examples=15, deadline=None, derandomize=True,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
NUMBER = re.compile(r"[0-9]+(?:\.[0-9]*)?")


def check_bounded(text):
    """Compile ``text``: a program or well-formed diagnostics whose rendering stays short,
    within CASE_SECONDS.  Returns the diagnostics (empty for a program)."""
    start = time.perf_counter()
    try:
        prog = compile_source(text, "fuzz.mp")
        prog.validate()
        diags = []
    except CompileError as e:
        diags = e.diagnostics
        assert_well_formed(diags, "fuzz.mp")
        rendered = str(e)
        assert rendered.count(": error: ") <= MAX_RENDERED
        assert max(len(line) for line in rendered.split("\n")) <= 600
    assert time.perf_counter() - start < CASE_SECONDS
    return diags


def where(text, offset):
    """(line, col) of a character offset."""
    return text.count("\n", 0, offset) + 1, offset - (text.rfind("\n", 0, offset) + 1) + 1


def after_function_brace(tokens):
    """The index just after the '{' that opens the program's body (its top level; the program
    is the last function of every example)."""
    last = len(tokens) - 1 - tokens[::-1].index("function")
    return tokens.index("{", last) + 1


def too_large(literal: str) -> str:
    """The error a numeric literal must give, or '' (computed without int(): it refuses
    strings of over 4300 digits)."""
    if "." in literal or "e" in literal:
        return "float literal too large" if float(literal) == float("inf") else ""
    digits = literal.lstrip("0") or "0"
    big = len(digits) > 19 or int(digits) > INT_MAX
    return "integer literal too large" if big else ""


literals = st.one_of(
    st.integers(1, 12_000).map(lambda n: "9" * n),
    st.integers(1, 12_000).map(lambda n: "0" * n + "7"),
    st.integers(0, 2 ** 70).map(str),
    st.tuples(st.integers(1, 6000), st.integers(0, 6000)).map(lambda t: "9" * t[0] + "." + "9" * t[1]),
    st.integers(300, 100_000).map(lambda e: f"1.5e{e}"),
)


@HOSTILE
@given(st.integers(0, len(SOURCES) - 1), st.integers(0, 10 ** 6), literals)
@example(0, 0, "9" * 5000)                      # beyond int()'s 4300 digits
@example(1, 3, "0" * 5000 + "7")                # as long, but only 7
@example(2, 1, "9" * 5000 + ".5")               # inf
def test_huge_literals_are_located_errors(which, pick, literal):
    toks = list(TOKENS[which])
    numbers = [i for i, t in enumerate(toks) if NUMBER.fullmatch(t)
               and not (toks[i - 1] == "-" and toks[i - 2][-1:] in "eE")]    # not 5e-[4]
    i = numbers[pick % len(numbers)]
    toks[i] = literal
    text = "".join(toks)
    diags = check_bounded(text)
    expected = too_large(literal)
    if expected:
        at = where(text, len("".join(toks[:i])))
        assert (*at, expected) in [(d.line, d.col, d.message) for d in diags]


# (opening text, closing text, levels it adds, levels its condition adds beyond it)
STATEMENT_NESTING = [("{ ", "} ", 1, 0), ("if (true) { ", "} ", 1, 0), ("if (true) ", "", 1, 0),
                     ("for (int q = 0; q < 1; q++) { ", "} ", 1, 1), ("while (false) { ", "} ", 1, 0)]
EXPRESSION_NESTING = [("- ", "", 1), ("relu(", ")", 1), ("(", ")", 0)]


@HOSTILE
@given(st.integers(0, len(SOURCES) - 1),
       st.lists(st.sampled_from(STATEMENT_NESTING), max_size=3), st.integers(0, 1500),
       st.lists(st.sampled_from(EXPRESSION_NESTING), max_size=3), st.integers(0, 1500))
@example(0, [STATEMENT_NESTING[0]], 5000, [], 0)
@example(1, [STATEMENT_NESTING[3]], MAX_NESTING - 1, [], 0)       # exactly at the limit
@example(2, [], 0, [EXPRESSION_NESTING[1]], MAX_NESTING + 1)
def test_deep_nesting_is_a_located_error(which, stmt_pattern, stmt_times, expr_pattern, expr_times):
    stmts, exprs = stmt_pattern * stmt_times, expr_pattern * expr_times
    construct = ("".join(s[0] for s in stmts) + "float q = " + "".join(e[0] for e in exprs)
                 + "1.0" + "".join(e[1] for e in reversed(exprs)) + ";"
                 + "".join(s[1] for s in reversed(stmts)))
    # the depth by the rule in docs/language.md (the construct is at the function's top level)
    depth = sum(s[2] for s in stmts) + sum(e[2] for e in exprs)
    depth = max([depth] + [k + 1 + s[3] for k, s in enumerate(stmts) if s[3]])
    toks = list(TOKENS[which])
    i = after_function_brace(toks)
    toks.insert(i, "\n" + construct + "\n")
    text = "".join(toks)
    line = text.count("\n", 0, len("".join(toks[:i]))) + 2
    diags = check_bounded(text)
    nesting = [d for d in diags if "nest" in d.message]
    if depth > MAX_NESTING:
        assert [(d.line, d.message.split(":")[0]) for d in nesting] == [(line, "nesting too deep")]
    else:
        assert nesting == []


PIECES = ["@", "\u00e9", "\x00", "\t", " ", "w" * 70, "x", "1", "99999999999999999999", "1e999",
          '"', '"s"', "/*", "*/", "//", "{", "}", "(", ")", ";", ",", "+", "- ", "relu(", "&", "|",
          "\u202e", "\\", "int", "v.x", "in_degree", "#"]


@HOSTILE
@given(st.integers(0, len(SOURCES) - 1), st.integers(0, 10 ** 6),
       st.lists(st.sampled_from(PIECES), min_size=1, max_size=6), st.integers(1_000, 200_000))
def test_long_lines_give_short_located_diagnostics(which, pick, pattern, length):
    chunk = "".join(pattern)
    line = (chunk * (length // len(chunk) + 1))[:length]
    lines = SOURCES[which].split("\n")
    at = pick % (len(lines) + 1)
    check_bounded("\n".join(lines[:at] + [line] + lines[at:]))


DECLARATIONS = ["propNode<float> {};", "propEdge<float[4]> {};", "weight<float[4]> {} = zeros;",
                "int {} = 1;", "float {}, ok = 0.5;", "forall ({} in g.nodes()) {{ }}"]


@HOSTILE
@given(st.integers(0, len(SOURCES) - 1), st.sampled_from(sorted(BUILTIN_NAMES)),
       st.sampled_from(DECLARATIONS))
def test_declaring_a_builtin_name_is_one_located_error(which, name, declaration):
    toks = list(TOKENS[which])
    i = after_function_brace(toks)
    toks.insert(i, "\n    " + declaration.format(name) + "\n")
    text = "".join(toks)
    offset = len("".join(toks[:i])) + 5 + declaration.index("{}")
    diags = check_bounded(text)
    assert [(d.line, d.col, d.message) for d in diags] == [
        (*where(text, offset), f"'{name}' is {BUILTIN_NAMES[name]}; choose another name")]


def test_the_command_line_on_hostile_sizes_never_fails_internally(tmp_path):
    head = "function m(Graph g, propNode<float[F]> x, propNode<int[C]> y) {\n"
    cases = {
        "literal": head + "    int n = " + "9" * 20_000 + ";\n}\n",
        "nesting": head + "    " + "if (true) { " * 5000 + "}" * 5000 + "\n}\n",
        "line": head + "    " + "@ \u00e9" * 30_000 + "\n}\n",
        "builtin": head + "    propNode<float> in_degree;\n}\n",
    }
    for name, text in cases.items():
        path = tmp_path / f"{name}.mp"
        path.write_text(text, encoding="utf-8")
        proc = subprocess.run([sys.executable, "-m", "morphgen", "check", str(path)], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, (name, proc.stderr[-2000:])
        assert f"{path}:2:" in proc.stderr and "internal error" not in proc.stderr, name
        assert len(proc.stderr) < 20_000, name

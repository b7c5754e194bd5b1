"""Random token-level mutations of the examples: compile_source returns a Program or raises
CompileError with well-formed diagnostics; it never raises anything else."""
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.frontend.frontend_helpers import EXAMPLES, SAFE_PARAM, assert_well_formed
from morphgen.frontend import CompileError, compile_source
from morphgen.frontend.sema import CPP_KEYWORDS

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

"""Large and deep inputs: checking stays fast, diagnostics stay short and located.

Bounds are generous (a slow CI machine), but each case took minutes or printed megabytes before."""
import time

from morphgen.frontend import check_source
from morphgen.grammar.diagnostics import MAX_RENDERED, render_all

HEAD = "function m(Graph g, propNode<float[F]> x, propNode<int[C]> y) {\n"


def _timed_check(text):
    t0 = time.perf_counter()
    diags = check_source(text, "big.mp")
    return diags, time.perf_counter() - t0


def test_deep_nesting_is_reported_where_it_exceeds_the_limit():
    for opener in ("        {\n", "    if (true) {\n"):
        text = HEAD + "    for (int epoch = 0; epoch < 2; epoch++) {\n" + opener * 5000 + "    }\n" * 5001 + "}\n"
        diags, seconds = _timed_check(text)
        assert seconds < 30
        assert [d.message for d in diags][:1] == ["nesting too deep: more than 200 levels of blocks, "
                                                 "statements and expressions"]
        assert diags[0].line == 202 and diags[0].source_line == opener.rstrip("\n")   # where, not 1:1


def test_a_long_line_of_illegal_characters_is_one_short_diagnostic():
    diags, seconds = _timed_check(HEAD + "    " + "@" * 8700 + "\n}\n")
    assert seconds < 30
    assert len(diags) == 1 and diags[0].message.startswith("8700 illegal characters")
    assert len(render_all(diags)) < 1000


def test_many_errors_print_the_first_ones_then_a_count():
    text = HEAD + "".join(f"    weight<float[F][16]> V{i} = glorot; @\n" for i in range(2000)) + "}\n"
    diags, seconds = _timed_check(text)
    assert seconds < 30 and len(diags) == 2000
    rendered = render_all(diags)
    assert rendered.count("error: illegal character") == MAX_RENDERED
    assert rendered.endswith(f"... and {2000 - MAX_RENDERED} more errors")


def test_checking_time_grows_linearly_with_the_number_of_declarations():
    def declarations(n):
        return HEAD + "".join(f"    weight<float[F][16]> W{i} = glorot;\n" for i in range(n)) + "}\n"
    _, small = _timed_check(declarations(2000))
    _, large = _timed_check(declarations(16000))
    assert large < 30
    assert large < 8 * small * 2.5, (small, large)      # 8x the input: far from 64x (quadratic)

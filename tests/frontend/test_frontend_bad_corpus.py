"""Every program in bad/ fails with exactly the diagnostics its '// expect:' lines name."""
import re

import pytest

from tests.frontend.frontend_helpers import BAD, assert_well_formed
from morphgen.frontend import CompileError, check_file, compile_file

EXPECT = re.compile(r"^// expect: (\d+):(\d+): (.*)$")


def expected(path):
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        m = EXPECT.match(line)
        if m:
            out.append((int(m.group(1)), int(m.group(2)), m.group(3)))
    return out


def test_corpus_is_large_enough():
    assert len(BAD) >= 50
    assert all(expected(p) for p in BAD), [p.name for p in BAD if not expected(p)]


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_bad_program(path):
    diags = check_file(path)
    assert [(d.line, d.col, d.message) for d in diags] == expected(path)
    assert_well_formed(diags, str(path))
    with pytest.raises(CompileError) as info:
        compile_file(path)
    assert info.value.diagnostics == diags


def test_rendering_has_source_line_and_caret():
    path = next(p for p in BAD if p.stem == "name_aggregator_directive")
    with pytest.raises(CompileError) as info:
        compile_file(path)
    lines = str(info.value).split("\n")
    assert lines[0] == f"{path}:7:36: error: unknown aggregator 'Maxx'; did you mean 'Max'?"
    assert lines[1] == '        gnn.forwardPass(0, "SAGE", "Maxx");'
    assert lines[2] == " " * 35 + "^"
    assert lines[1][35] == '"'


def test_all_errors_rendered_in_order():
    path = next(p for p in BAD if p.stem == "flow_several_errors")
    with pytest.raises(CompileError) as info:
        compile_file(path)
    text = str(info.value)
    assert text.count(": error: ") == 2
    assert text.index("'W9'") < text.index("'W8'")

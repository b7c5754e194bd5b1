"""Shared paths and checks for the front-end tests."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.mp"))
BAD = sorted((Path(__file__).parent / "bad").glob("*.mp"))
SAFE_PARAM = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")


def assert_well_formed(diags, filename):
    """Every diagnostic is located inside the file and renders as FILE:LINE:COL: error: MSG."""
    from morphgen.frontend import Diagnostic
    assert diags, "a failing compile must report at least one diagnostic"
    for d in diags:
        assert isinstance(d, Diagnostic)
        assert d.file == filename
        assert isinstance(d.line, int) and d.line >= 1
        assert isinstance(d.col, int) and d.col >= 1
        assert d.message and "\n" not in d.message and "Traceback" not in d.message
        assert d.severity == "error"
        head = d.render().split("\n")[0]
        assert head == f"{filename}:{d.line}:{d.col}: error: {d.message}"

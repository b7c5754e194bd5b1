"""Located diagnostics: ``FILE:LINE:COL: error: MESSAGE`` with the source line and a caret."""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Iterable

from ..errors import UserError


@dataclass(frozen=True)
class Diagnostic:
    file: str
    line: int
    col: int
    message: str
    severity: str = "error"
    source_line: str = ""

    def render(self) -> str:
        head = f"{self.file}:{self.line}:{self.col}: {self.severity}: {self.message}"
        if not self.source_line:
            return head
        # Keep tabs in the caret line so it lines up under the source in any terminal.
        lead = "".join(c if c == "\t" else " " for c in self.source_line[: max(self.col - 1, 0)])
        return f"{head}\n{self.source_line}\n{lead}^"


class CompileError(UserError):
    """A program with errors; ``diagnostics`` lists every one found."""

    def __init__(self, diagnostics: list):
        self.diagnostics = list(diagnostics)
        super().__init__(render_all(self.diagnostics))


def render_all(diagnostics: Iterable[Diagnostic]) -> str:
    return "\n".join(d.render() for d in diagnostics)


def suggest(name: str, candidates: Iterable[str]) -> str:
    """``"; did you mean 'X'?"`` for the closest candidate, or an empty string."""
    best, best_key = None, None
    for cand in sorted(set(candidates)):
        score = difflib.SequenceMatcher(None, name, cand).ratio()
        if score < 0.6:
            continue
        # ties go to the candidate that starts like the misspelling (Wx -> W, not x)
        key = (score, cand[:1] == name[:1], cand[:1].lower() == name[:1].lower())
        if best_key is None or key > best_key:
            best, best_key = cand, key
    return f"; did you mean '{best}'?" if best is not None else ""


def show(text: str, limit: int = 40) -> str:
    """A user string made safe to echo in a message (quoted, escaped, truncated)."""
    shown = text if len(text) <= limit else text[:limit] + "..."
    return "'" + shown.encode("unicode_escape").decode("ascii").replace("'", "\\'") + "'"


class DiagnosticSink:
    """Collects diagnostics for one source file; duplicates (same place and text) collapse,
    which matters because statically unrolled loops visit the same statement many times."""

    def __init__(self, filename: str, text: str):
        self.filename = filename
        self.lines = text.splitlines()
        self.items: list = []
        self._seen: set = set()

    def error(self, coord, message: str) -> None:
        line = getattr(coord, "line", 1) or 1
        col = getattr(coord, "col", 1) or 1
        key = (line, col, message)
        if key in self._seen:
            return
        self._seen.add(key)
        src = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        self.items.append(Diagnostic(self.filename, line, col, message, "error", src))

    def sorted(self) -> list:
        return sorted(self.items, key=lambda d: (d.line, d.col))

    def __bool__(self) -> bool:
        return bool(self.items)

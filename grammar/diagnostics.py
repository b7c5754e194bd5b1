"""Located diagnostics: ``FILE:LINE:COL: error: MESSAGE`` with the source line and a caret."""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Iterable

from ..errors import UserError

# A source line longer than this is shown as a window of it around the caret.
MAX_SHOWN_LINE = 120
# Diagnostics rendered in full; the rest are counted ("and N more errors").
MAX_RENDERED = 20
# A message quoting a megabyte-long name from the source is cut to this many characters.
MAX_MESSAGE = 400


@dataclass(frozen=True)
class Diagnostic:
    file: str
    line: int
    col: int
    message: str
    severity: str = "error"
    source_line: str = ""

    def render(self) -> str:
        head = printable(f"{self.file}:{self.line}:{self.col}: {self.severity}: {self.message}")
        if not self.source_line:
            return head
        # The window first (a line may be megabytes long), then its characters escaped.
        raw, at = _window(self.source_line, max(self.col - 1, 0))
        before = printable(raw[:at])
        text, caret = before + printable(raw[at:]), len(before)
        # Keep tabs in the caret line so it lines up under the source in any terminal.
        lead = "".join(c if c == "\t" else " " for c in text[:caret])
        return f"{head}\n{text}\n{lead}^"


# Characters a terminal acts on instead of showing: control characters (an escape sequence in a
# program could recolour or rewrite the user's terminal) and the bidirectional overrides that make
# source text display in another order than it reads ("Trojan Source").  Tabs stay.
_BIDI = set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f")


def printable(text: str) -> str:
    """``text`` with every control and bidi-override character shown as its escape (\\x1b)."""
    if text.isprintable() and not _BIDI.intersection(text):
        return text
    out = []
    for ch in text:
        code = ord(ch)
        if ch == "\t" or (ch.isprintable() and ch not in _BIDI):
            out.append(ch)
        else:
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
    return "".join(out)


def _window(line: str, caret: int):
    """``line`` cut to at most MAX_SHOWN_LINE characters around index ``caret`` (cuts marked
    with '...'), and the caret's index in the result.  A minified or generated file can have
    lines of megabytes; each diagnostic would print its line whole."""
    if len(line) <= MAX_SHOWN_LINE:
        return line, caret
    width = MAX_SHOWN_LINE - 6                 # room for '...' at both ends
    start = min(max(caret - width // 2, 0), len(line) - width)
    end = start + width
    left = "..." if start > 0 else ""
    right = "..." if end < len(line) else ""
    return left + line[start:end] + right, caret - start + len(left)


class CompileError(UserError):
    """A program with errors; ``diagnostics`` lists every one found."""
    located = True

    def __init__(self, diagnostics: list):
        self.diagnostics = list(diagnostics)
        super().__init__(render_all(self.diagnostics))


def render_all(diagnostics: Iterable[Diagnostic], limit: int = MAX_RENDERED) -> str:
    """The first ``limit`` diagnostics rendered, then how many more there are: a file of
    garbage can produce thousands, and the first ones are the ones worth reading."""
    diagnostics = list(diagnostics)
    out = [d.render() for d in diagnostics[:limit]]
    rest = len(diagnostics) - limit
    if rest > 0:
        out.append(f"... and {rest} more error{'s' if rest != 1 else ''}")
    return "\n".join(out)


def suggest(name: str, candidates: Iterable[str]) -> str:
    """``"; did you mean 'X'?"`` for the closest candidate, or an empty string.  A candidate that
    differs only in case comes first ('gcn' -> 'GCN', which share no character as spelled)."""
    candidates = sorted(set(candidates) - {name})      # never the name that was not found
    same_letters = [cand for cand in candidates if cand.lower() == name.lower() and cand != name]
    if same_letters:
        return f"; did you mean '{same_letters[0]}'?"
    best, best_key = None, None
    for cand in candidates:
        matcher = difflib.SequenceMatcher(None, name, cand)
        # real_quick_ratio() (from the lengths alone) bounds ratio() from above: it skips the
        # full comparison, whose cost grows with the length of a (possibly huge) name.
        if matcher.real_quick_ratio() < 0.6:
            continue
        score = matcher.ratio()
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
        # Lines as the lexer counts them: split at '\n' only (splitlines() also splits at
        # '\f', '\v', '\x1c', '\u2028', ... and would show the wrong source line).
        self.lines = [line.removesuffix("\r") for line in text.split("\n")]
        self.items: list = []
        self._seen: set = set()
        # Where an error in an inlined function comes from: "in 'layer' called at line 30",
        # innermost last; appended to every message reported meanwhile.
        self.context: list = []

    def error(self, coord, message: str) -> None:
        self._add(coord, message, "error")

    def warning(self, coord, message: str) -> None:
        """Something the program does that it probably does not mean; it still compiles."""
        self._add(coord, message, "warning")

    def _add(self, coord, message: str, severity: str) -> None:
        line = getattr(coord, "line", 1) or 1
        col = getattr(coord, "col", 1) or 1
        # one diagnostic per mistake: a function called twice repeats its errors, and only the
        # first call is named
        key = (line, col, message)
        if key in self._seen:
            return
        self._seen.add(key)
        if self.context:
            message += " (" + ", ".join(reversed(self.context)) + ")"
        if len(message) > MAX_MESSAGE:
            message = message[:MAX_MESSAGE] + "..."
        src = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        self.items.append(Diagnostic(self.filename, line, col, message, severity, src))

    def sorted(self) -> list:
        return sorted(self.items, key=lambda d: (d.line, d.col))

    def __bool__(self) -> bool:
        """Whether there are errors (warnings do not stop a compilation)."""
        return any(d.severity == "error" for d in self.items)

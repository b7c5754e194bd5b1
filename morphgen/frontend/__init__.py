"""The .mp language front end: parse, check and lower a program to the IR.

    from morphgen.frontend import compile_file, compile_source, CompileError
    program = compile_file("examples/gcn.mp")          # morphgen.ir.Program (forward + loss)
"""
from __future__ import annotations

import contextlib
import sys

from ..grammar.diagnostics import CompileError, Diagnostic, DiagnosticSink

# Blocks, statements and expressions nest at most this many levels (docs/language.md).  The
# lowering recurses over the tree; the limit bounds how deep, so Python's recursion limit is
# never what stops a program.
MAX_NESTING = 200
# Python frames the lowering may use per level of nesting (at most 4 today), with a margin.
_FRAMES_PER_LEVEL = 8

__all__ = ["compile_file", "compile_source", "check_file", "check_source", "CompileError",
           "Diagnostic"]


def _run(text: str, filename: str):
    from ..grammar.parser import parse
    from ..grammar.ast import too_deep
    from .lower import Lowerer
    sink = DiagnosticSink(filename, text)
    module = parse(text, filename, sink)     # PLY parses with its own stack: any depth is fine
    program = None
    deep = too_deep(module, MAX_NESTING) if module is not None else None
    if deep is not None:
        sink.error(deep.coord, f"nesting too deep: more than {MAX_NESTING} levels of "
                               "blocks, statements and expressions")
    if module is not None and not sink:
        lowerer = Lowerer(sink)
        try:
            with _stack_room(MAX_NESTING * _FRAMES_PER_LEVEL + 500):
                program = lowerer.lower_module(module)
        except RecursionError:
            # A guard only: the nesting limit keeps the lowering well inside the room above.
            sink.error(lowerer.current, "the program is nested too deeply")
        if program is not None and not sink:
            program.fingerprint = program.source_fingerprint()
    elif module is None and not sink:
        sink.error(None, "the file contains no function")
    return (program if not sink else None), sink.sorted()


@contextlib.contextmanager
def _stack_room(frames: int):
    """Let ``frames`` more Python frames fit on the stack, however deep the caller already is
    (the caller may be a test runner or an application several hundred frames deep)."""
    depth, f = 0, sys._getframe()
    while f is not None:
        depth, f = depth + 1, f.f_back
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, depth + frames))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def compile_source(text: str, filename: str = "<string>"):
    """Lower ``text`` to a :class:`morphgen.ir.Program`; raise CompileError listing every error.
    The program's ``warnings`` list what it does that it probably does not mean."""
    program, diagnostics = _run(text, filename)
    if any(d.severity == "error" for d in diagnostics):
        raise CompileError([d for d in diagnostics if d.severity == "error"])
    program.warnings = diagnostics
    return program


def _read(path) -> str:
    try:
        with open(path, encoding="utf-8-sig") as f:      # the byte-order mark some editors write: dropped
            return f.read()
    except UnicodeDecodeError as e:
        raise CompileError([Diagnostic(str(path), 1, 1, f"the file is not valid UTF-8 "
                                                        f"(byte {e.start})")]) from None
    except OSError as e:
        raise CompileError([Diagnostic(str(path), 1, 1, f"cannot read the file: "
                                                        f"{e.strerror or e}")]) from None


def compile_file(path):
    return compile_source(_read(path), str(path))


def check_source(text: str, filename: str = "<string>") -> list:
    """Every diagnostic for ``text``, errors and warnings (empty when there is nothing to say);
    never raises."""
    return _run(text, filename)[1]


def check_file(path) -> list:
    try:
        text = _read(path)
    except CompileError as e:
        return e.diagnostics
    return check_source(text, str(path))

"""The .mp language front end: parse, check and lower a program to the IR.

    from morphgen.frontend import compile_file, compile_source, CompileError
    program = compile_file("examples/gcn.mp")          # morphgen.ir.Program (forward + loss)
"""
from __future__ import annotations

from .diagnostics import CompileError, Diagnostic, DiagnosticSink

__all__ = ["compile_file", "compile_source", "check_file", "check_source", "CompileError",
           "Diagnostic"]


def _run(text: str, filename: str):
    from ..grammar.parser import parse
    from .lower import Lowerer
    sink = DiagnosticSink(filename, text)
    try:
        module = parse(text, filename, sink)
        program = None
        if module is not None and not sink:
            program = Lowerer(sink).lower_module(module)
            if program is not None:
                program.fingerprint = program.source_fingerprint()
        elif module is None and not sink:
            sink.error(None, "the file contains no function")
    except RecursionError:
        sink.error(None, "the program is nested too deeply")
        program = None
    return (program if not sink else None), sink.sorted()


def compile_source(text: str, filename: str = "<string>"):
    """Lower ``text`` to a :class:`morphgen.ir.Program`; raise CompileError listing every error."""
    program, diagnostics = _run(text, filename)
    if diagnostics:
        raise CompileError(diagnostics)
    return program


def _read(path) -> str:
    try:
        with open(path, encoding="utf-8") as f:
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
    """Every diagnostic for ``text`` (empty when the program is correct); never raises."""
    return _run(text, filename)[1]


def check_file(path) -> list:
    try:
        text = _read(path)
    except CompileError as e:
        return e.diagnostics
    return check_source(text, str(path))

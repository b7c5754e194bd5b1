"""Keep METIS's own messages off the user's terminal.

METIS prints diagnostics such as "Cannot bisect a graph with 0 vertices" with C ``printf``,
straight to file descriptor 1, where Python's ``sys.stdout`` redirection cannot reach them.
``captured_c_stdout`` points descriptor 1 at a temporary file for the duration of a call,
flushes C's stdio buffer before restoring it (otherwise a buffered message would surface
later, on the real stdout), and hands back what was written so the caller can put it into
the attempt's note instead.

Descriptor 1 is process-wide: output written by other threads during the call is captured too.
The partitioner calls METIS from one thread, so that is acceptable here.
"""
from __future__ import annotations

import ctypes
import os
import sys
import tempfile
from contextlib import contextmanager

try:
    _LIBC = ctypes.CDLL(None)
except OSError:  # no C library handle on this platform: nothing to flush
    _LIBC = None


def _flush_c_stdio() -> None:
    if _LIBC is not None:
        _LIBC.fflush(None)


class CapturedOutput:
    text: str = ""


@contextmanager
def captured_c_stdout():
    """Capture everything written to file descriptor 1 inside the block; `.text` after it."""
    captured = CapturedOutput()
    try:
        sys.stdout.flush()
    except (AttributeError, ValueError):  # stdout replaced or closed: nothing of ours to flush
        pass
    _flush_c_stdio()
    saved = os.dup(1)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 1)
        try:
            yield captured
        finally:
            _flush_c_stdio()
            os.dup2(saved, 1)
            os.close(saved)
            sink.seek(0)
            captured.text = sink.read().decode("utf-8", "replace").strip()

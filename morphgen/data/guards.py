"""Checks made before a loader opens a path or allocates what a file declares.

A dataset path is opened only when it is a regular file (or, for raw Planetoid, a directory):
reading ``/dev/zero`` never ends and opening a FIFO blocks until a writer appears.  A size that a
file declares (an array shape, a node count) is compared with the memory this process may still
use before anything that large is allocated, so a hostile header is a ``DataError``, not a
``MemoryError`` or the OOM killer.
"""
from __future__ import annotations

import os
import stat
from typing import Optional

from morphgen.data.errors import DataError
from morphgen.resources import available_memory

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISSOCK, "a socket"))



def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a plain file")


def require_file(path, allow_dir: bool = False) -> bool:
    """Refuse a path that is missing or neither a regular file nor (``allow_dir``) a directory.

    Returns True for a directory.  ``os.stat`` follows symbolic links, so a link to a device is
    refused too; nothing is opened here, so a FIFO cannot block.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise DataError(f"{path}: no such file or directory") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror})") from None
    if stat.S_ISREG(mode):
        return False
    if allow_dir and stat.S_ISDIR(mode):
        return True
    expected = "a regular file or a directory" if allow_dir else "a regular file"
    raise DataError(f"{path}: not {expected} ({_kind(mode)})")


def require_dir(path) -> None:
    """Refuse a path that is not a directory (raw Planetoid sets are directories)."""
    if not require_file(path, allow_dir=True):
        raise DataError(f"{path}: not a directory (a regular file); raw Planetoid data is a "
                        f"directory of ind.<name>.* files")


def memory_limit() -> Optional[int]:
    """Bytes this process may still allocate (morphgen.resources): None when the system does
    not say, and then no size is refused for memory.  Read at each call: it changes as we run."""
    return available_memory()


def require_memory(nbytes: int, what: str) -> None:
    """Refuse to allocate ``nbytes`` beyond ``memory_limit()``: a ``DataError`` reading
    ``{what} needs N bytes, more than the M bytes of memory available``."""
    limit = memory_limit()
    if limit is not None and nbytes > limit:
        raise DataError(f"{what} needs {human_bytes(nbytes)}, more than the {human_bytes(limit)} of "
                        f"memory available")


def human_bytes(n: int) -> str:
    """``800000000000 bytes (745.1 GiB)``: the exact count, plus a readable size when large."""
    scaled, unit = float(n), "bytes"
    for larger in ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if scaled < 1024:
            break
        scaled, unit = scaled / 1024, larger
    return f"{n} bytes" if unit == "bytes" else f"{n} bytes ({scaled:.1f} {unit})"

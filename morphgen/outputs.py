"""Files and folders the user names for morphgen to write (--json, --checkpoint, -o, --out).

They are checked before any work starts, so that a run never ends by destroying something the
user had: morphgen replaces only what an earlier morphgen run wrote there (its reports,
checkpoints, compiled programs and part files), never the run's own inputs, never a file it does
not recognise, and never a device, pipe or socket.  A symbolic link is written through: the link
stays and its target receives the output.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Callable, Iterable, Optional

from .errors import UserError

# JSON reports carry this key, so that a later run recognises them as its own to replace.
REPORT_MARK = "written_by"
CHECKPOINT_MAGIC = b"MGCKPT"


def _head(path: Path, size: int) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(size)
    except OSError:
        return b""


def is_checkpoint(path: Path) -> bool:
    return _head(path, len(CHECKPOINT_MAGIC)) == CHECKPOINT_MAGIC


def _checkpoint_header(path) -> Optional[tuple]:
    """(epochs trained, seed or None) from a checkpoint's header: the magic and format ("03", or
    "02" before checkpoints recorded the seed), the program's fingerprint, the epoch counter as a
    little-endian int64, then (03) the run's seed as a uint64.  None for a file that is not a
    checkpoint of these formats (loading it says what is wrong)."""
    head = _head(Path(path), 32)
    if len(head) >= 32 and head[:8] == CHECKPOINT_MAGIC + b"03":
        return int.from_bytes(head[16:24], "little", signed=True), int.from_bytes(head[24:32], "little")
    if len(head) >= 24 and head[:8] == CHECKPOINT_MAGIC + b"02":
        return int.from_bytes(head[16:24], "little", signed=True), None
    return None


def checkpoint_epochs(path) -> Optional[int]:
    """The epochs a checkpoint had trained when it was written, or None (`_checkpoint_header`)."""
    header = _checkpoint_header(path)
    return header[0] if header else None


def checkpoint_seed(path) -> Optional[int]:
    """The seed of the run that wrote a checkpoint, or None where its format predates the record."""
    header = _checkpoint_header(path)
    return header[1] if header else None


def is_report(path: Path) -> bool:
    """A JSON report of morphgen: marked, or with the fields every train/partition report had
    before reports were marked."""
    if path.stat().st_size > 512 * 2**20:
        return False
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    if not isinstance(document, dict):
        return False
    mark = document.get(REPORT_MARK)
    if isinstance(mark, str) and mark.startswith("morphgen"):
        return True
    return {"model", "backend", "dataset", "history"} <= document.keys() or \
        {"dataset", "num_nodes", "num_edges", "comparison"} <= document.keys()


def marked(report: dict) -> dict:
    """`report` with the mark that lets later runs replace it."""
    from . import __version__
    return {REPORT_MARK: f"morphgen {__version__}", **report}


def _fail(flag: str, path, why: str) -> None:
    raise UserError(f"morphgen: error: {flag} {path}: {why}")


def check_output_file(flag: str, target, recognise: Callable[[Path], bool], kind: str,
                      inputs: Iterable = (), reusable_inputs: Iterable = (), writable_now: bool = True) -> None:
    """Refuse `target` (nothing to check when None) as a file to write: through its symbolic links,
    what write_atomically would replace.

    ``recognise``: whether an existing file is an earlier output of this kind (``kind`` names it
    in the error).  ``inputs``: (description, path) pairs of what the run reads, never written
    over; ``reusable_inputs``: inputs that are also this output (a checkpoint resumed from and
    saved again).  ``writable_now=False``: the file is written later, elsewhere (a batch job's),
    so its folder need not exist yet.
    """
    if target is None:
        return
    path = Path(target)
    if str(target) == "":
        _fail(flag, "''", "give a file name")
    real = Path(os.path.realpath(path))
    if real.is_dir():
        _fail(flag, path, "is a directory; give a file name")
    if real.exists():
        if not real.is_file():
            _fail(flag, path, "is not a regular file (a device, pipe or socket); give a file name")
        reused = any(_same(real, other) for other in reusable_inputs if other)
        for what, other in inputs:
            if other and not reused and _same(real, other):
                _fail(flag, path, f"is {what}; writing there would destroy it (give another file name)")
        if real.stat().st_size > 0 and not reused and not recognise(real):
            _fail(flag, path, f"exists and is not a morphgen {kind}; remove it or give another file name "
                              f"(morphgen replaces only its own earlier outputs)")
    folder = real.parent
    if writable_now and not _can_create_in(folder):
        _fail(flag, path, f"the folder {folder} does not exist or is not writable")


def check_distinct(named: Iterable) -> None:
    """(flag, path) pairs of one run's outputs: no two may name the same file."""
    seen = {}
    for flag, path in named:
        if path is None:
            continue
        key = os.path.realpath(path)
        if key in seen:
            raise UserError(f"morphgen: error: {seen[key]} and {flag} both name {path}; one would overwrite "
                            f"the other (give two file names)")
        seen[key] = flag


def check_output_folder(flag: str, target, writes: Iterable[str], recognise: Callable[[Path], bool],
                        kind: str) -> Optional[Path]:
    """A folder to write the files named `writes` into: new, or one where none of them exists
    yet, or an earlier output of this kind (``recognise``), whose files are replaced."""
    if target is None:
        return None
    path = Path(target)
    if path.exists() and not path.is_dir():
        _fail(flag, path, "exists and is not a folder; give a folder name")
    if path.is_dir():
        clashes = sorted(name for name in writes if (path / name).exists())
        if clashes and not recognise(path):
            _fail(flag, path, f"holds {', '.join(clashes[:3])}{' ...' if len(clashes) > 3 else ''}, which morphgen "
                              f"did not write; give a new or empty folder (morphgen replaces only its own "
                              f"earlier {kind})")
        if not _can_create_in(path):
            _fail(flag, path, "the folder is not writable")
    else:
        parent = path.absolute().parent
        while not parent.exists():
            parent = parent.parent
        if not _can_create_in(parent):
            _fail(flag, path, f"cannot be created: {parent} is not a writable folder")
    return path


def _can_create_in(folder: Path) -> bool:
    """Whether a file can be created in `folder`, found by creating one: os.access says yes to
    root everywhere, also where nothing can be created (/proc, a read-only mount)."""
    if not folder.is_dir():
        return False
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".morphgen-probe-"):
            return True
    except OSError:
        return False


def write_atomically(path: Path, text) -> None:
    """Write `text` (str or bytes) to a temporary file beside `path`, then rename it into place: an interrupted
    write never leaves a half file, and what was at `path` stays until the new one is complete.
    A symbolic link stays one: its target is replaced."""
    path = Path(os.path.realpath(path))
    tmp = path.with_name(f".{path.name}.partial-{os.getpid()}")
    try:
        tmp.write_bytes(text if isinstance(text, bytes) else text.encode())
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise UserError(f"morphgen: error: cannot write {path}: {err.strerror or err}") from err


def _same(a: Path, b) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False

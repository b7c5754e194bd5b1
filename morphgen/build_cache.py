"""morphgen's on-disk cache kept within a size: least recently used entries go first.

Every program, backend, ISA and flag set builds a library of its own (build/<digest>/, about
2 MB), and every version of the op layer an object (objects/) and a precompiled header (pch/,
about 50 MB). Nothing removed them, so a cache grew with every program ever compiled. Now:

- a cache hit marks its entry used (the entry folder's modification time);
- after a new library (at most once a minute), if build/, objects/ and pch/ together exceed the limit
  ($MORPHGEN_CACHE_MAX_GB, default 5; 0: no limit), the least recently used entries are removed
  until they fit, except those used in the last RECENT_S seconds (a concurrent build may be
  linking them) and folders in the making (.tmp-*);
- `morphgen cache` shows the sizes, `morphgen cache trim` applies the limit now, `morphgen cache
  clean` removes every entry (with --all also the MPI partitions and the calibration).

An entry is removed as a stale one is (`discard`): renamed aside in one step, then deleted, so a
process that has the library loaded keeps its inode and another never sees half an entry.
Removing an entry only costs its rebuild.
"""
from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import UserError

MAX_ENV = "MORPHGEN_CACHE_MAX_GB"
DEFAULT_MAX_GB = 5.0
# The sections the limit applies to: rebuilt on demand, keyed by their contents.
TRIMMED = ("build", "objects", "pch")
# What `cache clean --all` removes besides: the MPI partitions (keyed by graph and rank count, read
# by running jobs, so never trimmed behind their back) and the measured machine figures.
KEPT = ("parts",)
MEASUREMENTS = ("calibration.json", "halo_bandwidth.json")
RECENT_S = 600.0
TRIM_EVERY_S = 60.0
_NAMES = {"build": "libraries", "objects": "op-layer objects", "pch": "precompiled headers",
          "parts": "MPI partitions"}


@dataclass
class Entry:
    path: Path
    bytes: int
    used: float          # the entry folder's modification time: its last build or hit


def max_bytes() -> int | None:
    """The limit in bytes from $MORPHGEN_CACHE_MAX_GB, None for no limit."""
    raw = os.environ.get(MAX_ENV)
    if raw is None or raw.strip() == "":
        return int(DEFAULT_MAX_GB * 2**30)
    try:
        gb = float(raw)
    except ValueError:
        gb = -1.0
    if not gb >= 0 or gb == float("inf"):
        raise UserError(f"${MAX_ENV}: expected a size in GiB (0 for no limit), got {raw!r}")
    return None if gb == 0 else int(gb * 2**30)


def mark_used(entry: Path) -> None:
    """Note a cache hit on `entry` (a folder of one of the sections)."""
    try:
        os.utime(entry)
    except OSError:
        pass            # a read-only cache: it is never trimmed by us either


def discard(entry: Path) -> None:
    """Remove a cache entry; a loader still holding it keeps its inode."""
    if not entry.exists() and not entry.is_symlink():
        return
    trash = entry.with_name(f".discard-{entry.name}-{os.getpid()}")
    try:
        os.rename(entry, trash)
    except OSError:
        return          # not ours to remove (read-only cache): the caller builds elsewhere
    if trash.is_symlink() or trash.is_file():
        trash.unlink(missing_ok=True)
    else:
        shutil.rmtree(trash, ignore_errors=True)


def _size(path: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass    # removed meanwhile
    return total


def entries(root: Path, section: str) -> list[Entry]:
    """The finished entries of one section (folders in the making or being removed left out)."""
    out = []
    try:
        children = list(os.scandir(root / section))
    except OSError:
        return out
    for child in children:
        if child.name.startswith("."):
            continue
        try:
            used = child.stat(follow_symlinks=False).st_mtime
        except OSError:
            continue
        path = Path(child.path)
        out.append(Entry(path, _size(path) if child.is_dir(follow_symlinks=False) else 0, used))
    return out


def held_bytes(root: Path) -> int:
    """What the sections the limit applies to hold."""
    return sum(e.bytes for section in TRIMMED for e in entries(root, section))


def trim(root: Path, limit: int | None = None, now: float | None = None) -> tuple[int, int]:
    """Remove the least recently used entries of TRIMMED until they hold at most `limit` bytes
    (default max_bytes()), keeping those used in the last RECENT_S seconds. Returns (entries
    removed, bytes freed)."""
    limit = max_bytes() if limit is None else limit
    if limit is None:
        return 0, 0
    now = time.time() if now is None else now
    found = [e for section in TRIMMED for e in entries(root, section)]
    total = sum(e.bytes for e in found)
    removed = freed = 0
    for e in sorted(found, key=lambda e: e.used):
        if total <= limit:
            break
        if now - e.used < RECENT_S:
            break                       # everything after it is more recent still
        discard(e.path)
        total -= e.bytes
        removed, freed = removed + 1, freed + e.bytes
    return removed, freed


def trim_after_build(root: Path, now: float | None = None) -> None:
    """trim(root) after a new entry, at most once every TRIM_EVERY_S seconds (a stamp file's
    time: walking a large cache after each of a test suite's builds would cost more than the
    builds), never failing the build that triggered it."""
    now = time.time() if now is None else now
    stamp = root / ".trimmed"
    try:
        if now - stamp.stat().st_mtime < TRIM_EVERY_S:
            return
    except OSError:
        pass            # never trimmed yet
    try:
        stamp.touch()
        os.utime(stamp, (now, now))
        trim(root, now=now)
    except (OSError, UserError):
        pass            # a bad limit is reported by `morphgen cache`; the build itself succeeded


def clean(root: Path, everything: bool = False) -> tuple[int, int]:
    """Remove every entry of TRIMMED (with `everything`, the partitions and measurements too).
    Returns (entries removed, bytes freed)."""
    removed = freed = 0
    for section in TRIMMED + (KEPT if everything else ()):
        for e in entries(root, section):
            discard(e.path)
            removed, freed = removed + 1, freed + e.bytes
    if everything:
        for name in MEASUREMENTS:
            path = root / name
            if path.is_file():
                freed += path.stat().st_size
                path.unlink(missing_ok=True)
                removed += 1
    return removed, freed


def human_bytes(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def add_parser(sub) -> None:
    p = sub.add_parser("cache", help="show the build cache's size, trim it to its limit, or clean it",
                       description="morphgen keeps every library it builds (and the op layer's objects and "
                                   "precompiled headers) in its cache, $MORPHGEN_CACHE or ~/.cache/morphgen. "
                                   f"After a new library (at most once a minute) the least recently used entries beyond "
                                   f"${MAX_ENV} GiB (default {DEFAULT_MAX_GB:g}; 0: no limit) are removed.")
    p.add_argument("action", nargs="?", choices=("info", "trim", "clean"), default="info",
                   help="info (default): sizes and the limit; trim: apply the limit now; clean: remove every "
                        "library, object and precompiled header")
    p.add_argument("--all", action="store_true",
                   help="with clean: also the MPI partitions and this machine's measured figures (calibration)")
    p.set_defaults(handler=run)


def run(args) -> int:
    from .toolchain import cache_root
    root = cache_root()
    if args.all and args.action != "clean":
        raise UserError("--all goes with `morphgen cache clean`")
    if args.action == "trim":
        removed, freed = trim(root, now=time.time())
        print(f"morphgen cache: removed {removed} entries, {human_bytes(freed)}")
    elif args.action == "clean":
        removed, freed = clean(root, everything=args.all)
        print(f"morphgen cache: removed {removed} entries, {human_bytes(freed)}")
    limit = max_bytes()
    print(f"cache {root}" + (" ($MORPHGEN_CACHE)" if os.environ.get("MORPHGEN_CACHE") else ""))
    sizes = {}
    for section in TRIMMED + KEPT:
        found = entries(root, section)
        sizes[section] = sum(e.bytes for e in found)
        print(f"  {_NAMES[section]:<20} {len(found):>7} entries  {human_bytes(sizes[section]):>10}")
    print(f"  limit {human_bytes(limit) if limit is not None else 'none'} (${MAX_ENV}) on the first three, "
          f"{human_bytes(sum(sizes[s] for s in TRIMMED))} now; the least recently used go first, after a new library")
    return 0

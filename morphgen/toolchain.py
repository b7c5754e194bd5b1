"""Build C++ sources into a cached shared library.

One entry point, `compile_shared`, turns a dict of C++ files into a loadable `.so` built with
g++ (OpenMP, -march=native) against the BLAS that ships with the `scipy-openblas32` wheel. Builds
are cached by a hash of everything that can change the binary: the sources, the flags, the kernel
headers and extra include directories, the compiler version and the host CPU's instruction set.

Concurrency: every build runs in a private temporary directory next to the cache entry and is moved
into place with one atomic `os.rename`. Two processes racing on the same entry both compile; the
loser discards its copy and returns the winner's, so a returned path never changes under a loader.

Trust: a complete build writes the SHA-256 of its library next to it, and an entry is loaded only
when the library still hashes to it. A truncated, emptied, replaced or half-deleted entry is thrown
away and rebuilt. An interrupted build removes its temporary directory. When the cache cannot be
written (read-only, full, not ours) the build goes to a private directory instead, with a note.
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterable, Mapping

from .build_cache import discard as _discard, mark_used, trim_after_build
from .errors import InternalError, UserError

__all__ = [
    "BuildError",
    "compile_shared",
    "openblas_flags",
    "kernel_include_dir",
    "asan_runtime_path",
    "cache_root",
    "compiler",
]

# -Werror=overflow: a size product that wraps in `int` must fail the build, not allocate too little.
# -fno-math-errno: sqrt and friends never set errno (nothing reads it), so loops calling them
# vectorise; the results are the same IEEE values (Adam's step ran 2.9x faster with it).
# -fno-trapping-math: nothing enables floating-point traps, so g++ may vectorise std::floor and
# if-convert float selects; without it every loop through vexp (ELU, softmax, exp) stayed scalar.
# The values are the same; only the exception flags, which nothing reads, may differ.
BASE_FLAGS = ("-march=native", "-fopenmp", "-fPIC", "-shared", "-std=c++17", "-Werror=overflow", "-fno-math-errno",
              "-fno-trapping-math")
OPT_FLAGS = ("-O3",)
OPT_LEVEL_ENV = "MORPHGEN_OPT_LEVEL"     # 0-3: a faster build of slower code (the test suite's parity runs)
# -O0: half the build time of -O1, and no access is optimised away from the sanitizers' view.
SANITIZE_FLAGS = ("-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-O0")
COMPILED_SUFFIXES = (".cpp", ".cc", ".cxx", ".cu")
CHECKSUM_SUFFIX = ".sha256"   # next to each cached library: its SHA-256, written after a complete build
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
# How many lines of compiler diagnostics a BuildError carries; the full log stays in the build dir.
_ERROR_LINES = 12


class BuildError(InternalError):
    """A C++ build failed. `build_dir` holds the sources and `build.log` for inspection."""

    def __init__(self, message: str, build_dir: Path | None = None, log: str = ""):
        super().__init__(message)
        self.build_dir = build_dir
        self.log = log


def compiler() -> str:
    """The C++ compiler driver (override with $MORPHGEN_CXX)."""
    return os.environ.get("MORPHGEN_CXX", "g++")


def cache_root() -> Path:
    """Root of morphgen's on-disk cache: $MORPHGEN_CACHE, else ~/.cache/morphgen."""
    env = os.environ.get("MORPHGEN_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "morphgen"


def kernel_include_dir() -> Path:
    """Directory holding the OpenMP kernel headers (backends/openmp/kernels)."""
    import morphgen.backends.openmp as openmp_pkg

    return Path(openmp_pkg.__file__).resolve().parent / "kernels"


def runtime_include_dir() -> Path:
    """Directory holding the headers every backend shares (runtime/: the ABI, op_types.h)."""
    import morphgen.runtime as runtime_pkg

    return Path(runtime_pkg.__file__).resolve().parent


@functools.lru_cache(maxsize=None)
def _openblas_paths() -> tuple[str, str, str]:
    try:
        import scipy_openblas32
    except ImportError as exc:  # pragma: no cover - dependency declared in pyproject
        raise BuildError("scipy-openblas32 is not installed; `pip install scipy-openblas32`") from exc
    return (
        scipy_openblas32.get_include_dir(),
        scipy_openblas32.get_lib_dir(),
        scipy_openblas32.get_library(),
    )


@functools.lru_cache(maxsize=None)
def _openblas_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("scipy-openblas32")
    except PackageNotFoundError:  # pragma: no cover - imported above, so it is installed
        return "unknown"


def optimisation_flags() -> tuple:
    """-O3, or the level $MORPHGEN_OPT_LEVEL names: -O0 builds in a fifth of the time, which
    suits runs whose numbers matter and whose speed does not (tests comparing two backends)."""
    level = os.environ.get(OPT_LEVEL_ENV, "").strip()
    if not level:
        return OPT_FLAGS
    if level not in ("0", "1", "2", "3"):
        raise UserError(f"morphgen: error: ${OPT_LEVEL_ENV} is {level!r}; it takes 0, 1, 2 or 3")
    return (f"-O{level}",)


ISA_ENV = "MORPHGEN_ISA"
# What each value of $MORPHGEN_ISA adds to -march=native.  avx2 turns AVX-512 off for the whole
# build (simd.h's 8-lane kernels and g++'s own vectorisation alike), so an AVX-512 machine can
# measure the code an AVX2-only CPU runs; portable builds the scalar kernels.
ISA_FLAGS = {"native": (), "avx2": ("-mno-avx512f",), "portable": ("-DMG_NO_SIMD",)}


def isa_flags() -> tuple:
    """The flags of the vector ISA $MORPHGEN_ISA asks for (native, the default: all this CPU has)."""
    isa = os.environ.get(ISA_ENV, "").strip() or "native"
    if isa not in ISA_FLAGS:
        raise UserError(f"morphgen: error: ${ISA_ENV} is {isa!r}; it takes {', '.join(ISA_FLAGS)}")
    if isa == "avx2" and not {"avx2", "fma"} <= cpu_flags():
        raise UserError(f"morphgen: error: ${ISA_ENV}=avx2, but this CPU has no AVX2 and FMA")
    return ISA_FLAGS[isa]


def cpu_flags() -> set:
    """The CPU's feature flags as /proc/cpuinfo lists them (empty where it cannot be read)."""
    for line in _cpu_identity().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def openblas_flags() -> list[str]:
    """Compile + link flags for scipy-openblas32 (symbols carry the `scipy_` prefix)."""
    inc, libdir, lib = _openblas_paths()
    return [f"-I{inc}", f"-L{libdir}", f"-l{lib}", f"-Wl,-rpath,{libdir}"]


@functools.lru_cache(maxsize=None)
def _compiler_identity(cxx: str) -> str:
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise BuildError(f"C++ compiler {cxx!r} is not usable: {exc}") from exc
    return out.stdout.strip()


@functools.lru_cache(maxsize=None)
def _cpu_identity() -> str:
    # -march=native output depends on the host ISA; a cache shared between machines must not mix them.
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return "unknown-cpu"
    keep = [ln for ln in text.splitlines() if ln.startswith(("model name", "flags"))][:2]
    return "\n".join(keep)


def asan_runtime_path() -> Path:
    """Path of libasan.so for LD_PRELOAD when loading a sanitize=True library into Python."""
    out = subprocess.run(
        [compiler(), "-print-file-name=libasan.so"], capture_output=True, text=True, check=True
    ).stdout.strip()
    path = Path(out)
    if not path.is_absolute() or not path.exists():
        raise BuildError(f"the compiler {compiler()!r} has no AddressSanitizer runtime (got {out!r})")
    return path.resolve()


_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"]+)[>"]', re.MULTILINE)


def _dependency_digest(sources: Mapping[str, str], inc_dirs: list[Path], h: "hashlib._Hash") -> None:
    """Hash every header the sources reach through the include path (transitively).

    Only headers that resolve inside `inc_dirs` are hashed: system and compiler headers are
    covered by the compiler identity, BLAS headers by the scipy-openblas32 version. Hashing only
    what is reached keeps an unrelated edit in a shared include dir from invalidating the cache.
    """
    seen: set[Path] = set()
    # (text, folder of the file it came from): a quoted include resolves next to its file first,
    # as the compiler resolves it, then along the include path.
    pending = [(text, None) for _, text in sorted(sources.items())]
    while pending:
        text, here = pending.pop()
        for target in _INCLUDE.findall(text):
            if here is None and target in sources:
                continue  # a file of this build: already hashed as a source
            for d in ([here] if here is not None else []) + list(inc_dirs):
                cand = d / target
                if cand.is_file():
                    cand = cand.resolve()
                    if cand not in seen:
                        seen.add(cand)
                        body = cand.read_text(errors="replace")
                        h.update(str(cand).encode() + b"\0" + body.encode() + b"\0")
                        pending.append((body, cand.parent))
                    break


def _validate(sources: Mapping[str, str], name: str) -> None:
    if not isinstance(sources, Mapping) or not sources:
        raise BuildError("compile_shared: `sources` must be a non-empty dict of filename -> C++ text")
    if not isinstance(name, str) or not _SAFE_NAME.match(name):
        raise BuildError(f"compile_shared: `name` {name!r} must be letters, digits, '_', '.', '-'")
    for fname, text in sources.items():
        if not isinstance(fname, str) or not _SAFE_NAME.match(fname) or ".." in fname:
            raise BuildError(f"compile_shared: source filename {fname!r} must be a plain file name")
        if not isinstance(text, str):
            raise BuildError(f"compile_shared: source {fname!r} must be a str, got {type(text).__name__}")
    if not any(f.endswith(COMPILED_SUFFIXES) for f in sources):
        raise BuildError(
            f"compile_shared: no translation unit among {sorted(sources)}; "
            f"need a file ending in one of {COMPILED_SUFFIXES}"
        )


def _first_errors(log: str) -> str:
    lines = log.splitlines()
    errs = [i for i, ln in enumerate(lines) if "error" in ln.lower()]
    start = max(errs[0] - 2, 0) if errs else 0
    return "\n".join(lines[start : start + _ERROR_LINES])


def compile_shared(
    sources: Mapping[str, str],
    name: str = "module",
    include_dirs: Iterable[str | os.PathLike] = (),
    flags: Iterable[str] = (),
    sanitize: bool = False,
    cache_dir: str | os.PathLike | None = None,
    cxx: str | None = None,
    base_flags: Iterable[str] | None = None,
    link_flags: Iterable[str] | None = None,
    kernel_headers: bool = True,
    precompiled_header: str | None = None,
    prebuilt_units: Iterable[str] = (),
) -> Path:
    """Build `sources` into lib<name>.so and return its path (cached; safe under concurrency).

    sources: file name -> C++ text; files ending in .cpp/.cc/.cxx are compiled, others (headers)
    are only written next to them. The kernel headers and scipy-openblas32 are on the include path.
    sanitize=True builds with AddressSanitizer + UBSan (load it with LD_PRELOAD=asan_runtime_path()).
    cache_dir overrides the build cache directory (default: cache_root()/build).
    cxx overrides the compiler driver (a backend's own, e.g. mpicxx; default compiler()).
    base_flags / link_flags replace the host compiler's flags / the BLAS link line (a driver
    with other options, e.g. nvcc); both are part of the cache key.  kernel_headers=False leaves
    the OpenMP kernel folder off the include path (a backend with kernels of its own).
    precompiled_header names a header on the include path that every compiled source includes
    (a backend's op layer): it is parsed once per compiler and flags, and builds read it
    precompiled (`_precompiled_header_flags`).  It changes how long a build takes, not what it
    builds, so it is not part of the cache key.
    prebuilt_units names sources on the include path (a backend's op layer, ops.cpp) compiled once
    per compiler and flags into objects that this library links (`_prebuilt_objects`): the code
    they instantiate is compiled once, not again for every program.  Their contents are part of
    the cache key; the library is linked with --no-undefined, so a declaration they do not
    define fails the build instead of the load.
    """
    _validate(sources, name)
    cxx = cxx or compiler()
    inc_dirs = ([kernel_include_dir()] if kernel_headers else []) + [runtime_include_dir()] + [
        Path(d).resolve() for d in include_dirs]
    opt = SANITIZE_FLAGS if sanitize else optimisation_flags()
    user_flags = [str(f) for f in flags]
    base = BASE_FLAGS + isa_flags() if base_flags is None else tuple(base_flags)
    blas = openblas_flags() if link_flags is None else list(link_flags)

    h = hashlib.sha256()
    for part in (cxx, _compiler_identity(cxx), _cpu_identity(), _openblas_version(), name, *base, *opt, *user_flags, *blas):
        h.update(part.encode())
        h.update(b"\0")
    for fname in sorted(sources):
        h.update(fname.encode() + b"\0" + sources[fname].encode() + b"\0")
    _dependency_digest(sources, inc_dirs, h)
    root = Path(cache_dir).expanduser() if cache_dir is not None else cache_root() / "build"
    units = _prebuilt_entries(tuple(prebuilt_units), cxx, [*base, *opt, *user_flags], inc_dirs, blas,
                              root.parent / "objects")
    for _, obj in units:
        h.update(obj.parent.name.encode() + b"\0")     # the object's folder is named by its contents
    digest = h.hexdigest()[:24]

    so_name = f"lib{name}.so"
    final_so = root / digest / so_name
    if _verified(final_so):
        mark_used(root / digest)
        return final_so
    _discard(root / digest)          # missing, partial or tampered: rebuild it

    try:
        root.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".tmp-{digest}-", dir=root))
    except OSError as exc:
        root = _private_build_dir(root, exc)
        final_so = root / digest / so_name
        if _verified(final_so):
            return final_so
        _discard(root / digest)
        work = Path(tempfile.mkdtemp(prefix=f".tmp-{digest}-", dir=root))
    if precompiled_header is not None:
        user_flags = _precompiled_header_flags(precompiled_header, cxx, [*base, *opt, *user_flags], inc_dirs,
                                               blas, root.parent / "pch") + user_flags
    try:
        objects = _prebuilt_objects(units, cxx, [*base, *opt, *user_flags], inc_dirs, blas)
        _build(work, sources, so_name, name, cxx, base, opt, user_flags, inc_dirs, blas, root, digest, objects)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)   # Ctrl-C or a crash: leave no debris in the cache
        raise
    try:
        os.rename(work, root / digest)
    except OSError:
        if _verified(final_so):
            # Another process finished the same build first; its copy is identical, use it.
            shutil.rmtree(work, ignore_errors=True)
        else:
            return work / so_name   # the slot holds something we cannot replace: use our own build
    if root == cache_root() / "build":  # a new entry in the cache: what is least used beyond its limit goes
        trim_after_build(cache_root())
    return final_so


def _build(work: Path, sources, so_name, name, cxx, base, opt, user_flags, inc_dirs, blas, root, digest,
           objects=()) -> None:
    """Compile `sources` (and link `objects`) into work/so_name and stamp it with its checksum, or
    raise BuildError."""
    for fname, text in sources.items():
        (work / fname).write_text(text)
    units = [fname for fname in sorted(sources) if fname.endswith(COMPILED_SUFFIXES)]
    cmd = [
        cxx, *base, *opt, *user_flags,
        *(f"-I{d}" for d in inc_dirs),
        *units, *map(str, objects), "-o", so_name, *blas,
    ] + (["-Wl,--no-undefined"] if objects else [])
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
    log = "$ " + " ".join(cmd) + "\n" + proc.stdout + proc.stderr
    (work / "build.log").write_text(log)
    if proc.returncode != 0 or not (work / so_name).exists():
        # Keep the failed directory under a stable, recognisable name for inspection.
        kept = root / f"failed-{digest}"
        shutil.rmtree(kept, ignore_errors=True)
        try:
            shutil.copytree(work, kept)
        except OSError:
            kept = None
        raise BuildError(
            f"C++ build of {name!r} failed (exit {proc.returncode})"
            + (f"; sources and build.log kept in {kept}" if kept else "")
            + f"\n{_first_errors(proc.stderr or proc.stdout)}",
            build_dir=kept,
            log=log,
        )
    # Written last: an entry without a matching stamp is an incomplete build.
    (work / (so_name + CHECKSUM_SUFFIX)).write_text(_file_digest(work / so_name) + "\n")


def _precompiled_header_flags(header: str, cxx: str, flags: list, inc_dirs: list, blas: list, root: Path) -> list:
    """Flags that make a build read `header` precompiled, or [] when that cannot be had.

    The precompiled header is built once per compiler, flags and header contents (everything it
    includes from the include path) into root/<digest>/, next to a link to the header itself: a
    source's own `#include "header"` then finds the real file, already included.  The compiler
    checks that a precompiled header matches the build's options and reads the header as text
    when it does not, so a stale or foreign one costs time, never correctness.  A header that does
    not precompile is left alone: the build parses it as before.
    """
    path = _on_include_path(header, inc_dirs)
    if path is None:
        return []
    h = hashlib.sha256()
    for part in (cxx, _compiler_identity(cxx), _cpu_identity(), str(path.resolve()), *flags, *blas):
        h.update(part.encode() + b"\0")
    _dependency_digest({"pch.cpp": f'#include "{header}"\n'}, inc_dirs, h)
    entry = root / h.hexdigest()[:24]
    use = [f"-I{entry}", "-include", header, "-Winvalid-pch"]
    if (entry / f"{header}.gch").is_file():
        mark_used(entry)
        return use
    try:
        root.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".tmp-pch-", dir=root))
    except OSError:
        return []
    cmd = [cxx, *flags, *(f"-I{d}" for d in inc_dirs), *[f for f in blas if f.startswith("-I")],
           "-x", "c++-header", str(path.resolve()), "-o", str(work / f"{header}.gch")]
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
    if proc.returncode != 0:
        shutil.rmtree(work, ignore_errors=True)
        return []
    (work / header).symlink_to(path.resolve())
    try:
        os.rename(work, entry)
    except OSError:
        shutil.rmtree(work, ignore_errors=True)     # another build made the same entry first
    return use if (entry / f"{header}.gch").is_file() else []


def _on_include_path(name: str, inc_dirs: list) -> Path | None:
    """The file `name` in the first include directory that has it, or None."""
    return next((Path(d) / name for d in inc_dirs if (Path(d) / name).is_file()), None)


def _prebuilt_entries(units: tuple, cxx: str, flags: list, inc_dirs: list, blas: list, root: Path) -> list:
    """(source, object) of each unit on the include path, the object in root/<digest>/ where the
    digest covers the compiler, the flags and everything the unit includes; or BuildError."""
    entries = []
    for unit in units:
        path = _on_include_path(unit, inc_dirs)
        if path is None:
            raise BuildError(f"compile_shared: prebuilt unit {unit!r} is not on the include path")
        text = path.read_text()
        h = hashlib.sha256()
        for part in (cxx, _compiler_identity(cxx), _cpu_identity(), _openblas_version(), unit, text, *flags, *blas):
            h.update(part.encode() + b"\0")
        _dependency_digest({unit: text}, [path.parent, *inc_dirs], h)
        entries.append((path, root / h.hexdigest()[:24] / (Path(unit).stem + ".o")))
    return entries


def _prebuilt_objects(entries: list, cxx: str, flags: list, inc_dirs: list, blas: list) -> list:
    """The objects of `entries` (`_prebuilt_entries`), the missing ones compiled side by side (a
    backend splits its op layer into units for that); or BuildError.

    An object found is reused: it is the same machine code whichever library links it.  Builds
    race as libraries do: each in a private directory, moved into place with one rename.
    """
    objects = [obj for _, obj in entries]
    builds = []                                     # (index, work directory, command, process)
    try:
        for i, (source, obj) in enumerate(entries):
            if _verified(obj):
                mark_used(obj.parent)
                continue
            _discard(obj.parent)
            root = obj.parent.parent                # the objects' folder, one subfolder per digest
            try:
                root.mkdir(parents=True, exist_ok=True)
                work = Path(tempfile.mkdtemp(prefix=".tmp-obj-", dir=root))
            except OSError as exc:                  # an unwritable cache: build privately
                work = Path(tempfile.mkdtemp(prefix=".tmp-obj-", dir=_private_build_dir(root, exc)))
            cmd = [cxx, *flags, *(f"-I{d}" for d in inc_dirs), *[f for f in blas if f.startswith("-I")],
                   "-c", str(source), "-o", obj.name]
            builds.append((i, work, cmd, subprocess.Popen(cmd, cwd=work, stdout=subprocess.PIPE,
                                                          stderr=subprocess.STDOUT, text=True)))
        for i, work, cmd, proc in builds:
            log, name = proc.communicate()[0], objects[i].name
            if proc.returncode != 0 or not (work / name).exists():
                raise BuildError(f"C++ build of the op layer {entries[i][0].name!r} failed (exit {proc.returncode})\n"
                                 f"{_first_errors(log)}", log="$ " + " ".join(cmd) + "\n" + log)
            (work / (name + CHECKSUM_SUFFIX)).write_text(_file_digest(work / name) + "\n")
            try:
                os.rename(work, objects[i].parent)
            except OSError:
                pass
            if not _verified(objects[i]):
                objects[i] = work / name            # the slot could not be taken: our private copy
            elif work.exists():
                shutil.rmtree(work, ignore_errors=True)     # another build's identical object won
    except BaseException:
        for _, work, _, proc in builds:             # a failure or Ctrl-C: no compiler left running
            proc.kill()
            proc.wait()
            shutil.rmtree(work, ignore_errors=True)
        raise
    return objects


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _verified(so: Path) -> bool:
    """Whether `so` is a complete build: a regular file whose SHA-256 matches its stamp."""
    try:
        stamp = (so.parent / (so.name + CHECKSUM_SUFFIX)).read_text().strip()
        return so.is_file() and not so.is_symlink() and stamp == _file_digest(so)
    except (OSError, UnicodeDecodeError):
        return False


_noted_private: set = set()


def _private_build_dir(root: Path, reason: OSError) -> Path:
    """A per-user build directory for when the cache cannot be written; noted once per cache."""
    private = Path(tempfile.gettempdir()) / f"morphgen-build-{os.getuid()}"
    private.mkdir(mode=0o700, parents=True, exist_ok=True)
    if str(root) not in _noted_private:
        _noted_private.add(str(root))
        print(f"morphgen: note: the build cache {root} cannot be written ({reason.strerror or reason}); "
              f"building in {private}", file=sys.stderr)
    return private

"""The build cache verifies what it loads, rebuilds what does not verify, and sizes never wrap.

Tiny translation units keep these fast: each build is well under a second.
"""
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from morphgen import pipeline, toolchain
from morphgen.backends import require
from morphgen.errors import UserError
from morphgen.toolchain import CHECKSUM_SUFFIX, BuildError, compile_shared

SOURCE = {"unit.cpp": 'extern "C" int mg_answer() { return 42; }\n'}


def _build(cache, source=SOURCE):
    return compile_shared(source, name="unit", cache_dir=cache)


def _answer(so: Path) -> int:
    import cffi
    ffi = cffi.FFI()
    ffi.cdef("int mg_answer(void);")
    return ffi.dlopen(str(so)).mg_answer()


def test_a_complete_build_is_stamped_and_reused(tmp_path):
    so = _build(tmp_path)
    stamp = so.with_name(so.name + CHECKSUM_SUFFIX)
    assert stamp.read_text().strip() == toolchain._file_digest(so)
    assert _build(tmp_path) == so
    assert _answer(so) == 42
    # Nothing but the entry itself is left in the cache.
    assert [p.name for p in tmp_path.iterdir()] == [so.parent.name]


def test_the_optimisation_level_is_part_of_the_build_and_checked(tmp_path, monkeypatch):
    default = _build(tmp_path)
    monkeypatch.setenv(toolchain.OPT_LEVEL_ENV, "0")
    quick = _build(tmp_path)
    assert quick != default and _answer(quick) == 42        # its own cache entry
    monkeypatch.setenv(toolchain.OPT_LEVEL_ENV, "fast")
    with pytest.raises(UserError, match=r"MORPHGEN_OPT_LEVEL is 'fast'; it takes 0, 1, 2 or 3"):
        _build(tmp_path)


ISA_PROBE = {"isa.cpp": '#include "common.h"\nextern "C" int mg_answer() { return MG_SIMD_LANES; }\n'}


def test_the_kernel_isa_is_chosen_by_env_and_part_of_the_build(tmp_path, monkeypatch):
    """$MORPHGEN_ISA=avx2 builds the 8-lane kernels even where the CPU has AVX-512 (how an AVX-512
    machine measures what AVX2-only CPUs run); portable, the scalar ones; each its own entry."""
    lanes = {}
    for isa in ("native", "avx2", "portable"):
        monkeypatch.setenv(toolchain.ISA_ENV, isa)
        if isa == "avx2" and not {"avx2", "fma"} <= toolchain.cpu_flags():
            with pytest.raises(UserError, match="no AVX2"):
                _build(tmp_path, ISA_PROBE)
            continue
        lanes[isa] = (_answer(_build(tmp_path, ISA_PROBE)))
    assert lanes["portable"] == 1
    if "avx2" in lanes:
        assert lanes["avx2"] == 8
    assert lanes["native"] == (16 if "avx512f" in toolchain.cpu_flags() else lanes.get("avx2", 1))
    assert len(list(tmp_path.iterdir())) == len(lanes)
    monkeypatch.setenv(toolchain.ISA_ENV, "sse")
    with pytest.raises(UserError, match=r"MORPHGEN_ISA is 'sse'; it takes native, avx2, portable"):
        _build(tmp_path)


@pytest.mark.parametrize("damage", ["truncate", "empty", "random", "missing", "other_library", "no_stamp"])
def test_a_damaged_entry_is_rebuilt_not_loaded(tmp_path, damage):
    so = _build(tmp_path)
    good = so.read_bytes()
    if damage == "truncate":
        so.write_bytes(good[: len(good) // 2])
    elif damage == "empty":
        so.write_bytes(b"")
    elif damage == "random":
        so.write_bytes(os.urandom(len(good)))
    elif damage == "missing":
        so.unlink()
    elif damage == "other_library":
        other = compile_shared({"unit.cpp": 'extern "C" int mg_answer() { return 7; }\n'},
                               name="unit", cache_dir=tmp_path / "elsewhere")
        so.write_bytes(other.read_bytes())
    elif damage == "no_stamp":
        so.with_name(so.name + CHECKSUM_SUFFIX).unlink()
    rebuilt = _build(tmp_path)
    assert rebuilt == so
    assert toolchain._verified(rebuilt)
    assert _answer(rebuilt) == 42


def test_an_interrupted_build_leaves_no_debris(tmp_path, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(toolchain.subprocess, "run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _build(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_failed_build_is_kept_for_inspection_and_not_cached(tmp_path):
    with pytest.raises(BuildError) as info:
        _build(tmp_path, {"unit.cpp": "this is not C++\n"})
    kept = info.value.build_dir
    assert kept is not None and (kept / "build.log").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == [kept.name]


def test_a_read_only_cache_falls_back_to_a_private_directory(tmp_path, capsys, monkeypatch):
    # Root writes through permission bits, so the read-only cache is simulated at the syscall the
    # cache uses first: creating its temporary build directory.
    cache = tmp_path / "cache"
    cache.mkdir()
    real_mkdtemp = tempfile.mkdtemp

    def mkdtemp(prefix="", dir=None):
        if dir is not None and Path(dir) == cache:
            raise PermissionError(13, "Permission denied", str(dir))
        return real_mkdtemp(prefix=prefix, dir=dir)
    monkeypatch.setattr(toolchain.tempfile, "mkdtemp", mkdtemp)
    monkeypatch.setattr(toolchain.tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    so = _build(cache)
    assert so.is_relative_to(tmp_path / "tmp") and toolchain._verified(so) and _answer(so) == 42
    assert list(cache.iterdir()) == []
    assert "cannot be written (Permission denied)" in capsys.readouterr().err
    assert _build(cache) == so          # and the private build is reused


def test_sizes_are_64_bit_in_generated_code(tmp_path):
    """A 70000 x 70000 weight wraps in `int`; the generated C++ must compute it in 64 bits, and the
    build flags must turn any remaining overflow into an error."""
    program_text = """
function big(Graph g, propNode<float[F]> x, propNode<int[C]> y) {
    weight<float[F][70000]> W1 = glorot;
    weight<float[70000][70000]> W2 = glorot;
    weight<float[70000][C]> W3 = glorot;
    propNode<float[C]> h;
    gnn.optimizer("adam", lr = 0.01);
    for (int epoch = 0; epoch < 2; epoch++) {
        forall (v in g.nodes()) {
            v.h = relu(relu(v.x * W1) * W2) * W3;
        }
        gnn.loss(h, "cross_entropy");
        gnn.backPropagation();
        gnn.optimizerStep();
    }
}
"""
    model = tmp_path / "big.mp"
    model.write_text(program_text)
    sources = require("openmp").emitter_class()(pipeline.lower(model)).emit()
    assert "-Werror=overflow" in toolchain.BASE_FLAGS

    def syntax_check(srcs):
        for name, text in srcs.items():
            (tmp_path / name).write_text(text)
        flags = [f for f in toolchain.BASE_FLAGS if f != "-shared"]
        include = [f"-I{toolchain.kernel_include_dir()}", *(f"-I{d}" for d in pipeline.include_dirs()),
                   toolchain.openblas_flags()[0]]
        units = [n for n in srcs if n.endswith(toolchain.COMPILED_SUFFIXES)]
        return subprocess.run([toolchain.compiler(), *flags, "-fsyntax-only", *include, *units],
                              cwd=tmp_path, capture_output=True, text=True)

    proc = syntax_check(sources)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # The check has teeth: the same code with the sizes as plain `int` literals does not build.
    wrapped = {n: t.replace("int64_t(70000)", "70000") for n, t in sources.items()}
    proc = syntax_check(wrapped)
    assert proc.returncode != 0 and "overflow" in proc.stderr


# ---------------------------------------------------------------------------------------------
# precompiled op-layer headers

HEADER = "#pragma once\n#define MG_ANSWER 42\ninline int mg_twice(int x) { return 2 * x; }\n"
USES_HEADER = {"unit.cpp": '#include "answer.h"\nextern "C" int mg_answer() { return mg_twice(MG_ANSWER) / 2; }\n'}


def test_a_precompiled_header_is_built_once_and_read_precompiled(tmp_path):
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "answer.h").write_text(HEADER)
    cache = tmp_path / "cache" / "build"
    so = compile_shared(USES_HEADER, name="unit", include_dirs=[inc], cache_dir=cache, precompiled_header="answer.h")
    assert _answer(so) == 42
    (entry,) = (tmp_path / "cache" / "pch").iterdir()
    assert (entry / "answer.h.gch").is_file() and (entry / "answer.h").resolve() == (inc / "answer.h").resolve()
    log = (so.parent / "build.log").read_text()
    assert f"-I{entry} -include answer.h" in log
    # the compiler took the precompiled header (`-H` marks a used one with '!'), not the text
    flags = log.splitlines()[0].split()[1:]
    flags = [f for f in flags if f not in ("-shared", "-o", "libunit.so") and not f.startswith(("-L", "-l", "-Wl"))]
    listing = subprocess.run(["g++", *flags, "-H", "-fsyntax-only", str(so.parent / "unit.cpp")],
                             cwd=so.parent, capture_output=True, text=True)
    assert listing.stderr.startswith(f"! {entry}/answer.h.gch"), listing.stderr[:300]
    # the same sources build to the same cache entry with or without it, and a second build reuses it
    assert compile_shared(USES_HEADER, name="unit", include_dirs=[inc], cache_dir=cache) == so
    (so.parent / "libunit.so").unlink()
    compile_shared(USES_HEADER, name="unit", include_dirs=[inc], cache_dir=cache, precompiled_header="answer.h")
    assert len(list((tmp_path / "cache" / "pch").iterdir())) == 1


def test_a_header_that_does_not_precompile_is_parsed_as_before(tmp_path):
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "answer.h").write_text(HEADER + "#ifndef MG_UNIT\n#error only inside unit.cpp\n#endif\n")
    source = {"unit.cpp": "#define MG_UNIT 1\n" + USES_HEADER["unit.cpp"]}
    so = compile_shared(source, name="unit", include_dirs=[inc], cache_dir=tmp_path / "build",
                        precompiled_header="answer.h")
    assert _answer(so) == 42
    assert "-include" not in (so.parent / "build.log").read_text()
    assert not (tmp_path / "pch").exists() or not any((tmp_path / "pch").iterdir())


# ---------------------------------------------------------------------------------------------
# prebuilt op-layer units

DECLARES = "#pragma once\nint mg_twice(int x);\n"
DEFINES = '#include "twice.h"\nint mg_twice(int x) { return 2 * x; }\n'


def _twice_unit(tmp_path, body=DEFINES) -> Path:
    inc = tmp_path / "inc"
    inc.mkdir(exist_ok=True)
    (inc / "twice.h").write_text(DECLARES)
    (inc / "twice.cpp").write_text(body)
    return inc


def _calls_twice(k: int) -> dict:
    return {"unit.cpp": f'#include "twice.h"\nextern "C" int mg_answer() {{ return mg_twice({k}); }}\n'}


def test_a_prebuilt_unit_is_compiled_once_and_linked_into_every_library(tmp_path):
    inc = _twice_unit(tmp_path)
    cache = tmp_path / "cache" / "build"
    first = compile_shared(_calls_twice(21), name="unit", include_dirs=[inc], cache_dir=cache,
                           prebuilt_units=("twice.cpp",))
    second = compile_shared(_calls_twice(4), name="unit", include_dirs=[inc], cache_dir=cache,
                            prebuilt_units=("twice.cpp",))
    assert (_answer(first), _answer(second)) == (42, 8)
    (entry,) = (tmp_path / "cache" / "objects").iterdir()           # one object for both libraries
    assert (entry / "twice.o").is_file()
    assert all(str(entry / "twice.o") in (so.parent / "build.log").read_text() for so in (first, second))
    # the unit's contents are part of the library's key: an edit relinks, with the new object
    (inc / "twice.cpp").write_text(DEFINES.replace("2 * x", "3 * x"))
    third = compile_shared(_calls_twice(4), name="unit", include_dirs=[inc], cache_dir=cache,
                           prebuilt_units=("twice.cpp",))
    assert third != second and _answer(third) == 12
    assert len(list((tmp_path / "cache" / "objects").iterdir())) == 2


def test_a_declared_function_no_unit_defines_fails_the_build(tmp_path):
    inc = _twice_unit(tmp_path, body='#include "twice.h"\nint mg_thrice(int x) { return 3 * x; }\n')
    with pytest.raises(BuildError) as info:
        compile_shared(_calls_twice(21), name="unit", include_dirs=[inc], cache_dir=tmp_path / "build",
                       prebuilt_units=("twice.cpp",))
    assert "mg_twice" in info.value.log           # the link refused it, not the load


def test_a_prebuilt_unit_that_is_missing_or_broken_is_named(tmp_path):
    inc = _twice_unit(tmp_path, body="int mg_twice(int x) { return 2 * x }\n")
    with pytest.raises(BuildError, match="no_such.cpp"):
        compile_shared(_calls_twice(1), name="unit", include_dirs=[inc], cache_dir=tmp_path / "build",
                       prebuilt_units=("no_such.cpp",))
    with pytest.raises(BuildError, match="op layer 'twice.cpp' failed") as info:
        compile_shared(_calls_twice(1), name="unit", include_dirs=[inc], cache_dir=tmp_path / "build",
                       prebuilt_units=("twice.cpp",))
    assert "return 2 * x }" in str(info.value)         # the compiler's diagnostic, located
    assert not (tmp_path / "objects").exists() or not any((tmp_path / "objects").iterdir())

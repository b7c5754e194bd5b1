"""The build cache stays within $MORPHGEN_CACHE_MAX_GB: least recently used entries go first.

Entries are folders with files of known sizes (the trimming rule), or tiny real builds (that a
hit counts as a use and a new library triggers the trim).
"""
import os
import time
from pathlib import Path

import pytest

from morphgen import build_cache
from morphgen.cli import main
from morphgen.errors import UserError
from morphgen.toolchain import compile_shared

SOURCE = {"unit.cpp": 'extern "C" int mg_answer() { return %d; }\n'}
NOW = 1.0e9


def _entry(root: Path, section: str, name: str, size: int, used: float) -> Path:
    entry = root / section / name
    entry.mkdir(parents=True)
    (entry / "payload").write_bytes(b"x" * size)
    os.utime(entry, (used, used))
    return entry


def _names(root: Path, section: str) -> set:
    return {p.name for p in (root / section).iterdir()}


def test_the_least_recently_used_entries_go_until_the_rest_fits(tmp_path):
    _entry(tmp_path, "build", "old", 400, NOW - 5000)
    _entry(tmp_path, "pch", "older", 300, NOW - 9000)
    _entry(tmp_path, "objects", "mid", 200, NOW - 3000)
    _entry(tmp_path, "build", "new", 100, NOW - 1000)
    removed, freed = build_cache.trim(tmp_path, limit=350, now=NOW)
    assert (removed, freed) == (2, 700)              # older (pch), then old (build): 300 bytes left
    assert _names(tmp_path, "build") == {"new"} and _names(tmp_path, "objects") == {"mid"}
    assert not list((tmp_path / "pch").iterdir())


def test_recent_entries_unfinished_folders_partitions_and_measurements_stay(tmp_path):
    _entry(tmp_path, "build", "recent", 1000, NOW - build_cache.RECENT_S / 2)
    _entry(tmp_path, "build", ".tmp-abc", 1000, NOW - 9000)          # a build in the making
    _entry(tmp_path, "parts", "cora-4", 1000, NOW - 9000)            # read by running MPI jobs
    (tmp_path / "calibration.json").write_text("{}")
    assert build_cache.trim(tmp_path, limit=0, now=NOW) == (0, 0)
    assert _names(tmp_path, "build") == {"recent", ".tmp-abc"} and _names(tmp_path, "parts") == {"cora-4"}
    assert (tmp_path / "calibration.json").exists()


@pytest.mark.parametrize("raw,want", [("", 5 * 2**30), ("0", None), ("0.5", 2**29), (" 2 ", 2 * 2**30)])
def test_the_limit_comes_from_the_environment(monkeypatch, raw, want):
    monkeypatch.setenv(build_cache.MAX_ENV, raw)
    assert build_cache.max_bytes() == want


@pytest.mark.parametrize("raw", ["-1", "lots", "nan", "inf"])
def test_a_bad_limit_names_the_variable(monkeypatch, raw):
    monkeypatch.setenv(build_cache.MAX_ENV, raw)
    with pytest.raises(UserError, match=build_cache.MAX_ENV):
        build_cache.max_bytes()


def test_a_new_library_trims_the_cache_and_a_hit_counts_as_a_use(tmp_path, monkeypatch):
    monkeypatch.setenv("MORPHGEN_CACHE", str(tmp_path))
    monkeypatch.setattr(build_cache, "RECENT_S", 0.0)
    monkeypatch.setattr(build_cache, "TRIM_EVERY_S", 0.0)
    first = compile_shared({"unit.cpp": SOURCE["unit.cpp"] % 1}, name="unit")
    second = compile_shared({"unit.cpp": SOURCE["unit.cpp"] % 2}, name="unit")
    past = time.time() - 100
    os.utime(first.parent, (past - 50, past - 50))
    os.utime(second.parent, (past, past))
    assert compile_shared({"unit.cpp": SOURCE["unit.cpp"] % 1}, name="unit") == first     # a hit: used now
    one = sum(f.stat().st_size for f in first.parent.iterdir())
    monkeypatch.setenv(build_cache.MAX_ENV, repr(2.5 * one / 2**30))       # room for two such entries
    third = compile_shared({"unit.cpp": SOURCE["unit.cpp"] % 3}, name="unit")
    assert first.exists() and third.exists() and not second.parent.exists()    # the least recently used went


def test_a_build_outside_the_cache_is_never_trimmed(tmp_path, monkeypatch):
    monkeypatch.setenv("MORPHGEN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(build_cache.MAX_ENV, "1e-9")
    monkeypatch.setattr(build_cache, "RECENT_S", 0.0)
    monkeypatch.setattr(build_cache, "TRIM_EVERY_S", 0.0)
    libs = [compile_shared({"unit.cpp": SOURCE["unit.cpp"] % k}, name="unit", cache_dir=tmp_path / "mine")
            for k in (1, 2)]
    assert all(lib.exists() for lib in libs)


def test_builds_trim_at_most_once_a_minute(tmp_path, monkeypatch):
    monkeypatch.setattr(build_cache, "RECENT_S", 0.0)
    _entry(tmp_path, "build", "a", 100, NOW - 5000)
    build_cache.trim_after_build(tmp_path, now=NOW - build_cache.TRIM_EVERY_S / 2)     # trims nothing: fits
    monkeypatch.setenv(build_cache.MAX_ENV, "1e-9")
    build_cache.trim_after_build(tmp_path, now=NOW)                                  # within the minute
    assert (tmp_path / "build" / "a").exists()
    build_cache.trim_after_build(tmp_path, now=NOW + build_cache.TRIM_EVERY_S)       # a minute later
    assert not (tmp_path / "build" / "a").exists()


def test_the_cache_command_shows_trims_and_cleans(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MORPHGEN_CACHE", str(tmp_path))
    monkeypatch.setenv(build_cache.MAX_ENV, "0")
    _entry(tmp_path, "build", "a", 2048, NOW)
    _entry(tmp_path, "parts", "cora-2", 1024, NOW)
    (tmp_path / "calibration.json").write_text("{}")
    assert main(["cache"]) == 0
    out = capsys.readouterr().out
    assert str(tmp_path) in out and "libraries" in out and "2.0 KiB" in out and "limit none" in out
    assert main(["cache", "clean"]) == 0
    assert "removed 1 entries" in capsys.readouterr().out
    assert not (tmp_path / "build" / "a").exists() and (tmp_path / "parts" / "cora-2").exists()
    assert main(["cache", "clean", "--all"]) == 0
    assert not (tmp_path / "parts" / "cora-2").exists() and not (tmp_path / "calibration.json").exists()
    assert main(["cache", "info", "--all"]) == 2
    assert "--all goes with `morphgen cache clean`" in capsys.readouterr().err


def test_a_bad_limit_is_an_error_of_the_cache_command_and_a_line_of_doctor(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("MORPHGEN_CACHE", str(tmp_path))
    monkeypatch.setenv(build_cache.MAX_ENV, "lots")
    assert main(["cache"]) != 0
    assert "MORPHGEN_CACHE_MAX_GB" in capsys.readouterr().err
    from morphgen import doctor
    monkeypatch.setattr(doctor, "_gpu", lambda: (False, "none"))
    assert doctor.run() == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("cache:"))
    assert str(tmp_path) in line and "MORPHGEN_CACHE_MAX_GB" in line

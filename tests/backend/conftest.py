"""The backend tests compare a backend's numbers with the float64 interpreter's (and with each
other's): they check the lowering, not the speed, so their libraries are built at -O0, in about a
third of the time of -O3 (tests/backend: 180 s -> 54 s on two workers).  The -O3 builds are
exercised by the end-to-end, example and benchmark-harness tests."""
import pytest

from morphgen.toolchain import OPT_LEVEL_ENV


@pytest.fixture(autouse=True)
def quick_builds(monkeypatch):
    monkeypatch.setenv(OPT_LEVEL_ENV, "0")
    yield

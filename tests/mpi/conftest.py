"""The MPI tests compare runs of two backends: what they check is the numbers, not the speed,
so their libraries are built at -O0, in a fifth of the time of -O3 (both sides alike)."""
import pytest

from morphgen.toolchain import OPT_LEVEL_ENV


@pytest.fixture(autouse=True)
def quick_builds(monkeypatch):
    monkeypatch.setenv(OPT_LEVEL_ENV, "0")
    yield

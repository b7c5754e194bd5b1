"""morphgen: a compiler for graph neural network training programs."""
__version__ = "0.1.0"


def compile(path, backend: str = "openmp", **kwargs):
    """Check a .mp program and return a model for `backend` (see morphgen.api.CompiledModel)."""
    from .api import compile as _compile
    return _compile(path, backend=backend, **kwargs)

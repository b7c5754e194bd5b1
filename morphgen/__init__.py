"""morphgen: a compiler for graph neural network training programs."""
__version__ = "0.1.0"

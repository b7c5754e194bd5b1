"""Argument types of the command line that argparse does not have: each refuses a bad value with
a message naming what is allowed (argparse prints it as `argument --seed: ...`, exit status 2)."""
from __future__ import annotations

import argparse
import math

MAX_SEED = 2**63 - 1      # seeds key numpy's generators and the kernels' uint64 dropout streams


def seed(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer (a seed is 0 .. 2**63-1)") from None
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"{value} is out of range: a seed is 0 .. 2**63-1")
    return value


def fraction(text: str) -> float:
    """A number in [0, 1] (a sparsity threshold)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (expected 0 .. 1)") from None
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise argparse.ArgumentTypeError(f"{text} is not in [0, 1]")
    return value

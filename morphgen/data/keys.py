"""Sorting-based distinct values for edge keys (``src * N + dst``).

``np.unique`` in recent numpy switches to a hash table that is orders of magnitude slower than a
sort on the clustered int64 keys of power-law graphs (seconds instead of milliseconds for 2M
keys), so the loaders and generators use this instead.
"""
from __future__ import annotations

import numpy as np


def sorted_unique(keys: np.ndarray) -> np.ndarray:
    """The distinct values of ``keys``, ascending."""
    if keys.size == 0:
        return keys.copy()
    ordered = np.sort(keys)
    first = np.empty(ordered.size, bool)
    first[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    return ordered[first]

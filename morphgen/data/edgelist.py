"""Edge-list text files: one ``src dst`` pair per line (whitespace or comma separated).

``#`` starts a comment (whole line or trailing); blank lines are skipped, and so is a header
(a first line of two names, as ``src,dst`` of a CSV export).  Node ids are
non-negative integers; ``num_nodes`` defaults to the largest id + 1.  An edge list carries no
labels, so it yields a ``Graph`` (``load_graph``), not a trainable ``Dataset``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from morphgen.data.errors import DataError
from morphgen.data.guards import require_file
from morphgen.data.validate import make_graph
from morphgen.graph import Graph

_INT64_MAX = int(np.iinfo(np.int64).max)


def _is_integer(text: str) -> bool:
    try:
        int(text)
        return True
    except ValueError:
        return False


def parse_edge_lines(lines, source: str):
    """Parse ``src dst`` lines into two int64 arrays; errors carry ``source:line``."""
    src, dst = [], []
    first = True
    for lineno, raw in enumerate(lines, 1):
        text = raw.split("#", 1)[0].replace(",", " ").split()
        if not text:
            continue
        header = first and len(text) == 2 and not any(_is_integer(t) for t in text)
        first = False
        if header:            # the columns' names
            continue
        if len(text) != 2:
            raise DataError(f"{source}:{lineno}: expected 'src dst', got {raw.strip()!r}")
        try:
            s, d = int(text[0]), int(text[1])
        except ValueError:
            raise DataError(f"{source}:{lineno}: node ids must be integers, got {raw.strip()!r}") from None
        if s < 0 or d < 0:
            raise DataError(f"{source}:{lineno}: node ids must be non-negative, got {raw.strip()!r}")
        if max(s, d) > _INT64_MAX:
            raise DataError(f"{source}:{lineno}: node id {max(s, d)} is too large: ids are stored as "
                            f"int64 (at most {_INT64_MAX})")
        src.append(s)
        dst.append(d)
    return np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64)


def read_edge_list(path, num_nodes: Optional[int] = None) -> Graph:
    path = Path(path)
    require_file(path)
    try:
        # utf-8-sig: the byte-order mark some editors write is not part of the first node id
        with open(path, "r", encoding="utf-8-sig") as fh:
            src, dst = parse_edge_lines(fh, str(path))
    except UnicodeDecodeError:
        raise DataError(f"{path}: not a text edge list (not UTF-8)") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror})") from None
    largest = int(max(src.max(), dst.max())) if src.size else -1
    if num_nodes is None:
        num_nodes = largest + 1
    elif largest >= num_nodes:
        row = 0 if src.size and src.max() == largest else 1
        raise DataError(f"{path}: node id {largest} (edge_index[{row}]) is outside [0, {num_nodes}) "
                        f"given num_nodes={num_nodes}")
    return make_graph(num_nodes, src, dst, str(path), meta={"source": str(path), "format": "edgelist"})

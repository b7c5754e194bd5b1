"""``load_dataset`` / ``load_graph``: turn a dataset spec into a ``Dataset`` or a ``Graph``.

A spec is one of

* ``synthetic`` or ``synthetic:key=value,...``  -> the built-in generator;
* a path to an ``.npz`` file (canonical format), a directory of raw Planetoid ``ind.<name>.*``
  files, or an edge-list text file;
* a bare name such as ``cora`` -> ``<data_dir>/cora.npz``, then ``$MORPHGEN_DATA/cora.npz``.
"""
from __future__ import annotations

import difflib
import math
import os
from pathlib import Path
from typing import Optional, Union

import numpy as np
import scipy.sparse as sp

from morphgen.data.dataset import Dataset
from morphgen.data.edgelist import read_edge_list
from morphgen.data.errors import DataError
from morphgen.data.guards import require_file, require_memory
from morphgen.data.keys import sorted_unique
from morphgen.data.npz import read_npz, read_npz_graph
from morphgen.data.planetoid import planetoid_set, read_planetoid
from morphgen.data.synthetic import (check_synthetic_key, is_synthetic_spec, parse_synthetic_spec,
                                     synthetic_dataset)
from morphgen.data.validate import make_graph
from morphgen.graph import Graph

ENV_VAR = "MORPHGEN_DATA"
_PATH_SUFFIXES = (".npz", ".txt", ".edges", ".el", ".tsv", ".csv", ".edgelist")
_FILE_OPTIONS = ("name", "feature_format", "num_nodes")
_FEATURE_FORMATS = ("dense", "csr")
_MAX_KEYED_NODES = math.isqrt(int(np.iinfo(np.int64).max))   # n * n must fit in int64

Spec = Union[str, os.PathLike]


def _looks_like_path(text: str) -> bool:
    return os.sep in text or "/" in text or text.endswith(_PATH_SUFFIXES) or text.startswith(".")


def _search_dirs(data_dir) -> list:
    dirs = []
    if data_dir is not None:
        dirs.append(("data_dir", Path(data_dir)))
    env = os.environ.get(ENV_VAR)
    if env:
        dirs.append((f"${ENV_VAR}", Path(env)))
    return dirs


def resolve_name(name: str, data_dir=None) -> Path:
    """``<data_dir>/<name>.npz`` then ``$MORPHGEN_DATA/<name>.npz``; a clear error otherwise."""
    if data_dir is not None and not Path(data_dir).is_dir():
        raise DataError(f"data_dir {data_dir}: no such folder (dataset '{name}' is looked up there)")
    dirs = _search_dirs(data_dir)
    for label, d in dirs:
        candidate = d / f"{name}.npz"
        try:
            if candidate.is_file():
                return candidate
        except OSError as err:        # a folder the user may not search
            raise DataError(f"dataset '{name}': cannot look in {d} ({label}): {err.strerror or err}") from None
    if Path(name).exists():      # a file or Planetoid directory in the working directory
        return Path(name)
    if not dirs:
        raise DataError(f"dataset '{name}': not a file, and no data directory to look in: pass "
                        f"data_dir (--data-dir) or set ${ENV_VAR}, or use 'synthetic'")
    lines, available = [], set()
    for label, d in dirs:
        names = sorted(p.stem for p in d.glob("*.npz")) if d.is_dir() else []
        available.update(names)
        where = f"{d / (name + '.npz')} ({label})"
        lines.append(f"  {where}: not found; available there: {', '.join(names) if names else 'none'}"
                     if d.is_dir() else f"  {where}: directory does not exist")
    close = difflib.get_close_matches(name, sorted(available), n=1)
    hint = f"\ndid you mean '{close[0]}'?" if close else ""
    raise DataError(f"dataset '{name}' not found; looked in:\n" + "\n".join(lines) + hint)


def dataset_file(spec: Spec, data_dir=None) -> Optional[Path]:
    """The file or folder that ``spec`` reads, or None (the generator, or nothing found yet)."""
    if isinstance(spec, str) and is_synthetic_spec(spec):
        return None
    try:
        return _locate_set(spec, data_dir, None)[0]
    except (DataError, OSError):
        return None


def _locate(spec: Spec, data_dir) -> Path:
    text = os.fspath(spec)
    if isinstance(spec, os.PathLike) or _looks_like_path(text):
        path = Path(text)
    else:
        path = resolve_name(text, data_dir)
    # before anything opens it: reading a device never ends, opening a FIFO blocks
    require_file(path, allow_dir=True)
    return path


def _locate_set(spec: Spec, data_dir, name: Optional[str]) -> tuple:
    """(path, Planetoid set name) of ``spec``: ``DIR/ind.<name>`` (or one of that set's files)
    reads the set ``name`` of the Planetoid directory DIR."""
    text = os.fspath(spec)
    if isinstance(spec, os.PathLike) or _looks_like_path(text):
        found = planetoid_set(Path(text))
        if found is not None:
            if name is not None and name != found[1]:
                raise DataError(f"{text}: names the Planetoid set {found[1]!r}, but name={name!r} was given")
            return _locate(found[0], data_dir), found[1]
    return _locate(spec, data_dir), name


def _is_npz(path: Path) -> bool:
    if path.suffix == ".npz":
        return True
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"PK\x03\x04"     # a zip archive: numpy's npz container
    except OSError:
        return False


def _check_options(opts: dict, allowed) -> None:
    for key in opts:
        if key not in allowed:
            close = difflib.get_close_matches(key, list(allowed), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise DataError(f"load_dataset: unknown option '{key}'{hint} "
                            f"(options here: {', '.join(allowed)})")


def _convert_features(ds: Dataset, layout: Optional[str]) -> Dataset:
    if layout is None or ds.features is None:
        return ds
    if layout not in _FEATURE_FORMATS:
        raise DataError(f"feature_format: must be one of {', '.join(_FEATURE_FORMATS)}, got {layout!r}")
    f = ds.features
    if layout == "dense" and sp.issparse(f):
        require_memory(f.shape[0] * f.shape[1] * 4, f"feature_format: a dense copy of the {f.shape} features")
        ds.features = np.ascontiguousarray(f.toarray(), dtype=np.float32)
    elif layout == "csr" and not sp.issparse(f):
        ds.features = sp.csr_matrix(f, dtype=np.float32)
    return ds


def load_dataset(spec: Spec = "synthetic", data_dir=None, **opts) -> Dataset:
    """Load a trainable dataset (graph, features, labels, split) from ``spec``.

    Options: for ``synthetic`` specs any ``synthetic_dataset`` keyword (overrides the spec string);
    for files ``name`` (which Planetoid set in a directory holding several),
    ``feature_format`` (``dense`` / ``csr``: convert the feature layout after loading) and
    ``per_type_features`` (default true: ``x_<type>`` features of a heterogeneous ``.npz`` become
    one block matrix, see ``morphgen.data.typed_features``; false loads such a dataset featureless).
    """
    if not isinstance(spec, (str, os.PathLike)):
        raise DataError(f"load_dataset: the dataset must be a name, a path or a synthetic spec (a str), "
                        f"not {type(spec).__name__}")
    if isinstance(spec, str) and is_synthetic_spec(spec):
        layout = opts.pop("feature_format", None)
        for key in opts:
            check_synthetic_key(key)
        kwargs = parse_synthetic_spec(spec)
        kwargs.update(opts)
        return _convert_features(synthetic_dataset(**kwargs), layout)
    _check_options(opts, ("name", "feature_format", "per_type_features"))
    path, name = _locate_set(spec, data_dir, opts.get("name"))
    if path.is_dir():
        ds = read_planetoid(path, name=name)
    elif _is_npz(path):
        ds = read_npz(path, per_type_features=bool(opts.get("per_type_features", True)))
    else:
        read_edge_list(path)   # surfaces parse errors first, then the missing-labels error
        raise DataError(f"{path}: an edge list has no labels; labels are required for training. "
                        f"Use morphgen.data.load_graph for the structure, or convert the data to "
                        f".npz with y and train/val/test masks")
    return _convert_features(ds, opts.get("feature_format"))


def symmetrise_graph(graph: Graph) -> Graph:
    """Add the reverse of every edge, then drop duplicates (untyped graphs only)."""
    if graph.etype is not None and graph.num_etypes > 1:
        raise DataError("symmetrise: the graph has edge types; typed graphs carry their inverse "
                        "edges as separate types, so symmetrise only applies to untyped graphs")
    if graph.edge_weight is not None:
        raise DataError("symmetrise: the graph has edge weights, which merging each edge with its reverse "
                        "would have to combine; symmetrise only applies to unweighted graphs")
    n = graph.num_nodes
    if n > _MAX_KEYED_NODES:
        raise DataError(f"symmetrise: {n} nodes is too many: edges are deduplicated through int64 keys "
                        f"src * num_nodes + dst, which hold at most {_MAX_KEYED_NODES} nodes")
    src = np.concatenate([graph.src, graph.dst])
    dst = np.concatenate([graph.dst, graph.src])
    keys = sorted_unique(src * n + dst)
    meta = dict(graph.meta, symmetrised=True)
    return make_graph(n, keys // n, keys % n, meta.get("source"), ntype=graph.ntype,
                      num_ntypes=graph.num_ntypes, meta=meta)


def load_graph(spec: Spec, data_dir=None, symmetrise: bool = False, **opts) -> Graph:
    """Load only the structure of ``spec`` (npz with just edge_index + num_nodes, edge lists, ...).

    Options: ``name`` (Planetoid directory), ``num_nodes`` (edge lists), or synthetic keywords.
    """
    if isinstance(spec, str) and is_synthetic_spec(spec):
        graph = load_dataset(spec, data_dir, **opts).graph
    else:
        _check_options(opts, ("name", "num_nodes"))
        path, name = _locate_set(spec, data_dir, opts.get("name"))
        if path.is_dir():
            graph = read_planetoid(path, name=name).graph
        elif _is_npz(path):
            graph = read_npz_graph(path)
        else:
            graph = read_edge_list(path, num_nodes=opts.get("num_nodes"))
    return symmetrise_graph(graph) if symmetrise else graph

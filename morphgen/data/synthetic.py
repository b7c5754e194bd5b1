"""Deterministic synthetic graphs and datasets.

``rmat``: the R-MAT recursive-matrix generator (Chakrabarti et al. 2004), vectorised over edges:
each of the ``ceil(log2 N)`` levels draws one quadrant per edge (probabilities a, b, c, d) and
appends one bit to the source and destination ids.  Ids >= N are redrawn, self loops removed,
optionally duplicates too, and node ids are shuffled (as Graph500 does) so that the hubs are not
all at small ids.

``synthetic_dataset``: a node-classification task whose labels can be learned from both the
structure and the features:

* classes are planted communities (balanced, shuffled);
* edges follow a degree-corrected stochastic block model with power-law node weights (so the
  degree distribution is heavy-tailed like R-MAT's): the source is drawn proportionally to its
  weight, the destination from the source's own class with probability ``homophily`` and from
  all nodes otherwise; the graph is symmetric, without self loops or duplicates;
* features are a noisy class signature ``mu[class] + noise * N(0, 1)`` kept at each position
  with probability ``p[class, column]``; every class has a few "topic" columns that are kept more
  often, so even very sparse rows carry the label in *which* columns are non-zero.  Each row keeps
  ``(1 - sparsity) * F`` entries in expectation, so the expected zero fraction is ``sparsity``.

Everything derives from one ``seed`` through independent child streams (labels, graph, features,
split), so the same seed gives identical arrays, and changing the feature width does not change
the graph.
"""
from __future__ import annotations

import difflib
import math
from typing import Optional

import numpy as np
import scipy.sparse as sp

from morphgen.data.dataset import Dataset
from morphgen.data.errors import DataError
from morphgen.data.guards import require_memory
from morphgen.data.keys import sorted_unique
from morphgen.data.validate import make_graph
from morphgen.graph import Graph

_CHUNK_EDGES = 1 << 16      # edges drawn per vectorised batch (temporaries stay in cache)
_CHUNK_ENTRIES = 1 << 22    # feature entries generated per batch of rows
_MAX_ROUNDS = 64            # redraw rounds before giving up on a too-dense request


# ----------------------------------------------------------------------------------------------
# R-MAT
# ----------------------------------------------------------------------------------------------
def _check_rmat_args(num_nodes, num_edges, a, b, c):
    if not isinstance(num_nodes, (int, np.integer)) or num_nodes < 2:
        raise DataError(f"rmat: num_nodes must be an integer >= 2, got {num_nodes!r}")
    if not isinstance(num_edges, (int, np.integer)) or num_edges < 0:
        raise DataError(f"rmat: num_edges must be a non-negative integer, got {num_edges!r}")
    for name, p in (("a", a), ("b", b), ("c", c)):
        if not 0.0 <= p <= 1.0:
            raise DataError(f"rmat: {name} must lie in [0, 1], got {p}")
    if a + b + c > 1.0 + 1e-12:
        raise DataError(f"rmat: a + b + c = {a + b + c:.6g} exceeds 1 (d = 1 - a - b - c)")


def _rmat_draw(rng: np.random.Generator, count: int, levels: int, a: float, b: float, c: float):
    """``count`` raw R-MAT (src, dst) pairs over ``2**levels`` ids.

    Batches of ``_CHUNK_EDGES`` keep every temporary in cache, and each level compares one 16-bit
    random number per edge against the quadrant thresholds (probabilities are thus quantised to
    1/65536, far below the sampling noise of any graph).
    """
    src = np.empty(count, np.int64)
    dst = np.empty(count, np.int64)
    t_a, t_ab, t_abc = (np.uint16(min(65535, round(p * 65536))) for p in (a, a + b, a + b + c))
    acc = np.int32 if levels <= 30 else np.int64
    for start in range(0, count, _CHUNK_EDGES):
        m = min(_CHUNK_EDGES, count - start)
        s = np.zeros(m, acc)
        d = np.zeros(m, acc)
        for _ in range(levels):
            r = rng.integers(0, 65536, size=m, dtype=np.uint16)
            s <<= 1
            d <<= 1
            lower = r >= t_ab                          # quadrants c, d: source bit set
            s += lower
            d += (r >= t_abc) | ((r >= t_a) & ~lower)  # quadrants b, d: destination bit set
        src[start:start + m] = s
        dst[start:start + m] = d
    return src, dst


def _distinct(keys: np.ndarray, target: int, rng: np.random.Generator) -> np.ndarray:
    """Sorted distinct keys; when more than ``target``, a uniformly random surplus is dropped
    (dropping the largest keys instead would bias the graph towards small ids)."""
    keys = sorted_unique(keys)
    surplus = keys.size - target
    if surplus > 0:
        keys = np.delete(keys, rng.choice(keys.size, surplus, replace=False))
    return keys


def rmat(num_nodes: int, num_edges: int, a: float = 0.57, b: float = 0.19, c: float = 0.19,
         seed: int = 0, symmetric: bool = False, dedup: bool = False, permute: bool = True) -> Graph:
    """An R-MAT graph with ``num_edges`` directed edges (no self loops).

    ``symmetric=True`` draws ``num_edges // 2`` undirected pairs and stores both directions.
    ``dedup=True`` removes repeated edges and keeps drawing until the count is reached.
    """
    _check_rmat_args(num_nodes, num_edges, a, b, c)
    # per edge its endpoints, the draws' quadrant bits and the keys that sort them; per node a permutation
    require_memory(int(num_edges) * 48 + int(num_nodes) * 16, f"rmat: {num_nodes} nodes, {num_edges} edges")
    n = int(num_nodes)
    target = int(num_edges) // 2 if symmetric else int(num_edges)
    if dedup:
        capacity = n * (n - 1) // (2 if symmetric else 1)
        if target > capacity:
            raise DataError(f"rmat: {num_edges} distinct edges requested but {n} nodes allow at most "
                            f"{capacity * (2 if symmetric else 1)}")
    rng = np.random.default_rng(seed)
    levels = max(1, math.ceil(math.log2(n)))
    src, dst = np.empty(0, np.int64), np.empty(0, np.int64)
    for _ in range(_MAX_ROUNDS):
        missing = target - src.size
        if missing <= 0:
            break
        s, d = _rmat_draw(rng, int(missing * 1.1) + 16, levels, a, b, c)
        keep = (s < n) & (d < n) & (s != d)
        s, d = s[keep], d[keep]
        if symmetric:
            s, d = np.minimum(s, d), np.maximum(s, d)
        src, dst = np.concatenate([src, s]), np.concatenate([dst, d])
        if dedup:   # keys only here: the integer division to decode them is not free
            src, dst = np.divmod(_distinct(src * n + dst, target, rng), n)
    if src.size < target:
        raise DataError(f"rmat: could only place {src.size} distinct edges of {target} after "
                        f"{_MAX_ROUNDS} rounds; ask for fewer edges or more nodes")
    src, dst = src[:target], dst[:target]
    if permute:
        perm = rng.permutation(n)
        src, dst = perm[src], perm[dst]
    if symmetric:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    return make_graph(n, src, dst, "rmat", meta={
        "generator": "rmat", "a": a, "b": b, "c": c, "seed": seed, "symmetric": symmetric,
        "dedup": dedup, "permute": permute})


# ----------------------------------------------------------------------------------------------
# Planted-community dataset
# ----------------------------------------------------------------------------------------------
# train_per_class, val and test: None is the usual split (20 per class, 500, 1000) scaled down to
# what a small graph holds (_resolve_split).
DEFAULTS = dict(nodes=2000, edges=20000, features=64, sparsity=0.0, classes=7, seed=0,
                train_per_class=None, val=None, test=None, homophily=0.8, noise=3.0,
                power_law=2.5, format="auto", etypes=1, weighted=0)
_SPLIT_DEFAULTS = dict(train_per_class=20, val=500, test=1000)
_INT_KEYS = {"nodes", "edges", "features", "classes", "seed", "train_per_class", "val", "test", "etypes",
             "weighted"}
_FLOAT_KEYS = {"sparsity", "homophily", "noise", "power_law"}
_FORMATS = ("auto", "dense", "csr")
_TOPIC_BOOST = 4.0   # topic columns are kept up to this many times more often than average


def _spec_error(field: str, message: str):
    raise DataError(f"synthetic: {field}: {message}")


def _check_params(p: dict) -> None:
    if p["nodes"] < 2:
        _spec_error("nodes", f"must be >= 2, got {p['nodes']}")
    if p["classes"] < 1:
        _spec_error("classes", f"must be >= 1, got {p['classes']}")
    for key in ("edges", "features", "train_per_class", "val", "test"):
        if p[key] < 0:
            _spec_error(key, f"must be >= 0, got {p[key]}")
    if p["classes"] > p["nodes"]:
        _spec_error("classes", f"{p['classes']} classes for {p['nodes']} nodes")
    if not 0.0 <= p["sparsity"] < 1.0:
        _spec_error("sparsity", f"must lie in [0, 1), got {p['sparsity']}")
    if not 0.0 <= p["homophily"] <= 1.0:
        _spec_error("homophily", f"must lie in [0, 1], got {p['homophily']}")
    if p["noise"] < 0:
        _spec_error("noise", f"must be >= 0, got {p['noise']}")
    if p["power_law"] <= 1.0:
        _spec_error("power_law", f"degree exponent must be > 1, got {p['power_law']}")
    if p["format"] not in _FORMATS:
        _spec_error("format", f"must be one of {', '.join(_FORMATS)}, got {p['format']!r}")
    if p["train_per_class"] < 1:
        _spec_error("train_per_class", "must be >= 1 (an empty training set cannot train)")
    if p["test"] < 1:
        _spec_error("test", "must be >= 1")
    if p["etypes"] < 1:
        _spec_error("etypes", f"must be >= 1, got {p['etypes']}")
    if p["weighted"] not in (0, 1):
        _spec_error("weighted", f"must be 0 or 1, got {p['weighted']}")
    smallest_class = p["nodes"] // p["classes"]
    if p["train_per_class"] > smallest_class:
        _spec_error("train_per_class", f"{p['train_per_class']} exceeds the smallest class "
                                       f"({smallest_class} nodes)")
    rest = p["nodes"] - p["train_per_class"] * p["classes"]
    if p["val"] + p["test"] > rest:
        _spec_error("val", f"val + test = {p['val'] + p['test']} exceeds the {rest} nodes left after "
                           f"training nodes; lower val/test or raise nodes")
    undirected = p["edges"] // 2
    if undirected > p["nodes"] * (p["nodes"] - 1) // 2:
        _spec_error("edges", f"{p['edges']} edges do not fit a simple graph on {p['nodes']} nodes")


def _check_memory(p: dict) -> None:
    # what generating holds at once: the feature matrix (dense below sparsity 0.5), per node its
    # label, degree weight and masks, per edge the endpoints and the keys that deduplicate them
    dense = p["format"] == "dense" or (p["format"] == "auto" and p["sparsity"] < 0.5)
    stored = p["features"] * (1.0 if dense else 2 * (1.0 - p["sparsity"]))
    require_memory(int(p["nodes"] * (4 * stored + 40) + p["edges"] * 48),
                   f"synthetic: {p['nodes']} nodes, {p['edges']} edges, {p['features']} features")


class _InverseCdf:
    """``u -> first i with cum[i] > u`` through a guide table (Chen & Asau 1974).

    A plain ``searchsorted`` of millions of random values is cache-bound (~0.3 us each); the
    guide table jumps straight to the right neighbourhood, after which one or two vectorised
    steps finish the search.
    """

    def __init__(self, cum: np.ndarray):
        self.cum = cum
        self.buckets = 4 * cum.size
        self.scale = self.buckets / cum[-1]
        self.guide = np.searchsorted(cum, np.arange(self.buckets) / self.scale, side="right")

    def __call__(self, u: np.ndarray) -> np.ndarray:
        bucket = np.minimum((u * self.scale).astype(np.int64), self.buckets - 1)
        idx = self.guide[bucket]
        last = self.cum.size - 1
        while True:
            step = (self.cum[np.minimum(idx, last)] <= u) & (idx < last)
            if not step.any():
                return idx
            idx += step


def _community_edges(rng, labels, classes, num_edges, homophily, power_law):
    """Symmetric DC-SBM edges (both directions), no self loops or duplicates."""
    n = labels.size
    target = num_edges // 2
    if target == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    # power-law weights: P(w > t) ~ t^-(power_law - 1), hence degrees with the same tail
    weights = (1.0 - rng.random(n)) ** (-1.0 / (power_law - 1.0))
    order = np.argsort(labels, kind="stable")               # nodes grouped by class
    cum = np.cumsum(weights[order])
    class_end = np.cumsum(np.bincount(labels, minlength=classes))
    class_lo = np.concatenate([[0.0], cum])[class_end - np.bincount(labels, minlength=classes)]
    class_hi = cum[class_end - 1]
    total = cum[-1]

    locate = _InverseCdf(cum)

    def pick(u):  # u in [0, total): node chosen with probability proportional to its weight
        return order[locate(u)]

    keys = np.empty(0, np.int64)
    for _ in range(_MAX_ROUNDS):
        missing = target - keys.size
        if missing <= 0:
            break
        m = int(missing * 1.2) + 16
        src = pick(rng.random(m) * total)
        c = labels[src]
        inside = rng.random(m) < homophily
        lo = np.where(inside, class_lo[c], 0.0)
        hi = np.where(inside, class_hi[c], total)
        dst = pick(lo + rng.random(m) * (hi - lo))
        keep = src != dst
        s, d = np.minimum(src[keep], dst[keep]), np.maximum(src[keep], dst[keep])
        keys = _distinct(np.concatenate([keys, s * n + d]), target, rng)
    if keys.size < target:
        raise DataError(f"synthetic: edges: could only place {2 * keys.size} of {2 * target} distinct "
                        f"edges; lower edges or raise nodes")
    keys = keys[:target]
    s, d = keys // n, keys % n
    return np.concatenate([s, d]), np.concatenate([d, s])


def _keep_probabilities(rng, classes: int, width: int, sparsity: float) -> np.ndarray:
    """``p[c, j]``: chance that class-c rows keep column j; every row averages ``1 - sparsity``."""
    density = 1.0 - sparsity
    topic_of = rng.integers(classes, size=width)             # each column is one class's topic
    probs = np.empty((classes, width), np.float64)
    for c in range(classes):
        topic = topic_of == c
        t = int(topic.sum())
        if t == 0 or t == width:
            probs[c] = density
            continue
        p_in = min(1.0, _TOPIC_BOOST * density, density * width / t)
        p_out = (density * width - t * p_in) / (width - t)
        probs[c] = np.where(topic, p_in, p_out)
    return probs


def _features(rng, labels, classes, width, sparsity, noise, dense):
    n = labels.size
    signature = rng.standard_normal((classes, width)).astype(np.float32)
    probs = _keep_probabilities(rng, classes, width, sparsity).astype(np.float32)
    rows_per_chunk = max(1, _CHUNK_ENTRIES // width)
    out = np.zeros((n, width), np.float32) if dense else None
    pieces = []
    for start in range(0, n, rows_per_chunk):
        lab = labels[start:start + rows_per_chunk]
        # both layouts draw the same numbers, so dense and CSR hold identical values
        kept = rng.random((lab.size, width), dtype=np.float32) < probs[lab]
        values = rng.standard_normal((lab.size, width), dtype=np.float32)
        values *= np.float32(noise)
        values += signature[lab]
        values[values == 0] = np.float32(1e-3)   # a kept entry must stay non-zero (exact sparsity)
        if dense:
            np.multiply(values, kept, out=out[start:start + lab.size])
        else:
            r, col = np.nonzero(kept)
            pieces.append((start + r, col, values[r, col]))
    if dense:
        return out
    rows = np.concatenate([p[0] for p in pieces]) if pieces else np.empty(0, np.int64)
    cols = np.concatenate([p[1] for p in pieces]) if pieces else np.empty(0, np.int64)
    vals = np.concatenate([p[2] for p in pieces]) if pieces else np.empty(0, np.float32)
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    return sp.csr_matrix((vals, cols.astype(np.int64), indptr), shape=(n, width))  # rows come sorted


def _split(rng, labels, classes, train_per_class, val, test):
    n = labels.size
    train = np.zeros(n, bool)
    for c in range(classes):
        members = np.flatnonzero(labels == c)
        train[rng.permutation(members)[:train_per_class]] = True
    rest = rng.permutation(np.flatnonzero(~train))
    val_mask = np.zeros(n, bool)
    val_mask[rest[:val]] = True
    test_mask = np.zeros(n, bool)
    test_mask[rest[val:val + test]] = True
    return train, val_mask, test_mask


def _resolve_split(p: dict) -> None:
    """The split sizes not given: 20 training nodes per class, 500 validation and 1,000 test nodes,
    as the usual benchmarks split, where the graph holds them; on a smaller graph half of the
    smallest class for training (at least 1) and the nodes left shared 1:2 between validation and
    test (or whatever the given one leaves).  Sizes given are kept, and checked as given."""
    if p["train_per_class"] is None:
        smallest_class = p["nodes"] // p["classes"] if p["classes"] >= 1 else 0
        p["train_per_class"] = max(1, min(_SPLIT_DEFAULTS["train_per_class"], smallest_class // 2))
    rest = max(0, p["nodes"] - p["train_per_class"] * max(p["classes"], 1))
    if p["val"] is None and p["test"] is None:
        if rest >= _SPLIT_DEFAULTS["val"] + _SPLIT_DEFAULTS["test"]:
            p["val"], p["test"] = _SPLIT_DEFAULTS["val"], _SPLIT_DEFAULTS["test"]
        else:
            p["val"] = rest // 3
            p["test"] = max(1, rest - p["val"])
    elif p["val"] is None:
        p["val"] = max(0, min(_SPLIT_DEFAULTS["val"], rest - int(p["test"])))
    elif p["test"] is None:
        p["test"] = max(1, min(_SPLIT_DEFAULTS["test"], rest - int(p["val"])))


def _checked(params: dict) -> dict:
    """`params` (every keyword of synthetic_dataset) with numbers as floats where they may be
    fractional and the split's sizes resolved (_resolve_split), or a DataError naming the first
    bad one."""
    params = dict(params)
    for key in _INT_KEYS:
        if params[key] is None and key in _SPLIT_DEFAULTS:
            continue
        if not isinstance(params[key], (int, np.integer)) or isinstance(params[key], bool):
            _spec_error(key, f"expected an integer, got {params[key]!r}")
    for key in _FLOAT_KEYS:
        if not isinstance(params[key], (int, float, np.integer, np.floating)) or isinstance(params[key], bool):
            _spec_error(key, f"expected a number, got {params[key]!r}")
        params[key] = float(params[key])
    if params["seed"] < 0:
        _spec_error("seed", f"must be >= 0, got {params['seed']}")
    _resolve_split(params)
    _check_params(params)
    return params


def synthetic_dataset(nodes: int = 2000, edges: int = 20000, features: int = 64, sparsity: float = 0.0,
                      classes: int = 7, seed: int = 0, train_per_class: Optional[int] = None,
                      val: Optional[int] = None, test: Optional[int] = None, homophily: float = 0.8, noise: float = 3.0,
                      power_law: float = 2.5, format: str = "auto", etypes: int = 1, weighted: int = 0) -> Dataset:
    """A planted-community node-classification dataset (see the module docstring).

    ``edges`` counts directed edges of the symmetric graph (an odd count is rounded down).
    ``features=0`` gives a featureless dataset.  ``format``: ``auto`` = dense below sparsity 0.5,
    CSR from 0.5 on; ``dense`` / ``csr`` force one.  ``etypes`` > 1 gives every directed edge a
    type drawn uniformly (a typed graph for relational models); the graph itself is the same.
    ``weighted=1`` gives every edge a weight (``e.edge_weight``): drawn from [1, 2) between nodes
    of one class and from [0.1, 1) across classes, so weighing the messages helps; the graph is
    the same again.
    ``train_per_class``, ``val``, ``test``: the split; not given, 20 per class, 500 and 1,000,
    scaled down on a graph too small for them (_resolve_split).
    """
    params = _checked(dict(nodes=nodes, edges=edges, features=features, sparsity=sparsity, classes=classes,
                           seed=seed, train_per_class=train_per_class, val=val, test=test, homophily=homophily,
                           noise=noise, power_law=power_law, format=format, etypes=etypes, weighted=weighted))
    _check_memory(params)
    p = params
    s_labels, s_graph, s_features, s_split = np.random.SeedSequence(p["seed"]).spawn(4)

    labels = np.random.default_rng(s_labels).permutation(np.arange(p["nodes"]) % p["classes"]).astype(np.int64)
    src, dst = _community_edges(np.random.default_rng(s_graph), labels, p["classes"], p["edges"],
                                p["homophily"], p["power_law"])
    typed = {}
    if p["etypes"] > 1:        # a fifth stream: the four above are the same with or without types
        s_types = np.random.SeedSequence(p["seed"]).spawn(5)[4]
        typed = {"etype": np.random.default_rng(s_types).integers(0, p["etypes"], src.size),
                 "num_etypes": p["etypes"]}
    if p["weighted"]:          # a sixth stream, for the same reason
        s_weights = np.random.SeedSequence(p["seed"]).spawn(6)[5]
        draw = np.random.default_rng(s_weights).random(src.size)
        same = labels[src] == labels[dst]
        typed["edge_weight"] = np.where(same, 1.0 + draw, 0.1 + 0.9 * draw).astype(np.float32)
    graph = make_graph(p["nodes"], src, dst, "synthetic", meta={"generator": "planted communities"}, **typed)
    dense = p["format"] == "dense" or (p["format"] == "auto" and p["sparsity"] < 0.5)
    feats = None
    if p["features"] > 0:
        feats = _features(np.random.default_rng(s_features), labels, p["classes"], p["features"],
                          p["sparsity"], p["noise"], dense)
    train, val_mask, test_mask = _split(np.random.default_rng(s_split), labels, p["classes"],
                                        p["train_per_class"], p["val"], p["test"])
    return Dataset(name="synthetic", graph=graph, features=feats, labels=labels, train_mask=train,
                   val_mask=val_mask, test_mask=test_mask, num_classes=p["classes"],
                   meta={"source": "synthetic", "format": "synthetic", "params": params})


# ----------------------------------------------------------------------------------------------
# Spec strings: "synthetic" or "synthetic:nodes=100000,edges=2000000,sparsity=0.99"
# ----------------------------------------------------------------------------------------------
def is_synthetic_spec(spec: str) -> bool:
    return spec == "synthetic" or spec.startswith("synthetic:")


def _parse_int(key: str, text: str) -> int:
    cleaned = text.replace("_", "")
    try:
        return int(cleaned)
    except ValueError:
        pass
    try:
        value = float(cleaned)          # accepts 2e6
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value != int(value):
        _spec_error(key, f"expected an integer, got {text!r}")
    return int(value)


def _parse_float(key: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        _spec_error(key, f"expected a number, got {text!r}")
    if not math.isfinite(value):
        _spec_error(key, f"expected a finite number, got {text!r}")
    return value


def parse_synthetic_spec(spec: str) -> dict:
    """``synthetic:k=v,...`` -> keyword arguments of ``synthetic_dataset``."""
    if not is_synthetic_spec(spec):
        raise DataError(f"{spec!r}: not a synthetic spec (expected 'synthetic' or 'synthetic:key=value,...')")
    body = spec[len("synthetic:"):] if spec.startswith("synthetic:") else ""
    kwargs: dict = {}
    for item in filter(None, (part.strip() for part in body.split(","))):
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key or not value:
            raise DataError(f"synthetic: {item!r}: expected key=value")
        check_synthetic_key(key)
        if key in kwargs:
            _spec_error(key, "given twice")
        if key in _INT_KEYS:
            kwargs[key] = _parse_int(key, value)
        elif key in _FLOAT_KEYS:
            kwargs[key] = _parse_float(key, value)
        else:
            kwargs[key] = value
    return kwargs


def check_synthetic_spec(spec: str) -> None:
    """Refuse a synthetic spec that `synthetic_dataset` would refuse, without generating it (nor
    weighing its size against this machine's memory: a job may run on a larger one)."""
    _checked({**DEFAULTS, **parse_synthetic_spec(spec)})


def check_synthetic_key(key: str) -> None:
    if key not in DEFAULTS:
        close = difflib.get_close_matches(key, list(DEFAULTS), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise DataError(f"synthetic: unknown option '{key}'{hint} (options: {', '.join(DEFAULTS)})")

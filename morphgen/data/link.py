"""Link-prediction datasets: a graph (the training triples and their inverses as typed edges)
plus the held-out triples, read from the canonical ``.npz`` (``train_triples`` /
``valid_triples`` / ``test_triples`` int64 ``[n, 3]`` = (head, relation, tail); wn18rr).

The triples name relations ``0 .. R-1``; the graph's edge types ``0 .. 2R-1`` include the
inverse of each (``r + R``), so a model's per-edge-type relation weight covers both and the
decoder reads rows ``0 .. R-1``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from morphgen.data.dataset import GraphData
from morphgen.data.errors import DataError
from morphgen.graph import Graph

SPLITS = ("train", "valid", "test")


@dataclass(eq=False)
class LinkDataset(GraphData):
    name: str
    graph: Graph
    features: object                   # None: featureless, one learned embedding per node
    train_triples: np.ndarray          # int64 [n, 3]: head, relation, tail
    valid_triples: np.ndarray
    test_triples: np.ndarray
    num_relations: int
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        for split in SPLITS:
            setattr(self, f"{split}_triples", check_triples(
                f"{split}_triples", getattr(self, f"{split}_triples"), self.graph.num_nodes,
                self.num_relations, self.meta.get("source")))
        if self.train_triples.shape[0] == 0:
            raise DataError(f"{self.meta.get('source') or self.name}: train_triples is empty: nothing to train on")

    # the node-classification attributes a link task does not have
    labels = None
    num_classes = 0
    task = "link"

    @property
    def is_relational(self) -> bool:
        return True

    def known_triples(self) -> np.ndarray:
        """Every true triple (all splits): what filtered ranking removes from the candidates."""
        return np.concatenate([self.train_triples, self.valid_triples, self.test_triples])

    def summary(self) -> str:
        return (f"{self.name}: {self.num_nodes} nodes, {self.num_edges} edges, {self.graph.num_etypes} edge "
                f"type(s), {self.num_relations} relations, triples train/valid/test "
                f"{len(self.train_triples)}/{len(self.valid_triples)}/{len(self.test_triples)} (link prediction)")


def check_triples(key: str, triples, num_nodes: int, num_relations: int, source: Optional[str]) -> np.ndarray:
    where = f"{source}: " if source else ""
    arr = np.asarray(triples)
    if arr.ndim != 2 or arr.shape[1] != 3:
        raise DataError(f"{where}{key}: shape {arr.shape}, expected [n, 3] (head, relation, tail)")
    if not np.issubdtype(arr.dtype, np.integer):
        raise DataError(f"{where}{key}: dtype {arr.dtype}, expected int64")
    arr = arr.astype(np.int64, copy=False)
    for col, what, bound in ((0, "head", num_nodes), (1, "relation", num_relations), (2, "tail", num_nodes)):
        bad = np.flatnonzero((arr[:, col] < 0) | (arr[:, col] >= bound))
        if bad.size:
            i = int(bad[0])
            raise DataError(f"{where}{key}: row {i}: {what} {int(arr[i, col])} is outside [0, {bound})")
    return arr


def read_link_npz(z, graph: Graph, meta: dict, name: str, source: str) -> LinkDataset:
    """The link-prediction part of an opened archive (``morphgen.data.npz.NpzArchive``)."""
    if graph.etype is None:
        raise DataError(f"{source}: has triples but no edge_type: a link-prediction graph types its edges")
    triples = {split: z[f"{split}_triples"] for split in SPLITS}
    offset = meta.get("inverse_edge_type_offset")
    relations = int(offset) if isinstance(offset, int) and offset > 0 else graph.num_etypes
    return LinkDataset(name=name, graph=graph, features=None, num_relations=relations,
                       meta={"source": source, "format": "npz", "file_meta": meta,
                             "notes": ["link prediction: featureless (one learned embedding per node)"]},
                       **{f"{s}_triples": t for s, t in triples.items()})

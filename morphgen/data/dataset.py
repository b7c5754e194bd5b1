"""The ``Dataset`` record every loader returns: a graph plus features, labels and a split."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

import numpy as np
import scipy.sparse as sp

from morphgen.graph import Graph

Features = Union[np.ndarray, sp.csr_matrix, None]


class GraphData:
    """What every dataset derives from its ``graph`` and ``features`` (node classification and
    link prediction alike)."""

    @property
    def num_nodes(self) -> int:
        return self.graph.num_nodes

    @property
    def num_edges(self) -> int:
        return self.graph.num_edges

    @property
    def featureless(self) -> bool:
        return self.features is None

    @property
    def num_features(self) -> int:
        """Input width: F, or N for a featureless dataset (identity one-hot input)."""
        if self.features is None:
            return self.graph.num_nodes
        return int(self.features.shape[1])

    @property
    def feature_nnz(self) -> int:
        """Stored non-zeros, counted without densifying a sparse matrix."""
        f = self.features
        if f is None:
            return self.graph.num_nodes            # the identity matrix
        if sp.issparse(f):
            return int(np.count_nonzero(f.data))   # explicit zeros stored in CSR do not count
        return int(np.count_nonzero(f))

    @property
    def feature_sparsity(self) -> float:
        """Fraction of zero entries of the input matrix (identity for featureless: 1 - 1/N)."""
        rows = self.graph.num_nodes
        total = rows * self.num_features
        if total == 0:
            return 0.0
        return 1.0 - self.feature_nnz / total


@dataclass(eq=False)
class Dataset(GraphData):
    """A node-classification dataset.

    ``features`` is a dense float32 ``[N, F]`` array, a float32 ``scipy.sparse.csr_matrix`` or
    ``None`` (featureless: models use a learned embedding per node, i.e. one-hot identity input).
    ``labels`` is int64 ``[N]`` with ``-1`` for unlabelled nodes.  The masks are bool ``[N]``.
    Construction validates everything (see ``morphgen.data.validate``) and raises ``DataError``.
    """

    name: str
    graph: Graph
    features: Features
    labels: np.ndarray
    train_mask: np.ndarray
    val_mask: np.ndarray
    test_mask: np.ndarray
    num_classes: int
    meta: dict = field(default_factory=dict)
    task = "node"                      # node classification (LinkDataset: "link")

    def __post_init__(self):
        from morphgen.data.validate import validate_dataset  # local: validate imports this module
        validate_dataset(self, source=self.meta.get("source"))

    @property
    def is_relational(self) -> bool:
        return self.graph.etype is not None and self.graph.num_etypes > 1

    def summary(self) -> str:
        kind = "featureless" if self.features is None else (
            f"{'csr' if sp.issparse(self.features) else 'dense'} features, sparsity {self.feature_sparsity:.4f}")
        weighted = " (weighted)" if self.graph.edge_weight is not None else ""
        return (f"{self.name}: {self.num_nodes} nodes, {self.num_edges} edges{weighted}, "
                f"{self.graph.num_etypes} edge type(s), {self.num_features} input features ({kind}), "
                f"{self.num_classes} classes, train/val/test {int(self.train_mask.sum())}/"
                f"{int(self.val_mask.sum())}/{int(self.test_mask.sum())}")

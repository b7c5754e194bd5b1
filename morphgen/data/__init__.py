"""Datasets: loading (npz, raw Planetoid, edge lists, names), validation, synthetic generation.

The entry points are ``load_dataset`` (a trainable ``Dataset``) and ``load_graph`` (structure only);
see docs/data.md.
"""
from morphgen.data.dataset import Dataset
from morphgen.data.errors import DataError
from morphgen.data.link import LinkDataset
from morphgen.data.npz import read_npz, read_npz_graph, save_npz
from morphgen.data.edgelist import read_edge_list
from morphgen.data.planetoid import read_planetoid
from morphgen.data.resolve import ENV_VAR, load_dataset, load_graph, resolve_name, symmetrise_graph
from morphgen.data.synthetic import parse_synthetic_spec, rmat, synthetic_dataset

__all__ = ["Dataset", "LinkDataset", "DataError", "load_dataset", "load_graph", "save_npz", "read_npz", "read_npz_graph",
           "read_edge_list", "read_planetoid", "resolve_name", "symmetrise_graph", "rmat", "synthetic_dataset",
           "parse_synthetic_spec", "ENV_VAR"]

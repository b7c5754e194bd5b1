"""The hierarchical graph partitioner (METIS -> component bin packing -> greedy).

    result  = partition_graph(graph, K)                # which part owns each node, and why
    layouts = build_layouts(graph, result.assignment, K)  # per rank: owned, ghosts, CSR, halo lists
    save_partition(layouts, "parts/"); load_part("parts/", rank)
    quality_report(graph, result.assignment, K, feature_width=F)
"""
from .errors import PartitionError
from .hierarchical import STRATEGIES, PartitionResult, directed_edge_cut, partition_graph
from .io import load_part, load_partition, read_manifest, save_partition
from .layout import PartLayout, build_layouts
from .loads import LoadModel, imbalance
from .quality import QualityReport, quality_report


def vertex_balanced_reference(graph, num_parts: int, *, seed: int = 0):
    """Plain vertex-balanced METIS (what PyG/DGL do), for comparison in reports."""
    from .errors import check_graph, check_num_parts
    from .compare import reference_assignment
    check_graph(graph)
    return reference_assignment(graph, check_num_parts(num_parts), seed)


__all__ = ["PartitionError", "STRATEGIES", "PartitionResult", "partition_graph", "directed_edge_cut",
           "PartLayout", "build_layouts", "save_partition", "load_part", "load_partition",
           "read_manifest", "LoadModel", "imbalance", "QualityReport", "quality_report",
           "vertex_balanced_reference"]

import numpy as np
import pytest

from morphgen.graph import Graph
from morphgen.partition import PartitionError, build_layouts, partition_graph, quality_report
from morphgen.partition.loads import LoadModel

from tests.partition.partition_graphs import grid


def test_out_of_range_indices_name_the_field():
    g = Graph(4, [0, 1], [1, 2])
    g.src[1] = 9                    # corrupted after the Graph validated itself
    with pytest.raises(PartitionError, match=r"edge_index\[0\] \(source\): entry 1 is 9, outside \[0, 4\)"):
        partition_graph(g, 2)
    g = Graph(4, [0, 1], [1, 2])
    g.dst[0] = -1
    with pytest.raises(PartitionError, match=r"edge_index\[1\] \(destination\): entry 0 is -1"):
        build_layouts(g, np.zeros(4, np.int64), 1)


@pytest.mark.parametrize("k", [0, -2, 2.5, True, "3"])
def test_bad_part_count(k):
    with pytest.raises(PartitionError, match="num_parts"):
        partition_graph(grid(3, 3), k)


@pytest.mark.parametrize("kwargs, field", [
    (dict(strategy="spectral"), "strategy"),
    (dict(imbalance=0.5), "imbalance"),
    (dict(imbalance=float("nan")), "imbalance"),
    (dict(imbalance=1.2, max_imbalance=1.1), "max_imbalance"),
    (dict(relax_steps=0), "relax_steps"),
    (dict(metis_trials=0), "metis_trials"),
])
def test_bad_options(kwargs, field):
    with pytest.raises(PartitionError, match=field):
        partition_graph(grid(3, 3), 2, **kwargs)


def test_bad_assignment():
    g = grid(3, 3)
    with pytest.raises(PartitionError, match=r"assignment: expected shape \(9,\)"):
        build_layouts(g, np.zeros(8, np.int64), 2)
    with pytest.raises(PartitionError, match=r"assignment: node 4 has part 2, outside \[0, 2\)"):
        quality_report(g, np.array([0, 0, 0, 0, 2, 1, 1, 1, 1]), 2)
    with pytest.raises(PartitionError, match="integer part ids"):
        build_layouts(g, np.zeros(9), 2)


def test_bad_load_model():
    with pytest.raises(PartitionError, match="load degree"):
        LoadModel(degree="sideways")
    with pytest.raises(PartitionError, match="self_weight"):
        LoadModel(self_weight=-1)


def test_load_model_variants():
    g = Graph(3, [0, 0, 1], [1, 2, 2])
    assert LoadModel().vertex_loads(g).tolist() == [1, 2, 3]
    assert LoadModel(degree="out", self_weight=0).vertex_loads(g).tolist() == [2, 1, 0]
    assert LoadModel(degree="both", self_weight=2).vertex_loads(g).tolist() == [4, 4, 4]
    # greedy places the heaviest vertex first, so the load model decides who sits alone
    by_out = partition_graph(g, 2, load_model=LoadModel(degree="out"), strategy="greedy")
    assert by_out.assignment.tolist() == [0, 1, 1]
    by_in = partition_graph(g, 2, strategy="greedy")
    assert by_in.assignment.tolist() == [1, 1, 0]

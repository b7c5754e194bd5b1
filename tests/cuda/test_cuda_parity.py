"""The CUDA backend computes what the numpy interpreter and the OpenMP backend compute.

Forward loss and every weight gradient of each model fixture against the interpreter (as
tests/backend does for OpenMP), then whole `morphgen train` runs of the examples against
`--backend openmp`: the loss of every epoch and the accuracies, with dropout on (the mask is
one function of seed, epoch, site and element on every backend).  Without a GPU these run the
kernels through the SIMT emulation.
"""
from __future__ import annotations

import numpy as np
import pytest

from tests.backend.harness import assert_matches_interpreter
from tests.backend.weighted_programs import weighted_programs
from morphgen.data.npz import save_npz
from morphgen.graph import Graph
from tests.e2e.support import datasets_dir, example, typed_dataset, write_link_npz
from tests.ir import models
from tests.ir.helpers import random_data, random_graph
from tests.mpi.support import assert_same_run, train

CASES = {
    "gcn": lambda: models.gcn(dropout=0.0),
    "gcn_mean": lambda: models.gcn(dropout=0.0, norm="mean"),
    "gcn_written_out": lambda: models.gcn_written_out(),
    "gcn_message_passing": lambda: models.gcn_message_passing(),
    "sage_mean": lambda: models.sage("mean"),
    "sage_max": lambda: models.sage("max"),
    "gin": lambda: models.gin(),
    "gat": lambda: models.gat(),
    "gat_heads": lambda: models.gat_heads(),
    "normed": lambda: models.normed(),
    "normed_relu": lambda: models.normed_relu(),
}
SYNTHETIC = "synthetic:nodes=300,edges=2400,features=24,classes=4,train_per_class=12,val=60,test=100"
HOMOGENEOUS_EXAMPLES = ["gcn", "gcn3", "sage", "gin", "gat", "appnp", "gcnii", "edgeconv"]
WEIGHTED = weighted_programs()


def _check(program, graph, x, labels, mask, classes, features="dense"):
    assert_matches_interpreter(program, graph, x, labels, mask, classes, features=features, backend="cuda")


WIDTHS = [(name, w) for name in sorted(CASES) for w in (3, 300)] + [("gat", 33), ("sage_max", 33)]
# GAT with attention dropout: its fused backward regenerates the dropout's mask (edges.cuh).
CASES["gat_heads_dropped"] = lambda: models.gat_heads(attention_dropout=0.5)
WIDTHS.append(("gat_heads_dropped", 5))


@pytest.mark.parametrize("name,width", WIDTHS)
def test_models_match_the_interpreter(name, width):
    """Widths below one warp, just above it, and above the 256 threads one row gets."""
    graph = random_graph(n=12, e=30, seed=width)
    x, labels, mask = random_data(graph, width, classes=4)
    _check(CASES[name](), graph, x, labels, mask, classes=4)


# Models whose aggregations run at a chosen width (the rewrites aggregate a layer's narrower
# side, so the input width alone does not choose it): the input is aggregated at width 3 (groups
# of 8 threads, narrower than a warp); hidden layers of 40 (two-warp groups), 300 (eight warps)
# and 1100 (eight warps, several passes over the features), forward and transposed.
AGGREGATION_WIDTHS = {
    3: (lambda: models.gcn(dropout=0.0), 3),
    40: (lambda: models.gcn(dropout=0.0, norm="mean", hidden=40, layers=3), 40),
    300: (lambda: models.sage("mean", hidden=300, layers=3), 300),
    1100: (lambda: models.gcn(dropout=0.0, hidden=1100, layers=3), 1100),
}


@pytest.mark.parametrize("lanes", ["4", "8", "16", "32"])
@pytest.mark.parametrize("name", ["gat", "gat_heads_dropped"])
def test_edge_softmax_lane_groups_match_the_interpreter(monkeypatch, name, lanes):
    """The edge softmaxes give each (destination, head) pair a group of 4-32 lanes of a warp
    (chosen by the average in-degree, forced here): in-degrees of 0 to past 32 (a group walks a
    hub's segment in strides), one and several heads, the backward with attention dropout."""
    monkeypatch.setenv("MORPHGEN_CUDA_SOFTMAX_LANES", lanes)
    graph = random_graph(n=40, e=1100, seed=5)
    assert graph.in_degree[0] == 0 and graph.in_degree.max() > 32
    x, labels, mask = random_data(graph, 9, classes=4)
    _check(CASES[name](), graph, x, labels, mask, classes=4)


@pytest.mark.parametrize("block_edges", ["0", "20"])
@pytest.mark.parametrize("name", ["gat", "gat_heads_dropped", "hgt"])
def test_edge_softmax_blocks_for_long_rows_match_the_interpreter(monkeypatch, name, block_edges):
    """Destinations with more in-edges than $MORPHGEN_CUDA_SOFTMAX_BLOCK_EDGES get a block per
    (destination, head) in the edge softmaxes (edges.cuh, BlockGroup), the others their lane
    groups: every destination with an in-edge (0), or those above 20 in-edges of a graph whose
    in-degrees run from 0 to past 32.  GAT's fused attention and its backward (with attention
    dropout), HGT's plain softmax and its backward."""
    monkeypatch.setenv("MORPHGEN_CUDA_SOFTMAX_BLOCK_EDGES", block_edges)
    graph = random_graph(n=40, e=1100, seed=5, **({"etypes": 3, "ntypes": 2} if name == "hgt" else {}))
    assert graph.in_degree[0] == 0 and graph.in_degree.max() > 32
    x, labels, mask = random_data(graph, 9, classes=4)
    _check(models.hgt() if name == "hgt" else CASES[name](), graph, x, labels, mask, classes=4)


@pytest.mark.parametrize("split_edges", [None, "1", "5", "64"])
@pytest.mark.parametrize("width", [3, 40, 300, 1100])
def test_aggregation_rows_match_the_interpreter(monkeypatch, width, split_edges):
    """Rows of 38 edges on average, walked in chunks of up to 32 edges per group narrower than a
    warp (width 3), per warp of a two-warp row (40) and of an eight-warp row (300, 1100).  With
    $MORPHGEN_CUDA_SPLIT_EDGES, rows longer than that are walked in segments whose partial sums
    the last segment to finish adds up (aggregate.cuh, RowSplit), forward and transposed:
    one-edge segments, rows of 2-14 segments, and only the longest rows split (64); rows wider
    than one pass over their features (1100) stay whole.  None: the default, no row split here."""
    if split_edges is not None:
        monkeypatch.setenv("MORPHGEN_CUDA_SPLIT_EDGES", split_edges)
    make, features = AGGREGATION_WIDTHS[width]
    graph = random_graph(n=80, e=3000, seed=width)
    x, labels, mask = random_data(graph, features, classes=4)
    _check(make(), graph, x, labels, mask, classes=4)


@pytest.mark.parametrize("width", [3, 40, 300, "gin"])
def test_atomic_transposed_aggregations_match_the_interpreter(monkeypatch, width):
    """$MORPHGEN_CUDA_TRANSPOSE=atomic: the backward of sum and mean aggregations walks the
    forward CSR and adds into the sources' rows by atomics: GCN's normalised sum with self loops
    (width 3), a mean with self loops (40), SAGE's mean without (300), GIN's plain sum."""
    monkeypatch.setenv("MORPHGEN_CUDA_TRANSPOSE", "atomic")
    make, features = (CASES["gin"], 5) if width == "gin" else AGGREGATION_WIDTHS[width]
    graph = random_graph(n=80, e=600, seed=8)
    x, labels, mask = random_data(graph, features, classes=4)
    _check(make(), graph, x, labels, mask, classes=4)


@pytest.mark.parametrize("split_edges", ["0", "1", "5"])
@pytest.mark.parametrize("name", ["gat_heads", "gat_heads_dropped"])
def test_attention_weighted_sums_of_split_rows_match_the_interpreter(monkeypatch, name, split_edges):
    """GAT's messages and their transpose: the aggregation kernel with a weight per edge and head,
    rows whole (0) and split."""
    monkeypatch.setenv("MORPHGEN_CUDA_SPLIT_EDGES", split_edges)
    graph = random_graph(n=80, e=3000, seed=5)
    x, labels, mask = random_data(graph, 5, classes=4)
    _check(CASES[name](), graph, x, labels, mask, classes=4)


@pytest.mark.parametrize("model", ["gcn", "sage"])
def test_split_rows_train_as_on_openmp_under_shuffled_schedules(tmp_path, monkeypatch, model):
    """Two-edge segments finishing in shuffled orders (threads and blocks in the emulation; on a
    GPU, in the order its scheduler runs them): the sums are still left to the last segment of
    each row, and the arrival counts are ready for the next launch."""
    from tests.cuda.conftest import gpu_present
    reference_run = train(tmp_path, model, SYNTHETIC, epochs=2)
    monkeypatch.setenv("MORPHGEN_CUDA_SPLIT_EDGES", "2")
    if not gpu_present():
        monkeypatch.setenv("MORPHGEN_SIMT_SHUFFLE", "11")
    assert_same_run(reference_run, train(tmp_path, model, SYNTHETIC, backend="cuda", epochs=2), 1e-4,
                    f"{model} on cuda, split rows, shuffled schedules")


@pytest.mark.parametrize("setting,value,message", [
    ("MORPHGEN_CUDA_SPLIT_EDGES", "many", "MORPHGEN_CUDA_SPLIT_EDGES must be a number of edges"),
    ("MORPHGEN_CUDA_TRANSPOSE", "sideways", "MORPHGEN_CUDA_TRANSPOSE must be 'by-source' or 'atomic'")])
def test_a_bad_setting_is_refused(monkeypatch, setting, value, message):
    monkeypatch.setenv(setting, value)
    graph = random_graph(n=12, e=30, seed=1)
    x, labels, mask = random_data(graph, 3, classes=4)
    with pytest.raises(Exception, match=message):
        _check(CASES["gcn"](), graph, x, labels, mask, classes=4)


@pytest.mark.parametrize("features", ["dense", "csr"])
def test_dense_and_sparse_feature_paths_match_the_interpreter(features):
    graph = random_graph(n=12, e=30, seed=7)
    x, labels, mask = random_data(graph, 47, classes=3)
    x[np.random.default_rng(0).random(x.shape) < 0.8] = 0.0
    _check(models.gcn(dropout=0.0), graph, x, labels, mask, classes=3, features=features)


@pytest.mark.parametrize("name", sorted(WEIGHTED))
def test_programs_reading_edge_weights_match_the_interpreter(name):
    graph = random_graph(n=40, e=200, seed=4, weighted=True)
    x, labels, mask = random_data(graph, 6, classes=3)
    _check(WEIGHTED[name](), graph, x, labels, mask, classes=3)


@pytest.mark.parametrize("model", [*HOMOGENEOUS_EXAMPLES, "gcn_weighted", "bench/gcn3_weighted"])
def test_examples_train_as_on_openmp(tmp_path, monkeypatch, model):
    """bench/gcn3_weighted: the weighted aggregation of the features hoisted, with its weights."""
    monkeypatch.setenv("MORPHGEN_OPT_LEVEL", "0")    # both builds at -O0: numbers, not speed (a third faster)
    data = SYNTHETIC + (",weighted=1" if "weighted" in model else "")
    reference_run = train(tmp_path, model, data, epochs=3)
    assert_same_run(reference_run, train(tmp_path, model, data, backend="cuda", epochs=3), 1e-4,
                    f"{model} on cuda")


@pytest.mark.parametrize("model", ["gat", "sage", "rgat", "rgcn_link"])
def test_kernels_have_no_barrier_races(tmp_path, monkeypatch, model):
    """The emulation resumes threads in a shuffled order after every barrier and shuffle
    (MORPHGEN_SIMT_SHUFFLE): a kernel that reads shared memory or a partner lane's value before
    it is written then computes something else.  Only meaningful in the emulation."""
    from tests.cuda.conftest import gpu_present
    if gpu_present():
        pytest.skip("runs the SIMT emulation; on a GPU compute-sanitizer's racecheck does this")
    data = {"rgat": lambda: save_npz(typed_dataset(features=7, nodes=64, edges=320), tmp_path / "typed.npz"),
            "rgcn_link": lambda: write_link_npz(tmp_path / "kg.npz")}.get(model, lambda: SYNTHETIC)()
    reference_run = train(tmp_path, model, data, epochs=1)
    monkeypatch.setenv("MORPHGEN_SIMT_SHUFFLE", "7")
    assert_same_run(reference_run, train(tmp_path, model, data, backend="cuda", epochs=1), 1e-4,
                    f"{model} on cuda, shuffled schedules")


def test_sparse_features_of_cora_train_as_on_openmp(tmp_path):
    """Cora's features are 98.7% zeros: the CSR forward and CSC weight gradient, dropout inside."""
    data = str(datasets_dir() / "cora.npz")
    reference_run = train(tmp_path, "gcn", data, epochs=3)
    run = train(tmp_path, "gcn", data, backend="cuda", epochs=3)
    assert run["feature_path"] == reference_run["feature_path"] == "sparse"
    assert_same_run(reference_run, run, 1e-4, "gcn on cora, cuda")


def test_checkpoints_move_between_cuda_and_openmp(tmp_path):
    whole = train(tmp_path, "gcn", SYNTHETIC, epochs=4)
    ck = tmp_path / "cuda.ck"
    train(tmp_path, "gcn", SYNTHETIC, "--checkpoint", ck, backend="cuda", epochs=2)
    resumed = train(tmp_path, "gcn", SYNTHETIC, "--resume", ck, epochs=2, tag="resumed")
    resumed = dict(resumed, history=[dict(r, epoch=r["epoch"] + 2) for r in resumed["history"]])
    assert_same_run(dict(whole, history=whole["history"][2:]), resumed, 1e-4, "openmp from a cuda checkpoint")


@pytest.mark.parametrize("chunk_rows", [None, "7"])
@pytest.mark.parametrize("name", ["rgcn", "rgcn_bases", "rgat", "hgt"])
def test_relational_models_match_the_interpreter(monkeypatch, name, chunk_rows):
    """Typed linear through the gather/scatter GEMM; rgcn featureless (embedding rows).  The
    weight gradients and per-type row sums add partial sums of chunks of each type's rows: one
    chunk per type by default here, several (and a last, shorter one) with 7-row chunks."""
    if chunk_rows is not None:
        monkeypatch.setenv("MORPHGEN_CUDA_TYPED_CHUNK_ROWS", chunk_rows)
    graph = random_graph(n=40, e=200, seed=3, etypes=3, ntypes=2)
    x, labels, mask = random_data(graph, None if name.startswith("rgcn") else 7, classes=3)
    program = models.rgcn(bases=2) if name == "rgcn_bases" else getattr(models, name)()
    _check(program, graph, x, labels, mask, classes=3)


@pytest.mark.parametrize("layout", ["compact", "edge"])
@pytest.mark.parametrize("name", ["rgcn", "rgcn_bases", "rgat", "hgt"])
def test_segment_sums_of_split_segments_match_the_interpreter(monkeypatch, name, layout):
    """Segmented sums run on the aggregation kernel with long segments split (ops.cuh:
    segment_sum): with $MORPHGEN_CUDA_SPLIT_EDGES=2 every segment of more than two entries is
    walked in pieces, in the scatters to destinations and to sources, the sums of edge gradients
    into typed rows and of rows into nodes (both edge-end layouts), and the featureless rows'
    gradient (rgcn: distinct (type, node) keys read by up to 15 edges)."""
    monkeypatch.setenv("MORPHGEN_CUDA_SPLIT_EDGES", "2")
    graph = random_graph(n=40, e=400, seed=4, etypes=3, ntypes=2)
    x, labels, mask = random_data(graph, None if name.startswith("rgcn") else 7, classes=3)
    program = models.rgcn(bases=2) if name == "rgcn_bases" else getattr(models, name)()
    assert_matches_interpreter(program, graph, x, labels, mask, 3, backend="cuda", edge_typed_layout=layout)


def max_reduction(kind):
    """One layer reducing a neighbourhood by max: an aggregation (with or without self loops), or
    a scatter of edge messages to destinations or to sources (tanh of the gathered rows, so that
    no pass makes it an aggregation)."""
    m = models.ModelBuilder(f"max_{kind}")
    h = m.emit("linear", m.x, m.param("W", ("F", "C")))
    if kind.startswith("aggregate"):
        reduced = m.emit("aggregate", h, reduce="max", self_loops=kind == "aggregate_loops")
    else:
        end = kind.removeprefix("scatter_")
        messages = m.emit("tanh", m.emit("gather", h, end="src" if end == "dst" else "dst"))
        reduced = m.emit("scatter", messages, reduce="max", end=end)
    return m.finish(m.emit("add", reduced, h))


@pytest.mark.parametrize("split_edges", ["1", "5"])
@pytest.mark.parametrize("kind", ["aggregate", "aggregate_loops", "scatter_dst", "scatter_src"])
def test_max_reductions_of_split_rows_match_the_interpreter(monkeypatch, kind, split_edges):
    """Max aggregations and max scatters walk rows longer than the split length in pieces, each
    piece's first maximum compared in piece order afterwards (SplitRowMaxOp, SplitSegmentMaxOp),
    and the max aggregation's backward walks a source's long out-edge list in pieces whose sums
    are added afterwards, a parallel edge counted once even where it starts a piece: rows of 44
    edges on average, one in six of them doubled by a parallel edge, one-edge and five-edge
    pieces."""
    monkeypatch.setenv("MORPHGEN_CUDA_SPLIT_EDGES", split_edges)
    simple = random_graph(n=80, e=3000, seed=6)
    doubled = np.random.default_rng(6).choice(simple.num_edges, 500, replace=False)
    graph = Graph(simple.num_nodes, np.concatenate([simple.src, simple.src[doubled]]),
                  np.concatenate([simple.dst, simple.dst[doubled]]))
    x, labels, mask = random_data(graph, 5, classes=4)
    _check(max_reduction(kind), graph, x, labels, mask, classes=4)


@pytest.mark.parametrize("name", ["gcn", "gcn_dropped", "typed_attention"])
def test_long_feature_columns_in_pieces_match_the_interpreter(monkeypatch, name):
    """The sparse features' products walk rows, and their weight gradients columns, of more
    nonzeros than the split length in pieces and add the pieces afterwards (csr_linear_kernel,
    csc_weight_grad_kernel, SplitRowSumOp): the plain features' rows and columns (with the input
    dropout's mask applied in each piece: gcn_dropped) and the typed ones' (type, column) groups."""
    monkeypatch.setenv("MORPHGEN_CUDA_SPLIT_EDGES", "3")
    graph = random_graph(n=60, e=300, seed=2, etypes=3, ntypes=2)
    x, labels, mask = random_data(graph, 20, classes=3)
    x[np.random.default_rng(3).random(x.shape) < 0.6] = 0.0
    program = {"gcn": lambda: models.gcn(dropout=0.0), "gcn_dropped": lambda: models.gcn(dropout=0.5),
               "typed_attention": models.typed_attention}[name]()
    assert_matches_interpreter(program, graph, x, labels, mask, 3, features="csr", backend="cuda")


@pytest.mark.parametrize("layout,chunk_rows", [("compact", None), ("edge", None), ("compact", "20")])
@pytest.mark.parametrize("name", ["rgat", "hgt"])
def test_typed_linears_of_gathered_rows_match_the_interpreter(monkeypatch, name, layout, chunk_rows):
    """The products of rows read at edge ends (runtime/edge_rows.h) in both layouts: more rows
    than one 16-row tile, many edges per (source, type) pair, an edge type no edge has (a type
    without chunks); 20-row chunks split each type's rows for the weight gradients."""
    if chunk_rows is not None:
        monkeypatch.setenv("MORPHGEN_CUDA_TYPED_CHUNK_ROWS", chunk_rows)
    graph = random_graph(n=80, e=600, seed=9, etypes=5, ntypes=2)
    graph.num_etypes = 6
    x, labels, mask = random_data(graph, 37, classes=3)
    assert_matches_interpreter(getattr(models, name)(), graph, x, labels, mask, 3, backend="cuda",
                               edge_typed_layout=layout)


@pytest.mark.parametrize("layout", ["compact", "gathered"])
def test_block_diagonal_typed_linears_match_the_interpreter(layout):
    """Relation matrices of 4 diagonal blocks per edge type (HGTConv's per-head k_rel and v_rel),
    run as 4 times the rows one block wide, at edge ends in place or gathered first."""
    graph = random_graph(n=80, e=600, seed=9, etypes=5, ntypes=2)
    x, labels, mask = random_data(graph, 37, classes=3)
    assert_matches_interpreter(models.hgt(hidden=16, blocks=4), graph, x, labels, mask, 3, backend="cuda",
                               edge_typed_layout=layout)


@pytest.mark.parametrize("layout", ["compact", "edge"])
def test_typed_linears_of_sparse_feature_rows_match_the_interpreter(layout):
    """Projections of the input features at edge ends read CSR rows in place (the sparse feature
    path): the product rows' sums of W_t rows, and the weight gradient by (type, column)."""
    graph = random_graph(n=90, e=700, seed=9, etypes=5, ntypes=2)
    x, labels, mask = random_data(graph, 70, classes=3)
    x[np.random.default_rng(1).random(x.shape) < 0.9] = 0.0
    assert_matches_interpreter(models.typed_attention(), graph, x, labels, mask, 3, features="csr", backend="cuda",
                               edge_typed_layout=layout)


@pytest.mark.parametrize("model,featureless", [("rgcn", False), ("rgat", False), ("hgt", False),
                                                ("rgcn", True), ("rgat", True), ("rgcn_bases", True)])
def test_relational_examples_train_as_on_openmp(tmp_path, model, featureless):
    data = save_npz(typed_dataset(features=None if featureless else 7, nodes=64, edges=320), tmp_path / "typed.npz")
    assert_same_run(train(tmp_path, model, data, epochs=3), train(tmp_path, model, data, backend="cuda", epochs=3), 1e-4,
                    f"{model} ({'featureless' if featureless else 'features'}) on cuda")


def test_every_typed_gemm_coarsening_trains_as_on_openmp(tmp_path, monkeypatch):
    """HGT's typed products (64 and 3 columns, their input and weight gradients) with each column
    coarsening forced: the choice changes the blocks, never the sums."""
    data = save_npz(typed_dataset(features=7, nodes=64, edges=320), tmp_path / "typed.npz")
    reference = train(tmp_path, "hgt", data, epochs=2)
    for coarsening in ("1", "2", "4"):
        monkeypatch.setenv("MORPHGEN_CUDA_TYPED_COARSEN", coarsening)
        assert_same_run(reference, train(tmp_path, "hgt", data, backend="cuda", epochs=2, tag=coarsening), 1e-4,
                        f"hgt on cuda, coarsening {coarsening}")


@pytest.mark.parametrize("variable,value,message,model", [
    ("MORPHGEN_CUDA_TYPED_COARSEN", "3", "must be 1, 2 or 4, not '3'", "rgcn"),
    ("MORPHGEN_CUDA_TYPED_CHUNK_ROWS", "0", "must be a number of rows >= 1, not '0'", "rgcn"),
    ("MORPHGEN_CUDA_SOFTMAX_LANES", "12", "must be 4, 8, 16 or 32, not '12'", "gat"),
    ("MORPHGEN_CUDA_SOFTMAX_BLOCK_EDGES", "-1", "must be a number of edges >= 0, not '-1'", "gat"),
])
def test_a_bad_schedule_setting_is_refused(tmp_path, monkeypatch, variable, value, message, model):
    from tests.e2e.support import run_cli
    data = save_npz(typed_dataset(features=7, nodes=64, edges=320), tmp_path / "typed.npz")
    monkeypatch.setenv(variable, value)
    proc = run_cli("train", example(model), "--backend", "cuda", "--dataset", data, "--epochs", 1, "--quiet")
    assert proc.returncode != 0 and f"${variable} {message}" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_link_prediction_trains_as_on_openmp(tmp_path):
    """DistMult's loss and gradients on the device (kernels/link.cuh), triples uploaded every epoch:
    the losses of every epoch and the ranking of the held-out triples as with --backend openmp (the
    gradients' atomics may change the last bits, not more)."""
    data = write_link_npz(tmp_path / "kg.npz")
    reference = train(tmp_path, "rgcn_link", data, epochs=3)
    run = train(tmp_path, "rgcn_link", data, backend="cuda", epochs=3)
    assert_same_run(reference, run, 1e-4, "rgcn_link on cuda")
    for key in ("valid_mrr", "test_mrr", "test_hits@10"):
        assert run[key] == pytest.approx(reference[key], rel=1e-3), key


def test_an_op_the_cuda_op_layer_lacks_is_refused_with_its_location(monkeypatch):
    """The emitter checks every kernel it emits against ops.cuh's list: a kernel missing there is a
    located compile error, not a C++ build failure."""
    from morphgen.backends.cuda import emitter as cuda_emitter
    from morphgen.backends.openmp.emitter import UnsupportedInput
    from morphgen.pipeline import lower
    monkeypatch.setattr(cuda_emitter, "SUPPORTED", cuda_emitter.SUPPORTED - {"mg::op::typed_linear"})
    program = lower(example("rgcn"), {"F": 7, "C": 3, "N": 64, "etypes": 3, "ntypes": 2})
    with pytest.raises(UnsupportedInput, match=r"rgcn\.mp:\d+:\d+: error: .*not available on the cuda backend yet"):
        cuda_emitter.CUDAEmitter(program).emit()


def test_the_basis_lookups_gradients_of_one_g_sum_it_once():
    """rgcn_bases's coefficient and bases gradients read the same G: on CUDA the second reads the
    per-(row, type) sums of G that the first made (shares_basis_lookup_sums); OpenMP's kernels sum
    inside and take no such flag."""
    import re
    from morphgen.backends.cuda.emitter import CUDAEmitter
    from morphgen.backends.openmp.emitter import OpenMPEmitter
    from morphgen.pipeline import lower
    dims = {"F": 7, "C": 3, "N": 64, "etypes": 3, "ntypes": 2}

    def calls(emitter):
        program = lower(example("rgcn_bases"), dims, featureless=True, bases_per_lookup=True)
        source = "\n".join(emitter(program).emit().values())
        return re.findall(r"mg::op::basis_lookup_(coef|bases)_grad\((.*?)\);", source)
    cuda = calls(CUDAEmitter)
    assert [kind for kind, _ in cuda] == ["coef", "bases"] * (len(cuda) // 2) and cuda
    for (_, first), (_, second) in zip(cuda[::2], cuda[1::2]):
        assert not first.endswith("true") and second.endswith(", true")
        assert first.split(", ")[2] == second.split(", ")[2]      # the same G
    assert not any(args.endswith("true") for _, args in calls(OpenMPEmitter))


def test_kernel_timers_can_count_without_reading_the_clock():
    """`morphgen train` without --profile turns the CUDA timers' events off (time_kernels(False)):
    calls, bytes and flops are still counted, no time is read; on again, time is read."""
    import morphgen
    from morphgen.data import load_dataset
    model = morphgen.compile(example("gcn"), backend="cuda", threads=1)
    model.bind(load_dataset(SYNTHETIC))
    model.session.time_kernels(False)
    model.session.train_epoch()
    rows = [r for r in model.session.timers() if r["calls"]]
    assert rows and all(r["seconds"] == 0 and r["bytes"] > 0 for r in rows)
    model.session.time_kernels(True)
    model.session.reset_timers()
    model.session.train_epoch()
    assert sum(r["seconds"] for r in model.session.timers()) > 0

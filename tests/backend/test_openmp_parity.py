"""Every model fixture: the generated OpenMP code agrees with the numpy IR interpreter.

Forward (loss) and generated backward (weight gradients, read back through one SGD step with
learning rate 1) on small directed graphs with isolated and zero in-degree nodes.
"""
from pathlib import Path

import numpy as np
import pytest

from morphgen.frontend import compile_file
from tests.backend.harness import assert_matches_interpreter
from tests.ir import models
from tests.ir.helpers import random_data, random_graph

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
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
    "normed_reread": lambda: models.normed_reread(),
    "normed_relu": lambda: models.normed_relu(),
}
# Hidden layers wider than 32: their aggregations run in 64-float tiles (one width is enough).
WIDE = {
    "sage_mean_wide": lambda: models.sage("mean", hidden=70),
    "sage_max_wide": lambda: models.sage("max", hidden=40),
}


def _check(program, graph, x, labels, mask, classes, features="dense", edge_typed_layout="auto"):
    assert_matches_interpreter(program, graph, x, labels, mask, classes, features=features, backend="openmp",
                               edge_typed_layout=edge_typed_layout)


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("width", [3, 33])
def test_homogeneous_models_match_interpreter(name, width):
    graph = random_graph(n=12, e=30, seed=width)
    x, labels, mask = random_data(graph, width, classes=4)
    _check(CASES[name](), graph, x, labels, mask, classes=4)


@pytest.mark.parametrize("name", sorted(WIDE))
def test_wide_hidden_layers_match_interpreter(name):
    graph = random_graph(n=12, e=30, seed=33)
    x, labels, mask = random_data(graph, 33, classes=4)
    _check(WIDE[name](), graph, x, labels, mask, classes=4)


@pytest.mark.parametrize("features", ["dense", "csr"])
def test_dense_and_sparse_feature_paths_agree(features):
    graph = random_graph(n=12, e=30, seed=7)
    x, labels, mask = random_data(graph, 47, classes=3)
    x[np.random.default_rng(0).random(x.shape) < 0.8] = 0.0
    _check(models.gcn(dropout=0.0), graph, x, labels, mask, classes=3, features=features)


@pytest.mark.parametrize("features", ["dense", "csr"])
def test_sage_sums_inside_their_products_match_interpreter_on_both_feature_paths(features):
    """The first layer's add runs inside the product of the input features, which adds the
    residual after its dense product or its sparse blocks (plan_residual_adds)."""
    graph = random_graph(n=12, e=30, seed=5)
    x, labels, mask = random_data(graph, 47, classes=3)
    x[np.random.default_rng(1).random(x.shape) < 0.8] = 0.0
    _check(models.sage("mean"), graph, x, labels, mask, classes=3, features=features)


@pytest.mark.parametrize("name", ["rgcn", "rgcn_bases", "rgat", "hgt"])
def test_relational_models_match_interpreter(name):
    graph = random_graph(n=12, e=30, seed=3, etypes=3, ntypes=2)
    featureless = name.startswith("rgcn")
    x, labels, mask = random_data(graph, None if featureless else 7, classes=3)
    program = models.rgcn(bases=2) if name == "rgcn_bases" else getattr(models, name)()
    _check(program, graph, x, labels, mask, classes=3)


@pytest.mark.parametrize("types", ["scattered", "in_blocks"])
@pytest.mark.parametrize("features", ["dense", "csr"])
def test_hgt_example_with_per_type_biases_in_its_products_matches_interpreter(features, types):
    """examples/hgt.mp: each ``h * K[v.ntype] + bK[v.ntype]`` adds its per-type bias rows inside
    the typed linear, the input projection's ``+ bin[v.ntype]`` and relu inside the product of
    the input features (either format), and the backward's sums of input gradients inside the
    typed input gradients (plan_typed_biases, plan_residual_adds).  Node types scattered over
    the rows (the kernels' gathered tiles) and laid out in blocks (tiles multiplied in place).
    The attention's dots, the weighted sums of the messages and the scaled gathers of their
    gradient read stored edge rows and node rows in place (plan_edge_traversals)."""
    graph = random_graph(n=300, e=2500, seed=13, etypes=3, ntypes=3)
    if types == "in_blocks":
        graph.ntype = np.sort(graph.ntype)
    x, labels, mask = random_data(graph, 40, classes=3)
    x[np.random.default_rng(2).random(x.shape) < 0.8] = 0.0
    _check(compile_file(EXAMPLES / "hgt.mp"), graph, x, labels, mask, classes=3, features=features)


def test_per_type_biases_and_edge_rows_run_inside_their_kernels():
    """HGT's five ``product + b[v.ntype]`` adds take no pass: their typed_param rows are never
    materialised, and the typed linears' three backward adds run in the input gradients.  Its
    edge traversals read the stored edge rows and node rows in place (plan_edge_traversals)."""
    program = compile_file(EXAMPLES / "hgt.mp")
    ran, emitter = _openmp_plan(program, {"etypes": 3, "ntypes": 2})
    params = [op for op in program.forward if op.opcode == "typed_param" and op.output.assoc == "node"
              and id(op) in emitter.absorbed]
    into = sorted(emitter.fused_into[id(op)].opcode for op in params)
    assert into == ["linear"] + ["typed_linear"] * 4
    for op in params:
        product = emitter.fused_into[id(op)]
        assert ran[id(op)] == [] and op.output.id in emitter.unstored_values()
        assert id(product) in emitter.bias_types and emitter.epilogues[id(product)][0] is op.inputs[0]
    adds = [op for op in program.backward if op.opcode == "add" and op.output.width == 64]
    assert len(adds) == 3 and {emitter.fused_into[id(op)].opcode for op in adds} == {"typed_matmul_nt"}
    # the messages times their attention, summed at destinations (forward) and the keys' share of
    # the attention gradient (backward): one traversal each, reading the stored edge rows in place
    scatters = [op for op in program.forward + program.backward
                if op.opcode == "scatter" and emitter.producer[op.inputs[0].id].opcode == "head_mul"]
    assert [ran[id(op)] for op in scatters] == [["mg::op::weighted_edge_scatter"]] * 2
    for op in scatters:
        scale = emitter.producer[op.inputs[0].id]
        assert scale.opcode == "head_mul" and ran[id(scale)] == [] and scale.output.id in emitter.unstored_values()
    # the queries and the aggregate's gradient gathered at destinations are read where they lie
    # by the attention's dots and the scaled gathers (head_mul(gather(g), alpha)): never copied
    gathers = [op for op in program.forward + program.backward if op.opcode == "gather" and op.attrs["end"] == "dst"]
    assert len(gathers) == 2 and all(ran[id(op)] == [] for op in gathers)
    kernels = [ran[id(op)] for op in program.forward + program.backward if op.opcode in ("dot", "head_mul")]
    assert kernels.count(["mg::op::edge_dot"]) == 2 and kernels.count(["mg::op::weighted_gather"]) == 2


def test_a_division_by_a_graph_constant_runs_inside_the_traversals():
    """R-GCN's ``/ e.rel_degree``: the sums at destinations and the backward's gathered gradients
    multiply by the reciprocal, computed once at load time; no division pass, no gathered copy
    (the parity tests of rgcn above check the numbers)."""
    program = compile_file(EXAMPLES / "rgcn.mp")
    ran, emitter = _openmp_plan(program, {"etypes": 3})
    divs = [op for op in program.forward + program.backward if op.opcode == "div"]
    into = sorted(ran[id(op)][0] if ran[id(op)] else emitter.fused_into[id(op)].opcode for op in divs)
    assert into == ["mg::op::weighted_gather"] * 2 + ["scatter"] * 2
    gathers = [op for op in program.backward if op.opcode == "gather"]
    assert gathers and all(ran[id(op)] == [] for op in gathers)
    assert any("mg::op::reciprocal" in line for line in emitter.prepare)


def test_bases_read_per_lookup_match_interpreter_on_threads():
    """R-GCN with bases on featureless input reads the bases per (type, source) lookup
    (passes/basis_lookup.py): a graph large enough for those kernels to run on the thread team,
    with sources that many edges of one type share."""
    graph = random_graph(n=300, e=4000, seed=5, etypes=7, ntypes=1)
    _, labels, mask = random_data(graph, None, classes=3)
    _check(models.rgcn(bases=3), graph, None, labels, mask, classes=3)


@pytest.mark.parametrize("layout", ["compact", "edge", "gathered"])
@pytest.mark.parametrize("name", ["rgat", "hgt"])
def test_typed_linears_of_gathered_rows_match_interpreter_in_every_layout(name, layout):
    """The products of node rows read at edge ends (passes/edge_typed_linear.py), one per
    distinct (node, type) pair or per edge, against the interpreter, with the gathered form for
    reference: a graph with more rows than one tile of the kernels, many edges per (source,
    type) pair and an edge type that no edge has."""
    graph = random_graph(n=300, e=4000, seed=9, etypes=5, ntypes=2)
    graph.num_etypes = 6
    x, labels, mask = random_data(graph, 37, classes=3)
    _check(getattr(models, name)(), graph, x, labels, mask, classes=3, edge_typed_layout=layout)


@pytest.mark.parametrize("layout,blocks", [("compact", 2), ("edge", 4), ("gathered", 4)])
def test_block_diagonal_typed_linears_at_edge_ends_match_interpreter(layout, blocks):
    """Relation matrices of B diagonal blocks (HGTConv's per-head k_rel and v_rel): the kernels
    run them as B times the rows one block wide (runtime/edge_rows.h), the rows read at edge ends
    in place or gathered first."""
    graph = random_graph(n=300, e=4000, seed=9, etypes=5, ntypes=2)
    graph.num_etypes = 6
    x, labels, mask = random_data(graph, 37, classes=3)
    _check(models.hgt(hidden=16, blocks=blocks), graph, x, labels, mask, classes=3, edge_typed_layout=layout)


@pytest.mark.parametrize("layout", ["compact", "edge"])
@pytest.mark.parametrize("features", ["dense", "csr"])
def test_typed_gradients_summed_from_destination_rows_match_interpreter(layout, features):
    """R-GCN's ``gather(g) / c`` read by both gradients of each typed product at edge sources:
    the product rows' sums read the destinations' rows times 1 / c (gathered_row_sums) and the
    [E, F] gradient is never written; the second gradient of the last layer reuses the first's
    sums across the add that runs between them.  In the compact layout the forward products
    stay one per (source, type) pair, the sums at destinations reading each edge's by index
    (plan_stored_rows)."""
    from morphgen.backends.openmp.emitter import OpenMPEmitter
    from morphgen.passes import run_default
    from morphgen.pipeline import edge_type_pairs

    graph = random_graph(n=300, e=4000, seed=9, etypes=5, ntypes=1)
    graph.num_etypes = 6
    x, labels, mask = random_data(graph, 37, classes=3)
    if features == "csr":
        x[np.random.default_rng(3).random(x.shape) < 0.9] = 0.0
    _check(models.rgcn(featureless=False), graph, x, labels, mask, classes=3, features=features,
           edge_typed_layout=layout)
    program = models.rgcn(featureless=False)
    program.bind({"F": 37, "C": 3, "N": 300, "etypes": 6, "ntypes": 1})
    run_default(program, edge_typed_layout=layout, edge_pairs=edge_type_pairs(graph))
    emitter = OpenMPEmitter(program)
    emitter.emit()
    ran = {id(row["op"]): row["kernels"] for row in emitter.plan_rows}
    grads = [op for op in program.backward if op.opcode.startswith("edge_typed_linear_")]
    sums = [ran[id(op)][0] == "mg::op::gathered_row_sums" for op in grads]
    assert sums == [True, False, True] and id(grads[1]) in emitter.rows_summed
    scaled = [op for op in program.backward if op.opcode == "div"]
    assert len(scaled) == 2 and all(ran[id(op)] == [] and op.output.id in emitter.unstored_values() for op in scaled)
    products = [op.output.id for op in program.forward if op.opcode == "edge_typed_linear"]
    assert len(products) == 2 and all((v in emitter.stored_rows) == (layout == "compact") for v in products)


OUT_EDGE_MESSAGES = """
function outtyped(Graph g, propNode<float[F]> x, propNode<int[C]> y) {
    weight<float[F][8]> W0 = glorot;
    weight<float[g.etypes][8][C]> W = glorot;
    propNode<float[8]> h;  propNode<float[C]> out;
    gnn.optimizer("sgd", lr = 0.1);
    for (int epoch = 0; epoch < 3; epoch++) {
        forall (v in g.nodes()) { v.h = relu(v.x * W0); }
        forall (v in g.nodes()) { v.out = Sum(e in v.outgoing_edges(): e.dst.h * W[e.etype] / e.rel_degree); }
        gnn.loss(out, "cross_entropy");
        gnn.backPropagation();
        gnn.optimizerStep();
    }
}
"""


def test_typed_products_stored_by_row_and_summed_at_sources_match_interpreter():
    """Messages typed at destinations and summed at sources: the compact products stay one per
    (destination, type) pair and the walk over each source's out-edges reads them through the
    layout's index by source position (EdgeRowLayout::edge_row_by_src)."""
    from morphgen.frontend import compile_source

    graph = random_graph(n=300, e=4000, seed=9, etypes=5, ntypes=1)
    x, labels, mask = random_data(graph, 37, classes=3)
    _check(compile_source(OUT_EDGE_MESSAGES, filename="outtyped.mp"), graph, x, labels, mask, classes=3,
           edge_typed_layout="compact")


def test_typed_linear_of_wide_gathered_rows_matches_interpreter():
    """Node rows wider than one column block of the weight gradient's work units (100 > 64): the
    kernels read each block of the gathered rows where it lies."""
    graph = random_graph(n=300, e=4000, seed=11, etypes=4, ntypes=2)
    x, labels, mask = random_data(graph, 100, classes=3)
    _check(models.rgat(), graph, x, labels, mask, classes=3, edge_typed_layout="compact")


@pytest.mark.parametrize("features", ["csr", "csr_unsorted"])
@pytest.mark.parametrize("layout", ["compact", "edge"])
def test_typed_linears_of_sparse_feature_rows_match_interpreter(layout, features):
    """Projections of the input features at edge ends read CSR rows in place (the sparse feature
    path), with sorted and unsorted column indices; widths past one column block of the weight
    gradient's work units."""
    graph = random_graph(n=300, e=4000, seed=9, etypes=5, ntypes=2)
    x, labels, mask = random_data(graph, 600, classes=3)
    x[np.random.default_rng(1).random(x.shape) < 0.95] = 0.0
    _check(models.typed_attention(), graph, x, labels, mask, classes=3, features=features, edge_typed_layout=layout)


def test_gat_reads_gathered_rows_in_place():
    """No E x (heads * width) copy: the messages, the transposed messages and the attention
    gradient read the node rows at the edge ends (plan_edge_traversals); the parity tests above
    check the numbers of the same lowering."""
    from morphgen.backends.openmp.emitter import OpenMPEmitter
    from morphgen.passes import run_default

    program = models.gat_heads()
    program.bind({"F": 5, "C": 3, "N": 12, "etypes": 1, "ntypes": 1})
    run_default(program)
    emitter = OpenMPEmitter(program)
    emitter.emit()
    ran = {row["op"].output.id: row["kernels"] for row in emitter.plan_rows if row["op"].output is not None}
    wide = [op for op in program.forward + program.backward
            if op.opcode == "gather" and op.inputs[0].shape == op.output.shape and op.output.shape[-1] not in (2, 3)]
    assert wide and all(ran[op.output.id] == [] for op in wide)
    kernels = {k for ks in ran.values() for k in ks}
    assert {"mg::op::weighted_gather_scatter", "mg::op::edge_dot"} <= kernels


FEW_TRAINING_ROWS = {"sage_mean": lambda: models.sage("mean"), "gin": models.gin,
                     "gcnii": lambda: compile_file(EXAMPLES / "gcnii.mp")}


@pytest.mark.parametrize("name", sorted(FEW_TRAINING_ROWS))
def test_gradients_over_few_training_rows_read_those_rows_alone(name):
    """4 training rows of 40: the gradients that are zero elsewhere (passes/train_rows.py) are
    reduced over those rows alone (the other tests train on most rows: the plain kernels)."""
    ran, _ = _openmp_plan(FEW_TRAINING_ROWS[name](), {"F": 33, "C": 4})
    assert any(k.startswith("mg::op::matmul_tn_train_rows") for ks in ran.values() for k in ks)
    graph = random_graph(40, 130, seed=21)
    x, labels, _ = random_data(graph, 33, classes=4)
    mask = np.zeros(graph.num_nodes, bool)
    mask[[2, 5, 9, 20]] = True
    _check(FEW_TRAINING_ROWS[name](), graph, x, labels, mask, classes=4)


def test_a_gradient_that_went_through_an_aggregation_reads_every_row():
    program = models.gcn(dropout=0.0)
    ran, _ = _openmp_plan(program)
    products = [op for op in program.backward if op.opcode == "matmul_tn"]
    assert products and not any(k.startswith("mg::op::matmul_tn_train_rows") for op in products for k in ran[id(op)])


def _openmp_plan(program, sizes=None):
    """(kernels per op id, the emitter) of the OpenMP lowering of ``program``."""
    from morphgen.backends.openmp.emitter import OpenMPEmitter
    from morphgen.passes import run_default

    program.bind({"F": 5, "C": 3, "N": 12, "etypes": 1, "ntypes": 1, **(sizes or {})})
    run_default(program)
    emitter = OpenMPEmitter(program)
    emitter.emit()
    return {id(row["op"]): row["kernels"] for row in emitter.plan_rows}, emitter


def test_batch_norm_backward_with_its_affine_gradients_is_one_kernel():
    """standardize(x) * gamma + beta: dx, dgamma and dbeta come from batch_norm_affine_bwd, the
    products and row sums autodiff wrote for them never run (the parity tests above check the
    numbers of the same lowering, with perturbed gamma)."""
    program = models.normed()
    ran, _ = _openmp_plan(program)
    bn = next(op for op in program.backward if op.opcode == "batch_standardize_grad")
    assert ran[id(bn)] == ["mg::batch_norm_affine_bwd"]
    gamma, beta = (program.grads[f"bn.{w}"] for w in ("gamma", "beta"))
    by_output = {op.output.id: op for op in program.backward}
    assert ran[id(by_output[gamma.id])] == [] and ran[id(by_output[beta.id])] == []


def test_batch_norm_forward_with_its_affine_part_is_one_kernel_and_keeps_no_standardised_rows():
    """standardize(x) * gamma + beta: one forward kernel; its standardised rows are read by
    nothing but the fused backward, which recomputes them, so no buffer holds them."""
    program = models.normed()
    ran, emitter = _openmp_plan(program)
    bn = next(op for op in program.forward if op.opcode == "batch_standardize")
    scale = next(op for op in program.forward if op.opcode == "mul" and bn.output in op.inputs)
    assert ran[id(bn)] == ["mg::batch_norm_affine_fwd"] and ran[id(scale)] == []
    assert bn.output.id not in emitter.has_buffer and bn.output.id in emitter.unstored_values()


def test_standardised_rows_read_again_are_still_written():
    program = models.normed_reread()
    ran, emitter = _openmp_plan(program)
    bn = next(op for op in program.forward if op.opcode == "batch_standardize")
    assert ran[id(bn)] == ["mg::batch_norm_affine_fwd"]
    assert bn.output.id in emitter.has_buffer


def test_relu_after_batch_norm_runs_inside_its_backward():
    """relu(standardize(x) * gamma + beta): the relu's act_grad runs inside batch_norm_affine_bwd,
    which recomputes the standardised rows; the parity cases check the numbers, with perturbed
    gamma and beta."""
    program = models.normed_relu()
    ran, emitter = _openmp_plan(program)
    bn = next(op for op in program.backward if op.opcode == "batch_standardize_grad")
    act = next(op for op in program.backward if op.opcode == "act_grad" and op.attrs["act"] == "relu")
    assert ran[id(bn)] == ["mg::batch_norm_affine_bwd"] and ran[id(act)] == []
    assert act.output.id not in emitter.has_buffer


def test_batch_norm_backward_takes_its_forwards_statistics():
    """The fused forward keeps the batch's mean and 1/sigma in a Model member that the fused
    backward reads instead of summing x again (the parity cases check the numbers)."""
    program = models.normed_relu()
    _, emitter = _openmp_plan(program)
    forward = next(op for op in program.forward if op.opcode == "batch_standardize")
    backward = next(op for op in program.backward if op.opcode == "batch_standardize_grad")
    name = emitter.batch_statistics[id(forward)]
    assert emitter.batch_statistics[id(backward)] == name and f"mg::BatchStatistics {name};" in emitter.members


def test_relu_read_elsewhere_keeps_its_own_backward():
    """A relu whose input gradient has a reader outside batch norm's backward keeps its act_grad."""
    program = models.normed()       # the relu comes after an aggregation, not the affine part
    ran, _ = _openmp_plan(program)
    act = next(op for op in program.backward if op.opcode == "act_grad" and op.attrs["act"] == "relu")
    assert ran[id(act)] == ["mg::op::act_grad"]


@pytest.mark.parametrize("name", ["normed", "normed_reread", "normed_relu"])
def test_batch_norm_models_match_interpreter_on_threads(name):
    """Enough rows for the batch norm kernels to run on the thread team (their sums in per-thread
    partials)."""
    graph = random_graph(n=2500, e=10000, seed=11)      # 2500 rows x 8 features: threaded kernels
    x, labels, mask = random_data(graph, 9, classes=3)
    _check(CASES[name](), graph, x, labels, mask, classes=3)


def test_bias_and_activation_after_a_weighted_scatter_are_one_pass():
    """GAT's in-place weighted scatter takes no epilogue: its bias_add runs the elu in the same
    pass (the parity cases above check the numbers)."""
    program = models.gat()
    ran, _ = _openmp_plan(program)
    by_opcode = {}
    for op in program.forward:
        by_opcode.setdefault(op.opcode, []).append(op)
    bias_add = next(op for op in by_opcode["bias_add"]
                    if any(r.opcode == "elu" and r.inputs[0] is op.output for r in by_opcode["elu"]))
    elu = next(op for op in by_opcode["elu"] if op.inputs[0] is bias_add.output)
    assert ran[id(bias_add)] == ["mg::binary_fwd"] and ran[id(elu)] == []


def test_attention_scores_and_their_softmax_are_one_walk_each_way():
    """GAT's gather, gather, add, leaky_relu and edge softmax run as one kernel, and the backward's
    dropout_grad, softmax and leaky_relu gradients and the sum at destinations as another; the
    scores are kept for the backward, the gathered and summed ones never stored."""
    program = models.gat_heads(attention_dropout=0.5)
    ran, emitter = _openmp_plan(program)
    for softmax in (op for op in program.forward if op.opcode == "edge_softmax"):
        act = next(op for op in program.forward if op.output is softmax.inputs[0])
        add = next(op for op in program.forward if op.output is act.inputs[0])
        assert ran[id(softmax)] == ["mg::edge_attention_fwd"] and ran[id(act)] == [] and ran[id(add)] == []
        assert act.output.id in emitter.has_buffer and add.output.id in emitter.unstored_values()
    grads = [op for op in program.backward if op.opcode == "edge_softmax_grad"]
    assert len(grads) == 2
    for grad in grads:
        assert ran[id(grad)] == ["mg::edge_softmax_act_bwd"]
        drop, act, to_dst = emitter.softmax_grads[id(grad)]
        assert drop.opcode == "dropout_grad" and act.opcode == "act_grad" and to_dst.opcode == "scatter"
        assert ran[id(drop)] == ran[id(act)] == ran[id(to_dst)] == []


def test_per_head_products_run_inside_their_one_reader():
    """The backward of GAT's per-head dots with its attention vectors: each head_mul is read by one
    add (dx += a * g) or one row_sum (da = row_sum(x * g)) and runs inside it, never stored."""
    program = models.gat_heads()
    ran, emitter = _openmp_plan(program)
    backward = [op for op in program.backward if op.opcode == "head_mul"]
    assert all(emitter.fused_into.get(id(op)) is not None for op in backward)    # else a scatter's
    products = [op for op in backward if emitter.fused_into[id(op)].opcode in ("add", "row_sum")]
    assert len(products) == 8 and {emitter.fused_into[id(op)].opcode for op in products} == {"add", "row_sum"}
    for op in products:
        assert ran[id(op)] == [] and op.output.id in emitter.unstored_values()
        assert ran[id(emitter.fused_into[id(op)])] in (["mg::head_mul_add"], ["mg::head_mul_row_sum"])


def test_attention_models_match_interpreter_on_threads():
    """Enough edges x heads for the fused attention kernels to run on the thread team, with the
    attention dropout whose mask their backward regenerates (and nodes without in-edges)."""
    graph = random_graph(n=2500, e=10000, seed=13)
    x, labels, mask = random_data(graph, 5, classes=3)
    _check(models.gat_heads(attention_dropout=0.5), graph, x, labels, mask, classes=3)


def test_an_edge_weight_that_is_itself_a_gather_is_stored():
    """scatter(gather(a) * gather(b)) with one-wide rows: either gather could pass for the edge
    weight; the one read as the weight must still be written (it has no in-place reader)."""
    def program():
        m = models.ModelBuilder("gathered_weight")
        a = m.emit("linear", m.x, m.param("Wa", ("F", 1)))
        b = m.emit("sigmoid", m.emit("linear", m.x, m.param("Wb", ("F", 1))))
        msg = m.emit("mul", m.emit("gather", a, end="src"), m.emit("gather", b, end="dst"))
        h = m.emit("scatter", msg, reduce="sum", end="dst")
        return m.finish(m.emit("linear", h, m.param("O", (1, "C"))))
    graph = random_graph(n=12, e=30, seed=5)
    x, labels, mask = random_data(graph, 6, classes=3)
    _check(program(), graph, x, labels, mask, classes=3)


def test_an_add_runs_inside_the_product_or_aggregation_that_computes_its_later_operand():
    """SAGE's sums of its two products (forward: with the bias and relu; backward: the two input
    gradients) and a product plus an aggregation (_skip_sum): the later operand's kernel adds the
    earlier one to its rows; the add has no pass and the later operand is never stored."""
    program = models.sage("mean")
    ran, emitter = _openmp_plan(program)
    adds = [op for op in program.forward + program.backward if op.opcode == "add"]
    into = {op.opcode for op in (emitter.fused_into.get(id(add)) for add in adds)}
    assert len(adds) == 3 and into == {"linear", "matmul_nt"}     # no input gradient of the first layer
    for add in adds:
        product = emitter.fused_into[id(add)]
        assert ran[id(add)] == [] and product.output.id in emitter.unstored_values()
        assert emitter.residuals[id(product)] in add.inputs and product.output in add.inputs
    program = _skip_sum()
    ran, emitter = _openmp_plan(program)
    add = next(op for op in program.forward if op.opcode == "add")
    aggregate = emitter.fused_into[id(add)]
    assert aggregate.opcode == "aggregate" and ran[id(aggregate)] == ["mg::op::aggregate"] and ran[id(add)] == []


def _skip_sum():
    """relu(x W1) W2 + sum of the in-neighbours' relu(x W1), through a classifier: an add whose
    later operand is an aggregation (GIN's own adds become self loops in the passes)."""
    m = models.ModelBuilder("skip_sum")
    w1, w2, w3 = (m.param(f"W{i}", shape) for i, shape in ((1, ("F", 8)), (2, (8, 8)), (3, (8, "C"))))
    h = m.emit("relu", m.emit("linear", m.x, w1))
    s = m.emit("add", m.emit("linear", h, w2), m.emit("aggregate", h, reduce="sum"))
    return m.finish(m.emit("linear", m.emit("relu", s), w3))


def test_an_add_inside_an_aggregation_matches_interpreter():
    graph = random_graph(n=40, e=120, seed=3)
    x, labels, mask = random_data(graph, 6, classes=3)
    _check(_skip_sum(), graph, x, labels, mask, classes=3)


@pytest.mark.parametrize("name", ["appnp", "gcnii"])
def test_written_out_propagations_match_interpreter(name):
    """APPNP's steps and GCNII's layers, whose constant scales run inside their adds (below)."""
    graph = random_graph(n=12, e=30, seed=4)
    x, labels, mask = random_data(graph, 6, classes=3)
    _check(compile_file(EXAMPLES / f"{name}.mp"), graph, x, labels, mask, classes=3)


def test_constant_scales_run_inside_the_add_they_feed():
    """APPNP's 0.9 * A_hat h + 0.1 * h0: each step's scale of its aggregation is never stored, its
    add computes both products (scaled_add); the teleport term, read by every step, stays."""
    program = compile_file(EXAMPLES / "appnp.mp")
    ran, emitter = _openmp_plan(program, {"F": 6})
    steps = [op for op in program.forward if op.opcode == "add" and emitter.producer[op.inputs[0].id].opcode == "scale"]
    assert len(steps) == 10
    for add in steps:
        assert ran[id(add)] == ["mg::scaled_add"]
        fused = [emitter.producer[v.id] for v in add.inputs if id(emitter.producer[v.id]) in emitter.absorbed]
        assert len(fused) == 1 and fused[0].opcode == "scale" and float(fused[0].attrs["c"]) == pytest.approx(0.9)
        assert ran[id(fused[0])] == [] and fused[0].output.id in emitter.unstored_values()
    teleport = {v.id for add in steps for v in add.inputs if id(emitter.producer[v.id]) not in emitter.absorbed}
    assert len(teleport) == 1                      # one 0.1 * h0, computed once and read by all ten
    backward = [op for op in program.backward if ran[id(op)] == ["mg::scaled_add"]]
    assert backward, "the gradient's scaled shares run inside their adds too"

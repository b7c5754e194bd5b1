"""The pipeline and its policies, between the public API and the backends (GUIDE §2):
parse + check -> IR -> bind the dataset's sizes -> passes and autodiff, with the choices that
depend on the data (feature path, feature normalisation) and the memory a run will hold.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from .errors import UserError


def lower(path, sizes: Optional[dict] = None, featureless: bool = False, dense_features: bool = False,
          bases_per_lookup: bool = False, edge_typed_layout: Optional[str] = None, graph=None,
          graph_constants: bool = False):
    """Parse, check and lower a program; bind sizes when given; run the passes (backward included).

    ``dense_features``: the backend will hold the input features dense, so aggregations of them
    may be computed once instead of every epoch (passes/hoist_invariant.py).
    ``graph_constants``: the backend computes what the forward derives from the graph alone once,
    at load time (passes/hoist_invariant.py, hoist_graph_constants).
    ``bases_per_lookup``: the backend reads featureless lookups of basis-decomposed weights from
    the bases (passes/basis_lookup.py).
    ``edge_typed_layout``: the backend reads gathered node rows of typed linears in place, in this
    layout (auto: picked per op from ``graph``'s distinct (node, edge type) pairs,
    passes/edge_typed_linear.py)."""
    from . import passes
    from .frontend import compile_file
    from .ir_core import IRBug, IRError, _canonical_symbol
    program = compile_file(str(path))
    used = {_canonical_symbol(s) for s in program.symbols()}
    if graph is not None and graph.edge_weight is None:
        refuse_unweighted_graph(program, path)
    try:
        if sizes is not None:
            program.featureless = featureless
            program.bind(sizes)
        passes.run_default(program, dense_features=dense_features and sizes is not None and not featureless,
                           bases_per_lookup=bases_per_lookup, edge_typed_layout=edge_typed_layout,
                           graph_constants=graph_constants,
                           edge_pairs=edge_type_pairs(graph) if graph is not None and edge_typed_layout else None)
    except IRError as err:
        # Shapes that only the dataset's sizes reveal: the error still points into the program.
        raise located_error(err, path, {k: v for k, v in (sizes or {}).items() if k in used}) from None
    except IRBug as err:
        # Not the program's fault, so no diagnostic to act on; name the place for the bug report.
        loc = getattr(err.loc, "line", None) and f":{err.loc.line}:{getattr(err.loc, 'col', 0) or 1}"
        raise IRBug(f"while compiling {path}{loc or ''}: {err.message} (a bug in morphgen, "
                    f"not in the program)", err.loc) from err
    return program


def edge_weight_reads(program) -> list:
    """The ops that read the graph's edge weights (e.edge_weight, GCN layers weighing their edges)."""
    from .ir_ops import reads_edge_weights
    return [op for op in program.all_ops() if reads_edge_weights(op)]


def refuse_unweighted_graph(program, path) -> None:
    """A program that reads e.edge_weight, given a graph without weights: located at the read."""
    from .ir_core import IRError
    reads = edge_weight_reads(program)
    if reads:
        raise located_error(IRError("e.edge_weight: the dataset has no edge weights (an .npz dataset gives "
                                    "them as 'edge_weight', float [E], one per edge of 'edge_index')",
                                    reads[0].loc), path)


def edge_type_pairs(graph) -> dict:
    """Distinct (node, edge type) pairs at each end of the edges, and the edge count."""
    types = graph.etype if graph.etype is not None else np.zeros(graph.num_edges, np.int64)
    width = int(types.max()) + 1 if types.size else 1

    def distinct(ends):
        return int(np.unique(ends * width + types).size)
    return {"src": distinct(graph.src), "dst": distinct(graph.dst), "edges": graph.num_edges}


def located_error(err, path, sizes: Optional[dict] = None):
    """An IRError as a ``FILE:LINE:COL: error:`` diagnostic, naming the dataset sizes involved."""
    from .frontend import CompileError, Diagnostic
    loc = getattr(err, "loc", None)
    line, col = (getattr(loc, "line", 0) or 1), (getattr(loc, "col", 0) or 1)
    try:
        source_line = Path(path).read_text(encoding="utf-8").splitlines()[line - 1] if loc else ""
    except (OSError, UnicodeDecodeError, IndexError):
        source_line = ""
    message = getattr(err, "message", str(err))
    if sizes:
        message += f" (with the dataset's sizes {', '.join(f'{k}={v}' for k, v in sizes.items())})"
    return CompileError([Diagnostic(str(path), line, col, message, "error", source_line)])


def sizes_of(dataset) -> dict:
    g = dataset.graph
    sizes = {"F": dataset.num_features, "N": g.num_nodes, "etypes": g.num_etypes, "ntypes": g.num_ntypes}
    if dataset.num_classes:              # a link-prediction dataset has no classes
        sizes["C"] = dataset.num_classes
    return sizes


def choose_feature_path(dataset, threshold: Optional[float], sparse_supported: bool = True,
                        threads: Optional[int] = None, dense_program=None, calibration=None):
    """Dense or sparse feature path, decided once at load time (Morphling §IV-B).

    Returns (path, sparsity, tau, reason).  tau = 1 - rho compares the two paths' feature
    products; ``dense_program`` (a callable returning the program lowered for dense features)
    lets the calibrated tau also count what only the dense path does: aggregations of the
    features computed once instead of every epoch (``dense_path_threshold``).  ``calibration``
    (threads -> Calibration) measures the processor that multiplies the features: the backend's
    (``Backend.feature_calibration``); by default this CPU's.
    """
    if dataset.features is None:
        return "identity", 1.0, None, "featureless input: embedding lookup"
    sparsity = float(dataset.feature_sparsity)
    if threshold is not None:
        tau, source = float(threshold), "--sparsity-threshold"
    else:
        if calibration is None:
            from .calibrate import calibrate as calibration
        cal = calibration(threads)
        tau, source = float(cal.tau), f"tau = 1 - rho, rho = {cal.rho:.3f} ({cal.source})"
        if sparse_supported and sparsity > tau and dense_program is not None:
            raised = dense_path_threshold(dense_program(), dataset, cal)
            if raised is not None:
                tau, why = raised
                source += f"; raised to {tau:.3f}: {why}"
    if sparsity > tau and not sparse_supported:
        return "dense", sparsity, tau, source + "; the program reads the features outside a linear layer"
    return ("sparse" if sparsity > tau else "dense"), sparsity, tau, source


def dense_path_threshold(program, dataset, cal):
    """(tau, reason) counting hoisting's saving on the dense path, or None when it saves nothing.

    Per epoch the dense path costs K = 4 N F M / (dense FLOP/s) in its feature products (forward
    and weight gradient, M the widths of the products of the features) and the sparse path
    (1 - s) K / rho.  Hoisting ``aggregate(x W)`` to ``(A x) W`` spares the dense path an
    aggregation at width M forward and backward every epoch, for one at width F once, a saving
    S in seconds at the calibrated aggregation speed.  Dense wins while K - S < (1 - s) K / rho,
    that is while s < 1 - rho (1 - S / K).
    """
    from .passes.rewrite import concrete
    if not program.invariant or not cal.spmm_gbs > 0 or not cal.dense_gflops > 0:
        return None
    n, e = dataset.graph.num_nodes, dataset.graph.num_edges
    f = concrete(program.inputs["features"].width)
    hoisted = {op.output.id for op in program.invariant}
    product_widths = [concrete(op.output.width) for op in program.forward if op.opcode == "linear"
                      and (op.inputs[0].id in hoisted or op.inputs[0].id == program.inputs["features"].id)]
    saved_widths = [concrete(op.output.width) for op in program.forward
                    if op.opcode == "linear" and op.inputs[0].id in hoisted]
    if f is None or None in product_widths or None in saved_widths or not saved_widths:
        return None
    products_s = 4.0 * n * f * sum(product_widths) / (cal.dense_gflops * 1e9)
    per_byte = 1.0 / (cal.spmm_gbs * 1e9)
    saved_s = (sum(2 * 4.0 * (n + e) * m for m in saved_widths)
               - len(saved_widths) * 4.0 * (n + e) * f / max(1, program.epochs)) * per_byte
    if saved_s <= 0 or products_s <= 0:
        return None
    tau = 1.0 - cal.rho * max(0.0, 1.0 - saved_s / products_s)
    return tau, (f"the dense path computes {len(saved_widths)} aggregation(s) of the features once, "
                 f"saving {saved_s * 1e3:.2f} ms per epoch against {products_s * 1e3:.2f} ms of feature products")


def preprocess(dataset, program):
    """The program's load-time preprocessing of the data, on copies: the graph option
    (gnn.addSelfLoops) and the input feature normalisation (gnn.normalizeFeatures)."""
    return normalize_features(with_graph_options(dataset, program), program.feature_normalization)


def with_graph_options(dataset, program):
    """The dataset with the program's graph option applied (gnn.addSelfLoops): what the library
    is built for, since a typed graph's loops are an edge type of their own (one more etype)."""
    import dataclasses
    from .graph import with_self_loops
    if program.self_loops:
        looped = with_self_loops(dataset.graph)
        if looped is not dataset.graph:
            dataset = dataclasses.replace(dataset, graph=looped)
    return dataset


def normalize_features(dataset, kind: Optional[str]):
    """The program's input preprocessing (gnn.normalizeFeatures), on a copy of the features."""
    import dataclasses
    import scipy.sparse as sp
    if kind is None or dataset.features is None:
        return dataset
    x = dataset.features
    sums = np.asarray(abs(x).sum(axis=1)).reshape(-1).astype(np.float64)
    scale = np.divide(1.0, sums, out=np.zeros_like(sums), where=sums > 0).astype(np.float32)
    x = sp.diags(scale).dot(x).tocsr().astype(np.float32) if sp.issparse(x) else x * scale[:, None]
    return dataclasses.replace(dataset, features=x)


def features_payload(dataset, path: str):
    import scipy.sparse as sp
    x = dataset.features
    if path == "identity":
        return ("identity", None)
    if path == "sparse":
        return ("csr", sp.csr_matrix(x, dtype=np.float32) if not sp.issparse(x) else x.tocsr())
    return ("dense", x.toarray() if sp.issparse(x) else x)


def run_memory_estimate(program, dataset, feature_path: str, unstored=frozenset()) -> dict:
    """Bytes a bound run will hold, by part: the buffer plan's peak (passes/liveness.py), the
    parameters with their optimizer state, and the runtime's copy of the graph and features.
    ``unstored``: values the backend never puts in a buffer of the plan (see analyse_liveness);
    the input features are always counted with the data, not in the plan."""
    import scipy.sparse as sp
    from .passes import analyse_liveness
    n, e = dataset.graph.num_nodes, dataset.graph.num_edges
    features_input = program.inputs.get("features")
    skip = set(unstored) | ({features_input.id} if features_input is not None else set())
    live = analyse_liveness(program, n, e, skip)
    x = dataset.features
    if x is None:
        features = 0
    elif sp.issparse(x) and feature_path == "sparse":
        features = x.nnz * 8 + (n + 1) * 8
    else:
        features = n * dataset.num_features * 4
    # two CSR orders (by destination, by source) with edge ids, degrees, labels and masks
    graph = 2 * (n + 1) * 8 + 3 * e * 8 + n * 8 + n * 12
    parts = {"activations and gradients": live.peak_bytes,
             "parameters and optimizer state": live.param_bytes + live.optimizer_bytes,
             "graph and features": graph + features}
    rows = edge_row_layout_bytes(program, dataset.graph)
    if rows:                              # a program without typed linears at edge ends keeps its parts
        parts["typed-linear edge rows"] = rows
    return parts


_EDGE_TYPED_OPS = ("edge_typed_linear", "edge_typed_linear_input_grad", "edge_typed_linear_weight_grad")


def edge_row_layout_bytes(program, graph) -> int:
    """Bytes of the product-row layouts of the typed linears at edge ends (runtime/edge_rows.h),
    one per (end, layout), with the scratch their kernels keep: each row's summed edge gradient
    (M wide) and, when the rows' input gradient is needed, each row's share of it (K wide)."""
    widths: dict = {}                     # (end, layout) -> [M, K of the input gradient]
    for op in program.all_ops():
        if op.opcode not in _EDGE_TYPED_OPS:
            continue
        key = (op.attrs["end"], op.attrs["layout"])
        m, k = widths.setdefault(key, [0, 0])
        weight = op.inputs[1] if op.opcode != "edge_typed_linear_weight_grad" else op.output
        width_in, width_out = (int(d) if isinstance(d, int) else 0 for d in weight.shape[-2:])
        widths[key] = [max(m, width_out), max(k, width_in if op.opcode.endswith("input_grad") else 0)]
    if not widths:
        return 0
    pairs = edge_type_pairs(graph)
    total = 0
    for (end, layout), (m, k) in widths.items():
        r = pairs[end] if layout == "compact" else graph.num_edges
        total += 8 * (4 * r + graph.num_edges + graph.num_nodes) + 4 * r * (m + k)
    return total


def check_run_fits(program, dataset, feature_path: str, unstored=frozenset(), gpu: Optional[int] = None) -> None:
    """Refuse, before allocating anything, a run that cannot fit in the memory left: the host's,
    and with ``gpu`` (a device index) that GPU's too, whose buffers hold the same values."""
    from .resources import available_memory, gib, gpu_free_memory
    parts = run_memory_estimate(program, dataset, feature_path, unstored)
    need = sum(parts.values())
    detail = ", ".join(f"{name} {gib(b)}" for name, b in parts.items())
    free = available_memory()
    if free is not None and need > free:
        raise UserError(f"morphgen: error: training {program.name} on {dataset.name} needs about "
                        f"{gib(need)} ({detail}), but only {gib(free)} of memory is available")
    free_gpu = gpu_free_memory(gpu) if gpu is not None else None
    if free_gpu is not None and need > free_gpu:
        raise UserError(f"morphgen: error: training {program.name} on {dataset.name} needs about "
                        f"{gib(need)} of GPU memory ({detail}), but GPU {gpu} has only {gib(free_gpu)} free")


def include_dirs(backend=None):
    """Header folders every generated library is built against (runtime ABI, backend op layer),
    and the backend's own headers when it has any."""
    import morphgen.runtime as runtime_pkg
    import morphgen.backends.openmp as openmp_pkg
    dirs = (str(Path(runtime_pkg.__file__).parent), str(Path(openmp_pkg.__file__).parent))
    own = backend.include_dir if backend is not None else None
    return dirs + ((own,) if own and own not in dirs else ())


def build_library(sources: dict, backend, sanitize: bool = False):
    """Compile a backend's generated sources with its toolchain (cached): the library's path."""
    return backend.build(sources, sanitize=sanitize)

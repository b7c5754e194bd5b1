"""The Python API and the `compile` / `train` commands.

    import morphgen
    model = morphgen.compile("examples/gcn.mp", backend="openmp")
    history = model.fit(dataset, epochs=200)          # a morphgen.data.Dataset
    print(model.evaluate())

The pipeline of GUIDE §2: parse + check -> IR -> bind sizes to the data -> autodiff -> passes ->
backend emitter -> build (cached) -> cffi session.  Python only drives epochs.
"""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from .errors import UserError

from .backends import BackendUnavailable, require as require_backend   # noqa: F401 (re-exported)


def lower(path, sizes: Optional[dict] = None, featureless: bool = False, dense_features: bool = False):
    """Parse, check and lower a program; bind sizes when given; run the passes (backward included).

    ``dense_features``: the backend will hold the input features dense, so aggregations of them
    may be computed once instead of every epoch (passes/hoist_invariant.py)."""
    from . import passes
    from .frontend import compile_file
    from .ir import IRError
    program = compile_file(str(path))
    used = {_canonical_size(s) for s in program.symbols()}
    try:
        if sizes is not None:
            program.featureless = featureless
            program.bind(sizes)
        passes.run_default(program, dense_features=dense_features and sizes is not None and not featureless)
    except IRError as err:
        # Shapes that only the dataset's sizes reveal: the error still points into the program.
        raise located_error(err, path, {k: v for k, v in (sizes or {}).items() if k in used}) from None
    return program


def _canonical_size(symbol: str) -> str:
    return symbol.replace("g.", "")


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
    return {"F": dataset.num_features, "C": dataset.num_classes, "N": g.num_nodes,
            "etypes": g.num_etypes, "ntypes": g.num_ntypes}


def choose_feature_path(dataset, threshold: Optional[float], sparse_supported: bool = True,
                        threads: Optional[int] = None):
    """Dense or sparse feature path, decided once at load time (Morphling §IV-B).

    Returns (path, sparsity, tau, reason).
    """
    if dataset.features is None:
        return "identity", 1.0, None, "featureless input: embedding lookup"
    sparsity = float(dataset.feature_sparsity)
    if threshold is not None:
        tau, source = float(threshold), "--sparsity-threshold"
    else:
        from .calibrate import calibrate
        cal = calibrate(threads)
        tau, source = float(cal.tau), f"tau = 1 - rho, rho = {cal.rho:.3f} ({cal.source})"
    if sparsity > tau and not sparse_supported:
        return "dense", sparsity, tau, source + "; the program reads the features outside a linear layer"
    return ("sparse" if sparsity > tau else "dense"), sparsity, tau, source


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


def _features_payload(dataset, path: str):
    import scipy.sparse as sp
    x = dataset.features
    if path == "identity":
        return ("identity", None)
    if path == "sparse":
        return ("csr", sp.csr_matrix(x, dtype=np.float32) if not sp.issparse(x) else x.tocsr())
    return ("dense", x.toarray() if sp.issparse(x) else x)


@dataclass
class TrainResult:
    history: list = field(default_factory=list)      # per epoch: loss, epoch_time_s, accs when evaluated
    final: dict = field(default_factory=dict)


class CompiledModel:
    """A program compiled for one backend; `fit` binds it to a dataset and trains."""

    def __init__(self, path, backend: str = "openmp", threads: Optional[int] = None, seed: int = 0,
                 sparsity_threshold: Optional[float] = None, sanitize: bool = False,
                 hoist_invariants: bool = True):
        """``hoist_invariants=False`` keeps aggregations of the input features inside the epoch
        (passes/hoist_invariant.py), e.g. to measure what hoisting them saves."""
        self._backend = require_backend(backend)
        self.path = Path(path)
        self.backend = backend
        self.threads = threads or os.cpu_count() or 1
        self.seed = seed
        self.sparsity_threshold = sparsity_threshold
        self.sanitize = sanitize
        self.hoist_invariants = hoist_invariants
        self.program = None
        self.session = None
        self.dataset = None             # what the session holds (features possibly normalised)
        self.bound_to = None            # the dataset the caller gave
        self.feature_path = None
        self.compile_seconds = 0.0
        self.library_path = None
        self._emitter = None            # the program's emitter, from build()
        self._built_for = None          # (sizes, featureless, feature path) the library was built for

    # -- binding to data -----------------------------------------------------------------
    def build(self, dataset):
        """Lower the program for this dataset's sizes and feature path, compile it and load the
        library (no data is bound and nothing is allocated for training yet)."""
        from .library import load
        from .toolchain import compile_shared
        t0 = time.perf_counter()
        # The feature path decides the program: dense features let the passes hoist their
        # aggregations out of the epoch.  Row normalisation keeps the sparsity, so the raw
        # features decide.  A program that reads the features outside a linear layer is lowered
        # again for the dense path.
        can_sparse = self._backend.capabilities.sparse_features
        path = choose_feature_path(dataset, self.sparsity_threshold, can_sparse, self.threads)
        sources = self._lower_and_emit(dataset, dense=path[0] == "dense")
        if path[0] == "sparse" and self._emitter.needs_dense_features:
            path = choose_feature_path(dataset, self.sparsity_threshold, False, self.threads)
            sources = self._lower_and_emit(dataset, dense=True)
        check_run_fits(self.program, dataset, path[0])      # before minutes of compiling
        self.library_path = compile_shared(sources, name=f"mg_{self.backend}", sanitize=self.sanitize,
                                           include_dirs=include_dirs())
        load(str(self.library_path), self.backend)
        self.compile_seconds = time.perf_counter() - t0
        self.feature_path = path
        self._built_for = self._build_key(dataset, sparsity=path[1])
        return self

    def _lower_and_emit(self, dataset, dense: bool) -> dict:
        hoist = self.hoist_invariants and dense and self._backend.capabilities.hoist_invariants
        self.program = lower(self.path, sizes_of(dataset), dataset.features is None, hoist)
        self._emitter = self._backend.emitter_class()(self.program)
        return self._emitter.emit()

    @staticmethod
    def _build_key(dataset, sparsity: Optional[float] = None):
        """What the library depends on; ``sparsity`` saves a scan of the features when known."""
        if dataset.features is None:
            return sizes_of(dataset), True, None
        return sizes_of(dataset), False, float(dataset.feature_sparsity if sparsity is None else sparsity)

    def bind(self, dataset, donate_features: bool = False):
        """Bind the model to a dataset (building first if its sizes or features differ).

        ``donate_features``: the caller will not use ``dataset.features`` again, so the runtime may
        overwrite them (an aggregation of them computed once, in place) instead of holding a copy.
        """
        import scipy.sparse as sp
        from .layout import GraphLayout
        from .library import Session
        from .interp import init_params
        if self._built_for != self._build_key(dataset):
            self.build(dataset)
        self.bound_to = dataset
        normalised = normalize_features(dataset, self.program.feature_normalization)
        own_copy = normalised is not dataset or sp.issparse(dataset.features)   # made here: ours to give
        dataset = normalised
        layout = GraphLayout.from_graph(dataset.graph)
        masks = (dataset.train_mask, dataset.val_mask, dataset.test_mask)
        self.session = Session(self.library_path, layout, _features_payload(dataset, self.feature_path[0]),
                               dataset.labels, masks, self.program.sizes, self.threads, self.seed,
                               donate_features=donate_features or own_copy)
        self.session.set_params(init_params(self.program, seed=self.seed))
        self.dataset = dataset
        return self

    def fit(self, dataset=None, epochs: Optional[int] = None, progress=None, eval_every: int = 1) -> TrainResult:
        if dataset is not None and dataset is not self.bound_to:
            self.bind(dataset)
        if self.session is None:
            raise UserError("morphgen: error: fit() needs a dataset")
        epochs = self.program.epochs if epochs is None else epochs
        result = TrainResult()
        for epoch in range(1, epochs + 1):
            t0 = time.perf_counter()
            loss = self.session.train_epoch()
            row = {"epoch": epoch, "loss": loss, "epoch_time_s": time.perf_counter() - t0}
            if not np.isfinite(loss):
                result.history.append(row)
                raise TrainingDiverged(f"morphgen: error: the loss became {loss} at epoch {epoch}")
            if epoch == epochs or (eval_every and epoch % eval_every == 0):
                row.update(self.session.evaluate())
                row["loss"] = loss
            result.history.append(row)
            if progress:
                progress(row, epochs)
        result.final = self.evaluate()
        return result

    def evaluate(self) -> dict:
        return self.session.evaluate()

    def predict(self) -> np.ndarray:
        return self.session.predict(self.dataset.graph.num_nodes, self.dataset.num_classes)

    def get_params(self) -> dict:
        return self.session.get_params()

    def set_params(self, params: dict):
        self.session.set_params(params)

    def save_checkpoint(self, path):
        self.session.save_checkpoint(path)

    def load_checkpoint(self, path):
        self.session.load_checkpoint(path)


class TrainingDiverged(UserError):
    pass


def run_memory_estimate(program, dataset, feature_path: str) -> dict:
    """Bytes a bound run will hold, by part: the buffer plan's peak (passes/liveness.py), the
    parameters with their optimizer state, and the runtime's copy of the graph and features."""
    import scipy.sparse as sp
    from .passes import analyse_liveness
    n, e = dataset.graph.num_nodes, dataset.graph.num_edges
    live = analyse_liveness(program, n, e)
    x = dataset.features
    if x is None:
        features = 0
    elif sp.issparse(x) and feature_path == "sparse":
        features = x.nnz * 8 + (n + 1) * 8
    else:
        features = n * dataset.num_features * 4
    # two CSR orders (by destination, by source) with edge ids, degrees, labels and masks
    graph = 2 * (n + 1) * 8 + 3 * e * 8 + n * 8 + n * 12
    return {"activations and gradients": live.peak_bytes,
            "parameters and optimizer state": live.param_bytes + live.optimizer_bytes,
            "graph and features": graph + features}


def check_run_fits(program, dataset, feature_path: str) -> None:
    """Refuse, before allocating anything, a run that cannot fit in the memory left."""
    from .resources import available_memory, gib
    free = available_memory()
    if free is None:
        return
    parts = run_memory_estimate(program, dataset, feature_path)
    need = sum(parts.values())
    if need > free:
        detail = ", ".join(f"{name} {gib(b)}" for name, b in parts.items())
        raise UserError(f"morphgen: error: training {program.name} on {dataset.name} needs about "
                        f"{gib(need)} ({detail}), but only {gib(free)} of memory is available")


def include_dirs():
    """Header folders every generated library is built against (runtime ABI, backend op layer)."""
    import morphgen.runtime as runtime_pkg
    import morphgen.backends.openmp as openmp_pkg
    return (str(Path(runtime_pkg.__file__).parent), str(Path(openmp_pkg.__file__).parent))


def compile(path, backend: str = "openmp", **kwargs) -> CompiledModel:
    """Check a program and prepare it for `backend`; the library is built when data is bound."""
    from .frontend import compile_file
    require_backend(backend)
    compile_file(str(path))          # diagnose now, not at fit time
    return CompiledModel(path, backend=backend, **kwargs)


# ----------------------------------------------------------------------------- commands
def compile_command(args) -> int:
    if args.emit == "ir":
        program = lower(args.model)
        print(program.dump())
        return 0
    backend = require_backend(args.backend)
    from .toolchain import compile_shared
    program = lower(args.model)
    emitter = backend.emitter_class()(program)
    sources = emitter.emit()
    if args.emit == "plan":
        print(emitter.plan())
        return 0
    if args.emit == "cpp":
        for name, text in sources.items():
            print(f"// ---- {name}\n{text}")
        return 0
    lib = compile_shared(sources, name=f"mg_{args.backend}", include_dirs=include_dirs())
    if args.output:
        out = Path(args.output)
        out.mkdir(parents=True, exist_ok=True)
        for name, text in sources.items():
            (out / name).write_text(text)
        (out / "program.ir").write_text(program.dump() + "\n")
        target = out / f"lib{_safe_stem(args.model)}_{args.backend}.so"
        target.write_bytes(Path(lib).read_bytes())
        print(f"wrote {', '.join(sorted(sources))}, program.ir and {target.name} to {out}")
    else:
        print(f"built {lib}")
    return 0


def _safe_stem(path) -> str:
    import re
    return re.sub(r"[^A-Za-z0-9_]", "_", Path(path).stem) or "model"


class Progress:
    """One-line progress bar on a terminal; a line every tenth of the run otherwise."""

    def __init__(self, stream=sys.stderr, quiet=False):
        self.stream = stream
        self.quiet = quiet
        self.tty = stream.isatty()

    def __call__(self, row, total):
        if self.quiet:
            return
        e = row["epoch"]
        width = 24
        done = int(width * e / total)
        bar = "#" * done + "." * (width - done)
        acc = ""
        if "train_acc" in row:
            acc = f" train {row['train_acc']:.3f} val {row['val_acc']:.3f} test {row['test_acc']:.3f}"
        text = f"[{bar}] epoch {e:>4}/{total} loss {row['loss']:.4f}{acc} {row['epoch_time_s'] * 1e3:7.1f} ms"
        if self.tty:
            self.stream.write("\r" + text + ("\n" if e == total else ""))
            self.stream.flush()
        elif e == total or e % max(1, total // 10) == 0 or e == 1:
            self.stream.write(text + "\n")


def train_command(args) -> int:
    from .data import load_dataset
    require_backend(args.backend)
    if args.sanitize:
        _rerun_with_sanitizer_runtime()
    for flag, target in (("--json", args.json_out), ("--checkpoint", args.checkpoint)):
        _check_writable(flag, target)      # before training, not after it
    dataset = load_dataset(args.dataset, data_dir=args.data_dir)
    if args.sparsity_threshold is None and dataset.features is not None:
        from .calibrate import calibrate
        calibrate(args.threads)               # measured once per machine (then cached): not training's memory
    from .bench.memory import start_training_peak
    model = CompiledModel(args.model, backend=args.backend, threads=args.threads, seed=args.seed,
                          sparsity_threshold=args.sparsity_threshold, hoist_invariants=not args.no_hoist,
                          sanitize=args.sanitize)
    print(f"morphgen: compiling {args.model} for {args.backend} ...", file=sys.stderr)
    # Compiling and loading the library come before the baseline, as importing their library does
    # for the peers: the growth measured from there is what training allocates.
    model.build(dataset)
    baseline_rss = start_training_peak()      # the data is loaded: growth from here is training's
    model.bind(dataset, donate_features=True)  # nothing here reads dataset.features again
    path, sparsity, tau, source = model.feature_path
    if tau is None:
        print(f"morphgen: feature path: {path} ({source})", file=sys.stderr)
    else:
        print(f"morphgen: feature path: {path} (sparsity {sparsity:.4f} vs tau {tau:.3f}, {source})",
              file=sys.stderr)
    print(f"morphgen: {dataset.name}: {dataset.graph.num_nodes} nodes, {dataset.graph.num_edges} edges, "
          f"{dataset.num_features} features, {dataset.num_classes} classes; {model.threads} threads; "
          f"compiled in {model.compile_seconds:.2f} s, data bound in {model.session.prepare_seconds:.2f} s",
          file=sys.stderr)
    if model.program.invariant:
        print(f"morphgen: {len(model.program.invariant)} aggregation(s) of the input features computed once "
              f"instead of every epoch", file=sys.stderr)
    if args.resume:
        model.load_checkpoint(args.resume)
    epochs = args.epochs if args.epochs is not None else model.program.epochs
    if epochs <= 0:
        raise UserError(f"morphgen: error: --epochs must be positive, got {epochs}")
    eval_every = max(1, epochs // 50)
    if args.profile:
        model.session.reset_timers()
    result = model.fit(epochs=epochs, progress=Progress(quiet=args.quiet), eval_every=eval_every)
    final = result.final
    times = [r["epoch_time_s"] for r in result.history]
    print(f"final: train_acc {final['train_acc']:.4f} val_acc {final['val_acc']:.4f} "
          f"test_acc {final['test_acc']:.4f} loss {result.history[-1]['loss']:.4f} "
          f"median epoch {np.median(times) * 1e3:.2f} ms")
    if args.profile:
        _print_profile(model.session.timers())
    if args.checkpoint:
        model.save_checkpoint(args.checkpoint)
        print(f"morphgen: checkpoint written to {args.checkpoint}", file=sys.stderr)
    if args.json_out:
        from .bench.memory import peak_rss_bytes
        peak = peak_rss_bytes()
        report = {
            "model": str(args.model), "backend": args.backend, "dataset": dataset.name,
            "epochs": epochs, "threads": model.threads, "seed": args.seed,
            "train_acc": final["train_acc"], "val_acc": final["val_acc"], "test_acc": final["test_acc"],
            "final_loss": result.history[-1]["loss"], "epoch_times_s": times,
            "compile_seconds": model.compile_seconds, "prepare_seconds": model.session.prepare_seconds,
            "hoisted_aggregations": len(model.program.invariant), "feature_path": path,
            "feature_sparsity": sparsity, "sparsity_threshold": tau,
            "peak_rss_bytes": peak, "baseline_rss_bytes": baseline_rss,
            "allocated_bytes": model.session.allocated_bytes(),
            "history": result.history,
        }
        if args.profile:
            report["profile"] = model.session.timers()
        write_atomically(Path(args.json_out), json.dumps(report, indent=2) + "\n")
    return 0


def _rerun_with_sanitizer_runtime() -> None:
    """A sanitized library loads only into a process that starts with the ASan runtime: restart
    this command with it preloaded (once; the restarted process finds it in LD_PRELOAD)."""
    from .toolchain import asan_runtime_path
    runtime = str(asan_runtime_path())
    if runtime in os.environ.get("LD_PRELOAD", "").split(":"):
        return
    env = dict(os.environ, LD_PRELOAD=":".join(filter(None, [runtime, os.environ.get("LD_PRELOAD")])))
    # Python itself leaks by design and is not instrumented: report only the library's errors.
    env.setdefault("ASAN_OPTIONS", "detect_leaks=0:halt_on_error=1")
    env.setdefault("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1")
    print("morphgen: restarting with the sanitizer runtime preloaded", file=sys.stderr)
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "morphgen", *sys.argv[1:]], env)


def _check_writable(flag: str, target) -> None:
    if target is None:
        return
    path = Path(target)
    if path.is_dir():
        raise UserError(f"morphgen: error: {flag} {path} is a directory; give a file name")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        raise UserError(f"morphgen: error: {flag} {path}: the folder {folder} does not exist or is not writable")


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, then rename it into place: an interrupted
    write never leaves a half file, and what was at `path` stays until the new one is complete."""
    tmp = path.with_name(f".{path.name}.partial-{os.getpid()}")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise UserError(f"morphgen: error: cannot write {path}: {err.strerror or err}") from err


def _print_profile(rows):
    print(f"{'kernel':<28}{'calls':>8}{'seconds':>10}{'GB/s':>9}{'GFLOP/s':>9}")
    for r in sorted(rows, key=lambda r: -r["seconds"]):
        if not r["calls"]:
            continue
        s = max(r["seconds"], 1e-12)
        print(f"{r['kernel']:<28}{r['calls']:>8}{r['seconds']:>10.4f}{r['bytes'] / s / 1e9:>9.2f}"
              f"{r['flops'] / s / 1e9:>9.2f}")

"""The Python API.

    import morphgen
    model = morphgen.compile("examples/gcn.mp", backend="openmp")
    history = model.fit(dataset, epochs=200)          # a morphgen.data.Dataset
    print(model.evaluate())

The pipeline of GUIDE §2 (morphgen.pipeline): parse + check -> IR -> bind sizes to the data ->
autodiff -> passes -> backend emitter -> build (cached) -> cffi session.  Python only drives epochs.
"""
from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from .backends import require as require_backend
from .arg_types import MAX_SEED
from .early_stopping import TrainingRecord, require_validation_nodes
from .errors import UserError
from .grammar.diagnostics import suggest
from .pipeline import (build_library, check_run_fits, choose_feature_path, features_payload, lower,
                       normalize_features, sizes_of, with_graph_options)
from .resources import usable_cores


@dataclass
class TrainResult:
    history: list = field(default_factory=list)      # per epoch: loss, epoch_time_s, accs when evaluated
    final: dict = field(default_factory=dict)
    stopped: bool = False       # fit's stop() asked for an end before its last epoch


class CompiledModel:
    """A program compiled for one backend; `fit` binds it to a dataset and trains."""

    def __init__(self, path, backend: str = "openmp", threads: Optional[int] = None, seed: int = 0,
                 sparsity_threshold: Optional[float] = None, sanitize: bool = False,
                 hoist_invariants: bool = True, edge_typed_layout: str = "auto", op_timers: bool = False):
        """``hoist_invariants=False`` keeps aggregations of the input features and what the
        program computes from the graph alone inside the epoch (passes/hoist_invariant.py), e.g.
        to measure what hoisting them saves.
        ``edge_typed_layout``: how a typed linear of gathered node rows is computed on backends
        with those kernels: auto (picked per op from the graph), compact (one product per
        distinct (node, edge type) pair), edge (one per edge), gathered (per-edge copies of the
        rows first, the unfused form); passes/edge_typed_linear.py.
        ``op_timers``: one kernel timer per IR op (``session.timers()`` names each 'family: %id
        opcode') instead of one per kernel family."""
        self._backend = require_backend(backend)
        self.path = Path(path)
        self.backend = backend
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise UserError(f"morphgen: error: threads must be a positive integer, not {threads!r}")
        self.threads = threads or usable_cores()
        if not _is_count(seed) or not 0 <= seed <= MAX_SEED:
            raise UserError(f"morphgen: error: seed must be an integer 0 .. 2**63-1, not {seed!r}")
        self.seed = int(seed)
        if sparsity_threshold is not None and not (isinstance(sparsity_threshold, (int, float, np.number))
                                                   and 0.0 <= float(sparsity_threshold) <= 1.0):
            raise UserError(f"morphgen: error: sparsity_threshold must be a number in [0, 1], "
                            f"not {sparsity_threshold!r}")
        self.sparsity_threshold = sparsity_threshold
        self.sanitize = sanitize
        self.hoist_invariants = hoist_invariants
        self.edge_typed_layout = _checked_edge_typed_layout(edge_typed_layout)
        self.op_timers = op_timers
        self.program = None
        self.session = None
        self.record = None              # the session's early-stopping record (early_stopping.py)
        self.dataset = None             # what the session holds (features possibly normalised)
        self.bound_to = None            # the dataset the caller gave
        self._bound_spec = None         # the name or path it was loaded from, when given as one
        self.feature_path = None
        self.compile_seconds = 0.0
        self.library_path = None
        self._emitter = None            # the program's emitter, from build()
        self._built_for = None          # (sizes, featureless, feature path) the library was built for
        self._front = None              # the program as the front end reads it, before sizes

    # -- binding to data -----------------------------------------------------------------
    def build(self, dataset):
        """Lower the program for this dataset's sizes and feature path, compile it and load the
        library (no data is bound and nothing is allocated for training yet)."""
        return self._build(self._with_graph_options(dataset))

    def _with_graph_options(self, dataset):
        """``dataset`` as the library sees it: the program's graph option applied (its sizes may
        change: typed self loops are an edge type of their own), after checking the task."""
        self._check_task(dataset)
        return with_graph_options(dataset, self._front_end())

    def _build(self, dataset):
        """build() for a dataset whose graph option is applied."""
        from .library import load
        t0 = time.perf_counter()
        sources, path = self._choose_path_and_emit(dataset)
        # Dropped sparse features stay in the features' own format: no buffer of the plan holds them.
        kept_sparse = set(self._emitter.feature_like) if path[0] == "sparse" else set()
        unstored = kept_sparse | self._emitter.unstored_values()
        check_run_fits(self.program, dataset, path[0], unstored, self._gpu())   # before minutes of compiling
        self.library_path = build_library(sources, self._backend, sanitize=self.sanitize)
        load(str(self.library_path), self.backend)
        self.compile_seconds = time.perf_counter() - t0
        self.feature_path = path
        self._built_for = self._build_key(dataset, sparsity=path[1])
        return self

    def _gpu(self) -> Optional[int]:
        """The GPU whose memory the buffers take, or None (host memory, or the CUDA emulation)."""
        if not self._backend.capabilities.device_memory:
            return None
        from morphgen.backends.cuda.toolchain import device_index
        return device_index()

    def _choose_path_and_emit(self, dataset) -> tuple:
        """(generated sources, feature path) for a dataset whose graph option is applied.

        The feature path decides the program: dense features let the passes hoist their
        aggregations out of the epoch.  Row normalisation keeps the sparsity, so the raw features
        decide.  A program that reads the features outside a linear layer is lowered again for
        the dense path."""
        can_sparse = self._backend.capabilities.sparse_features
        hoisting = self.hoist_invariants and self._backend.capabilities.hoist_invariants
        dense_program = (lambda: lower(self.path, sizes_of(dataset), False, True)) if hoisting else None
        calibration = self._backend.feature_calibration
        path = choose_feature_path(dataset, self.sparsity_threshold, can_sparse, self.threads, dense_program,
                                   calibration)
        sources = self._lower_and_emit(dataset, dense=path[0] == "dense")
        if path[0] == "sparse" and self._emitter.needs_dense_features:
            path = choose_feature_path(dataset, self.sparsity_threshold, False, self.threads, calibration=calibration)
            sources = self._lower_and_emit(dataset, dense=True)
        return sources, path

    def lower_for(self, dataset) -> dict:
        """What `build(dataset)` would compile, without compiling it: the program lowered for the
        dataset's sizes, graph and feature path (``self.program``, ``self.feature_path``) and the
        generated sources, returned; ``plan_table()`` says what the backend chose per op."""
        sources, self.feature_path = self._choose_path_and_emit(self._with_graph_options(dataset))
        return sources

    def plan_table(self) -> str:
        """Per IR op of the last lowering: the kernel, fusion and buffer the backend chose."""
        if self._emitter is None:
            raise UserError("morphgen: error: plan_table() needs a lowering first (lower_for or build)")
        return self._emitter.plan_table()

    def _lower_and_emit(self, dataset, dense: bool) -> dict:
        hoist = self.hoist_invariants and dense and self._backend.capabilities.hoist_invariants
        fused = self._backend.capabilities.edge_typed_linear and self.edge_typed_layout != "gathered"
        self.program = lower(self.path, sizes_of(dataset), dataset.features is None, hoist,
                             self._backend.capabilities.bases_per_lookup,
                             self.edge_typed_layout if fused else None, dataset.graph,
                             graph_constants=self.hoist_invariants and self._backend.capabilities.hoist_invariants)
        self._backend.check_program(self.program)
        self._emitter = self._backend.emitter_class()(self.program, op_timers=self.op_timers)
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
        if self.backend == "mpi":
            # one process cannot hold the ranks: the launcher partitions the graph and starts them
            raise UserError("morphgen: error: the mpi backend trains on several processes: run `morphgen train "
                            "MODEL.mp --backend mpi --ranks N` (compile(..., backend='mpi') builds the library "
                            "only; fit() and bind() train with backend 'openmp' or 'cuda')")
        spec = dataset if isinstance(dataset, (str, os.PathLike)) else None
        dataset = self._load(dataset)
        looped = self._with_graph_options(dataset)
        if self._built_for != self._build_key(looped):
            self._build(looped)
        self.bound_to, self._bound_spec = dataset, spec
        normalised = normalize_features(looped, self.program.feature_normalization)
        # A dense array made from sparse features is referenced by nothing here: ours to give.  A
        # normalised copy stays readable as model.dataset.features, so only the caller gives it
        # (an aggregation hoisted in place would overwrite it).
        own_copy = sp.issparse(normalised.features)
        dataset = normalised
        layout = GraphLayout.from_graph(dataset.graph)
        masks = None if self.link_task else (dataset.train_mask, dataset.val_mask, dataset.test_mask)
        self.session = Session(self.library_path, layout, features_payload(dataset, self.feature_path[0]),
                               dataset.labels, masks, self.program.sizes, self.threads, self.seed,
                               donate_features=donate_features or own_copy)
        self.session.set_params(init_params(self.program, seed=self.seed))
        self.record = TrainingRecord(self.session, self.program.early_stopping)
        self.dataset = dataset
        return self

    @staticmethod
    def _load(dataset):
        """A dataset given by name, path or synthetic spec is loaded as `morphgen train --dataset`
        would ($MORPHGEN_DATA for names)."""
        if isinstance(dataset, (str, os.PathLike)):
            from .data import load_dataset
            return load_dataset(dataset)
        return dataset

    def _is_bound_spec(self, dataset) -> bool:
        """fit("cora") after fit("cora") continues training on the bound data, as it does when the
        same dataset object is given again, instead of loading and binding it afresh."""
        return (isinstance(dataset, (str, os.PathLike)) and self._bound_spec is not None
                and os.fspath(dataset) == os.fspath(self._bound_spec))

    def _front_end(self):
        """The program as written (no sizes bound): its task and graph options."""
        if self._front is None:
            from .frontend import compile_file
            self._front = compile_file(str(self.path))
        return self._front

    @property
    def link_task(self) -> bool:
        return self.program is not None and self.program.task == "link"

    def _check_task(self, dataset) -> None:
        """A link-prediction program needs triples, a node classifier labels: say so before the
        dataset's sizes are bound (a missing class count would be the first complaint)."""
        link = self._front_end().task == "link"
        data_task = dataset.task
        if link and data_task != "link":
            raise UserError(f"morphgen: error: {self.path} predicts links (gnn.linkLoss), but dataset "
                            f"'{dataset.name}' has no triples to score (link datasets hold train_triples, e.g. wn18rr)")
        if not link and data_task == "link":
            raise UserError(f"morphgen: error: {self.path} classifies nodes (gnn.loss), but dataset "
                            f"'{dataset.name}' is a link-prediction dataset (triples, no labels); "
                            f"write the program with gnn.linkLoss")

    def fit(self, dataset=None, epochs: Optional[int] = None, progress=None, eval_every: int = 1,
            checkpoint=None, checkpoint_every: Optional[int] = None, stop=None) -> TrainResult:
        """Train `epochs` more epochs (default: the program's count).  With gnn.earlyStopping the
        model ends with the best epoch's weights; a later fit, or a checkpoint saved now, continues
        from the last epoch's, so fit(d, 3) then fit(d, 3) trains as fit(d, 6) does.
        checkpoint: save_checkpoint(checkpoint) at the end, and with checkpoint_every after every
        checkpoint_every-th epoch of this call as well (each replaces the last, atomically), so
        that a run killed on the way resumes from its last multiple of checkpoint_every.
        stop: called after each epoch; when it returns true, training ends there as if that had
        been the last epoch (the checkpoint saved, the model evaluated) and result.stopped is set
        (morphgen.stop_signals.stop_on_signals gives one that SIGTERM and SIGUSR1 set)."""
        _check_fit_arguments(dataset, epochs, eval_every, checkpoint, checkpoint_every, stop)
        if dataset is not None and dataset is not self.bound_to and not self._is_bound_spec(dataset):
            if self.session is not None and self.session.epoch() > 0:
                warnings.warn("fit(): another dataset than the bound one (an equal copy counts as another): "
                              "the model is bound to it afresh and starts from its initial weights; to "
                              "continue training, give the bound dataset (or the same name) again, or carry "
                              "the weights over with get_params() and set_params()", stacklevel=2)
            self.bind(dataset)
        if self.session is None:
            raise UserError("morphgen: error: fit() needs a dataset")
        require_validation_nodes(self.program.early_stopping, self.dataset, self.path)
        if checkpoint is not None:
            self._check_checkpoint_target(checkpoint)      # before training, not after it
        epochs = self.program.epochs if epochs is None else epochs
        if self.link_task:
            eval_every = 0          # ranking every node for every held-out triple: at the end only
        record = self.record
        if record.stopper:
            eval_every = 1          # it selects by the validation accuracy of every epoch
        record.resume_training()
        result = TrainResult()
        for epoch in range(1, epochs + 1):
            if record.should_stop():        # resumed from a run that had stopped
                break
            t0 = time.perf_counter()
            if self.link_task:
                from .negative_sampling import epoch_triples
                # keyed by the library's epoch: a run resumed from a checkpoint draws what the
                # uninterrupted run would have drawn
                self.session.set_triples(epoch_triples(self.dataset.train_triples, self.dataset.num_nodes,
                                                       self.program.negatives, self.seed, self.session.epoch()))
            loss = self.session.train_epoch()
            row = {"epoch": epoch, "loss": loss, "epoch_time_s": time.perf_counter() - t0}
            if not np.isfinite(loss):
                result.history.append(row)
                raise TrainingDiverged(f"morphgen: error: the loss became {loss} at epoch {epoch}")
            if not self.link_task and (epoch == epochs or (eval_every and epoch % eval_every == 0)):
                row.update(self.session.evaluate())
                row["loss"] = loss
            result.history.append(row)
            if progress:
                progress(row, epochs)
            if record.observe(row.get("val_acc", 0.0)):
                break
            if stop is not None and epoch < epochs and stop():
                result.stopped = True
                break
            if checkpoint_every and epoch % checkpoint_every == 0 and epoch < epochs:
                self.save_checkpoint(checkpoint)      # after observe: the record holds this epoch
        # An activation may hide NaN weights from the loss (relu's max(NaN, 0) is 0): look at them.
        broken = [name for name, value in self.session.get_params().items() if not np.all(np.isfinite(value))]
        if broken:
            raise TrainingDiverged(f"morphgen: error: weights became NaN or infinite during training "
                                   f"({', '.join(broken[:3])}{' ...' if len(broken) > 3 else ''}); a lower "
                                   f"learning rate may help")
        record.keep_best()
        if checkpoint is not None:
            self.save_checkpoint(checkpoint)
        result.final = self.evaluate()
        if record.stopper:
            result.final.update(best_epoch=record.stopper.best_epoch, epochs_run=len(result.history))
        return result

    def _bound(self, what: str):
        """The session, or a clear error for a model not bound to data yet."""
        if self.session is None:
            raise UserError(f"morphgen: error: {what}() needs a bound model: call fit() or bind() first")
        return self.session

    def evaluate(self) -> dict:
        self._bound("evaluate")
        if not self.link_task:
            return self.session.evaluate()
        return self.evaluate_links()

    def evaluate_links(self, splits=("valid", "test")) -> dict:
        """Filtered MRR and Hits@1/3/10 of the held-out triples (morphgen/link_eval.py), and the
        training loss of the last triples set."""
        from .data.link import SPLITS
        from .link_eval import held_out_metrics
        splits = (splits,) if isinstance(splits, str) else tuple(splits)
        for split in splits:
            if split not in SPLITS:
                raise UserError(f"morphgen: error: evaluate_links(): no split {split!r} (the splits: "
                                f"{', '.join(SPLITS)})")
        z = self.predict()
        rel = self.get_params()[self.relation_weight].reshape(-1, z.shape[1])
        triples = {split: getattr(self.dataset, f"{split}_triples") for split in SPLITS}
        return {"loss": self.session.evaluate()["loss"], **held_out_metrics(z, rel, triples, splits)}

    @property
    def relation_weight(self) -> str:
        """The name of the weight a link-prediction loss scores relations with."""
        loss_op = self.program.producer(self.program.forward)[self.program.loss.id]
        return loss_op.inputs[1].name

    def predict(self) -> np.ndarray:
        """Logits (node classification) or the node embeddings (link prediction), one row per node."""
        self._bound("predict")
        width = self.program.logits.shape[-1] if self.link_task else self.dataset.num_classes
        return self.session.predict(self.dataset.graph.num_nodes, width)

    def get_params(self) -> dict:
        """Every weight by name, as a flat float32 array (checkpoint order and layout)."""
        return self._bound("get_params").get_params()

    def set_params(self, params: dict):
        """Replace the named weights (any subset); unknown names and non-finite values are refused."""
        session = self._bound("set_params")
        if not isinstance(params, dict):
            raise UserError(f"morphgen: error: set_params() takes a dict of weights by name, not "
                            f"{type(params).__name__}")
        names = session.param_names()
        shapes = {p.name: tuple(p.value.shape) for p in self.program.params}
        for name, value in params.items():
            if name not in names:
                raise UserError(f"morphgen: error: set_params(): the model has no weight {name!r}"
                                + suggest(str(name), names))
            array = np.asarray(value)
            if array.dtype.kind not in "biuf":
                raise UserError(f"morphgen: error: set_params(): {name!r} must hold real numbers, "
                                f"got an array of {array.dtype}")
            # flat, as get_params() gives it, or in the declared shape; an [out, in] matrix of
            # another framework has the size of the [in, out] one: refused, not read in the wrong order
            shape = shapes.get(name)
            flat = array.ndim == 1 and shape is not None and array.size == int(np.prod(shape))
            if shape is not None and array.shape != shape and not flat:
                raise UserError(f"morphgen: error: set_params(): {name!r} has shape {list(shape)} "
                                f"({int(np.prod(shape))} values flat, as get_params() gives it), got "
                                f"{list(array.shape)}")
            if not np.all(np.isfinite(array.astype(np.float32))):
                raise UserError(f"morphgen: error: set_params(): {name!r} holds NaN or infinite values")
        session.set_params(params)
        self.record.weights_set_by_caller()

    def save_checkpoint(self, path):
        """The training state: the epoch count, the last epoch's weights and optimizer state, and
        gnn.earlyStopping's record, from which training continues as if it had not stopped."""
        self._bound("save_checkpoint")
        self._check_checkpoint_target(path)
        self.record.save_checkpoint(path)

    def _check_checkpoint_target(self, path) -> None:
        """As `morphgen train --checkpoint`: only an earlier checkpoint is replaced, never the
        program, the dataset file it was loaded from, or a file morphgen did not write."""
        from .outputs import check_output_file, is_checkpoint
        if not isinstance(path, (str, os.PathLike)):
            raise UserError(f"morphgen: error: a checkpoint is saved to a file name (a str or path), "
                            f"not {type(path).__name__}")
        from .data.resolve import dataset_file
        inputs = [("the program", self.path)]
        if self._bound_spec is not None:
            inputs.append(("the dataset", dataset_file(self._bound_spec)))   # None: the generator
        check_output_file("checkpoint", path, is_checkpoint, "checkpoint", inputs)

    def load_checkpoint(self, path):
        """The state save_checkpoint saved, and the model as its run left it: with
        gnn.earlyStopping the best epoch's weights in use (evaluate, predict, get_params), while a
        later fit continues from the last epoch's."""
        self._bound("load_checkpoint")
        self.record.load_checkpoint(path)
        self.record.keep_best()
        from .outputs import checkpoint_seed
        recorded = checkpoint_seed(path)
        if recorded is not None and recorded != self.seed:
            warnings.warn(f"load_checkpoint(): {path} was trained with seed {recorded}, this model has seed "
                          f"{self.seed}: the epochs trained from here draw other dropout masks (and negative "
                          f"samples) than the checkpoint's run would have; compile with seed={recorded} to "
                          f"continue it exactly", stacklevel=2)


# the pass's choices, and the unfused form (passes/edge_typed_linear.py)
EDGE_TYPED_LAYOUTS = ("auto", "compact", "edge", "gathered")


def _checked_edge_typed_layout(layout: str) -> str:
    if layout not in EDGE_TYPED_LAYOUTS:
        raise UserError(f"morphgen: error: edge typed layout must be one of {', '.join(EDGE_TYPED_LAYOUTS)}, "
                        f"not {layout!r}")
    return layout


class TrainingDiverged(UserError):
    exit_status = 1         # a failed run, not bad input (slurm/README.md, exit statuses)


def _is_count(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _check_fit_arguments(dataset, epochs, eval_every, checkpoint=None, checkpoint_every=None, stop=None) -> None:
    from .data.dataset import GraphData
    if dataset is not None and not isinstance(dataset, (GraphData, str, os.PathLike)):
        raise UserError(f"morphgen: error: fit() takes a dataset from morphgen.data.load_dataset or its "
                        f"name, path or synthetic spec, not {type(dataset).__name__} {dataset!r:.60}")
    if epochs is not None and (not _is_count(epochs) or epochs < 1):
        raise UserError(f"morphgen: error: fit(): epochs must be a positive integer, got {epochs!r}")
    if not _is_count(eval_every) or eval_every < 0:
        raise UserError(f"morphgen: error: fit(): eval_every must be an integer >= 0 (0: only after the "
                        f"last epoch), got {eval_every!r}")
    if checkpoint_every is not None and (not _is_count(checkpoint_every) or checkpoint_every < 1):
        raise UserError(f"morphgen: error: fit(): checkpoint_every must be a positive integer, got {checkpoint_every!r}")
    if checkpoint_every is not None and checkpoint is None:
        raise UserError("morphgen: error: fit(): checkpoint_every needs checkpoint, the file to save to")
    if stop is not None and not callable(stop):
        raise UserError(f"morphgen: error: fit(): stop must be a function of no arguments, got {stop!r:.60}")


def compile(path, backend: str = "openmp", **kwargs) -> CompiledModel:
    """Check a program and prepare it for `backend`; the library is built when data is bound."""
    from .frontend import compile_file
    require_backend(backend)
    front = compile_file(str(path))          # diagnose now, not at fit time
    for warning in front.warnings:
        warnings.warn(warning.render(), stacklevel=2)
    model = CompiledModel(path, backend=backend, **kwargs)
    model._front = front                     # read once: its task and graph options serve bind()
    return model


# ----------------------------------------------------------------------------- commands

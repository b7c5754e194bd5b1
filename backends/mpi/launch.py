"""`morphgen train MODEL.mp --backend mpi --ranks N`: build once, partition once, start N ranks.

The launcher does what needs the whole dataset: it checks and compiles the program for the
dataset's sizes (one library for every rank: sizes that differ per rank are read at run time),
chooses the feature path, applies the program's feature preprocessing, partitions the graph and
writes one part file per rank (reused by later runs on the same data), saves the initial weights,
and then runs ``mpiexec -n N python -m morphgen.backends.mpi.worker RUN.json``.  The dataset is
released before the ranks start: each rank loads only its part.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from morphgen.errors import UserError
from morphgen.library import openmp_wait_env
from morphgen.resources import usable_cores
from morphgen.stop_signals import STOPPED_EXIT_STATUS, stop_on_signals

from .worker import rank_messages


def ranks_per_node(ranks: int) -> int:
    """Ranks that share one node's cores: all of them, unless a SLURM job spreads them over nodes."""
    try:
        nodes = max(1, int(os.environ.get("SLURM_JOB_NUM_NODES", "1")))
    except ValueError:
        nodes = 1
    return -(-ranks // nodes)


def mpiexec() -> str:
    """pip's `mpich` installs mpiexec beside the Python it belongs to; else PATH's ($MORPHGEN_MPIEXEC wins)."""
    if "MORPHGEN_MPIEXEC" in os.environ:
        return os.environ["MORPHGEN_MPIEXEC"]
    beside = Path(sys.executable).parent / "mpiexec"
    found = str(beside) if beside.is_file() else shutil.which("mpiexec")
    if not found:
        raise UserError("morphgen: error: the mpi backend needs mpiexec: `pip install mpich mpi4py` "
                        "(the project's [mpi] extra) or set $MORPHGEN_MPIEXEC")
    return found


def default_parts_dir(key: str, ranks: int) -> Path:
    from morphgen.toolchain import cache_root
    return cache_root() / "parts" / f"{key}-{ranks}"


def prepare_parts(dataset, ranks: int, normalization, parts_dir=None, log=print,
                  partitioner: str = "morphgen", chooser=None) -> Path:
    """The directory of part files for this dataset, rank count and partitioner: reused when it
    matches, written otherwise; one that belongs to other data is an error, never overwritten.
    ``chooser`` (epoch_cost.EpochCostModel) prices the candidates of --partitioner auto."""
    from .parts import dataset_key, read_manifest, write_parts
    key = dataset_key(dataset, normalization, ranks, partitioner, chooser)
    directory = Path(parts_dir) if parts_dir else default_parts_dir(key, ranks)
    if (directory / "manifest.json").exists():
        read_manifest(directory, key, ranks, partitioner)
        log(f"morphgen: reusing the {ranks}-rank partition in {directory}")
        return directory
    if directory.exists() and any(directory.iterdir()):
        raise UserError(f"morphgen: error: --parts-dir {directory}: exists and holds no morphgen part files")
    if directory.exists():
        directory.rmdir()
    log(f"morphgen: partitioning {dataset.name} into {ranks} parts ({partitioner}) ...")
    def report(p):
        log(f"morphgen:   {p.candidate:>13}: predicted epoch {p.epoch_s * 1e3:.2f} ms (aggregations "
            f"{p.aggregate_s * 1e3:.2f}, dense {p.dense_s * 1e3:.2f}, halo {p.halo_s * 1e3:.2f}), "
            f"{p.ghosts} ghost rows, edge imbalance {p.edge_imbalance:.2f}")
    manifest = write_parts(dataset, ranks, directory, key, partitioner, chooser=chooser, on_candidate=report)
    if partitioner == "auto" and ranks > 1:
        from .epoch_cost import TIE
        log(f"morphgen: chose the {manifest['partition']['chosen']} partition (the fastest predicted epoch; "
            f"a later candidate must be predicted {TIE:.0%} faster to be preferred)")
    ghosts = sum(p["ghosts"] for p in manifest["parts"])
    log(f"morphgen: wrote {ranks} part files to {directory} ({ghosts} ghost rows in all)")
    return directory


def train_distributed(args) -> int:
    """With --checkpoint, SIGTERM and SIGUSR1 stop the run at the end of an epoch, saved: they are
    passed on to the ranks (mpiexec forwards SIGUSR1 to every one), which agree on the epoch."""
    ranks_started = []       # mpiexec, once it runs
    signal_files = []        # where the ranks read which signal the launcher got, once they run

    def forward(signum):
        for path in signal_files:          # the ranks get SIGUSR1 whatever came: they report this one
            if not path.exists():
                try:
                    path.write_text(signal.Signals(signum).name)
                except OSError:
                    pass
        for proc in ranks_started:
            if proc.poll() is None:
                proc.send_signal(signal.SIGUSR1)

    with stop_on_signals(enabled=bool(args.checkpoint), forward=forward) as stop:
        return _train_distributed(args, stop, ranks_started, signal_files)


def _train_distributed(args, stop, ranks_started: list, signal_files: list) -> int:
    from morphgen.api import CompiledModel
    from morphgen.commands import epochs_to_train, note_missing_validation, note_unread_edge_weights
    from morphgen.passes.hoist_invariant import hoisted_aggregations
    from morphgen.early_stopping import require_validation_nodes
    from morphgen.outputs import checkpoint_epochs
    from morphgen.data import load_dataset
    from morphgen.interp import init_params
    from morphgen.pipeline import features_payload, preprocess

    def log(text):
        print(text, file=sys.stderr, flush=True)

    ranks = args.ranks
    if ranks < 1:
        raise UserError(f"morphgen: error: --ranks must be at least 1, got {ranks}")
    threads = args.threads or max(1, usable_cores() // ranks)
    dataset = load_dataset(args.dataset, data_dir=args.data_dir)
    if ranks > dataset.graph.num_nodes:
        raise UserError(f"morphgen: error: --ranks {ranks} is larger than {dataset.name}'s "
                        f"{dataset.graph.num_nodes} nodes")
    model = CompiledModel(args.model, backend="mpi", threads=threads, seed=args.seed,
                          sparsity_threshold=args.sparsity_threshold, hoist_invariants=not args.no_hoist,
                          edge_typed_layout=args.edge_typed_layout)
    log(f"morphgen: compiling {args.model} for mpi ...")
    model.build(dataset)
    program = model.program
    require_validation_nodes(program.early_stopping, dataset, args.model)
    path = model.feature_path[0]
    normalised = preprocess(dataset, program)
    kind, payload = features_payload(normalised, path)
    if kind != "identity":
        normalised = dataclasses.replace(normalised, features=payload)
    chooser = None
    if args.partitioner == "auto" and ranks > 1:
        from .epoch_cost import EpochCostModel, epoch_work
        chooser = EpochCostModel.for_this_machine(epoch_work(program), threads)
    parts_dir = prepare_parts(normalised, ranks, program.feature_normalization, args.parts_dir, log,
                              args.partitioner, chooser)
    # the ranks load the checkpoint; its header says how many epochs are left (a file that is not
    # a checkpoint counts none here, and the ranks' loading of it says what is wrong)
    epochs_before = (checkpoint_epochs(args.resume) or 0) if args.resume else 0
    epochs = epochs_to_train(args, program.epochs, epochs_before)
    log(f"morphgen: {dataset.name}: {dataset.graph.num_nodes} nodes, {dataset.graph.num_edges} edges; "
        f"{ranks} ranks x {threads} threads; feature path {path}; compiled in {model.compile_seconds:.2f} s")
    note_missing_validation(dataset, log)
    note_unread_edge_weights(dataset, program, log)
    # The run's files sit beside the part files: every rank, on every node, must read them.
    with tempfile.TemporaryDirectory(prefix=".run-", dir=parts_dir) as run_dir:
        init = Path(run_dir) / "init.npz"
        np.savez(init, **{k: np.asarray(v, np.float32) for k, v in init_params(program, seed=args.seed).items()})
        spec = {
            "library": str(model.library_path), "parts_dir": str(parts_dir), "ranks": ranks,
            "sizes": {k: int(v) for k, v in program.sizes.items()}, "threads": threads, "seed": args.seed,
            "epochs": epochs, "eval_every": max(1, epochs // 50), "init_params": str(init),
            "early_stopping": program.early_stopping,
            "resume": args.resume and str(Path(args.resume).resolve()),
            "checkpoint": args.checkpoint and str(Path(args.checkpoint).resolve()),
            "checkpoint_every": args.checkpoint_every,
            "json_out": args.json_out and str(Path(args.json_out).resolve()), "quiet": args.quiet,
            "profile": bool(getattr(args, "profile", False)),
            "link": _link_spec(model) if model.link_task else None,
            "predictions": args.predictions and {"path": str(Path(args.predictions).resolve()),
                                                 "width": int(dataset.num_classes or 0)},
            "report": {"model": str(args.model), "backend": "mpi", "dataset": dataset.name, "seed": args.seed,
                       "feature_path": path, "compile_seconds": model.compile_seconds,
                       "hoisted_aggregations": hoisted_aggregations(program),
                       "parts_dir": str(parts_dir), "partitioner": args.partitioner},
        }
        spec["stop_signal_file"] = str(Path(run_dir) / "stop_signal")
        signal_files.append(Path(spec["stop_signal_file"]))
        spec_path = Path(run_dir) / "run.json"
        spec_path.write_text(json.dumps(spec))
        del dataset, normalised, payload, model      # the ranks load their own parts
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), **openmp_wait_env(ranks_per_node(ranks) * threads))
        command = [mpiexec(), "-n", str(ranks), sys.executable, "-m", "morphgen.backends.mpi.worker", str(spec_path)]
        if stop():
            log(f"morphgen: {stop.signal_name}: stopped before the ranks started; nothing trained, nothing saved")
            return STOPPED_EXIT_STATUS
        with subprocess.Popen(command, env=env) as proc:
            ranks_started.append(proc)
            try:
                code = _wait_taking_signals(proc)
            except BaseException:     # Ctrl-C: leave no rank behind (as subprocess.call does)
                proc.kill()
                raise
        messages = rank_messages(Path(run_dir), ranks)   # read before the run's folder goes
        if code == STOPPED_EXIT_STATUS and not messages:
            return code       # rank 0 said where it stopped and what it saved
        if code != 0:
            why = "; ".join(messages) if messages else "no rank left a message: one was killed or crashed (see above)"
            raise RankFailure(f"morphgen: error: the {ranks}-rank MPI job failed (exit status {code}): {why}", code)
    return 0


def _wait_taking_signals(proc) -> int:
    """proc's exit status.  Not one blocking wait: a signal that the kernel hands to another of
    this process's threads (OpenMP's, BLAS's) would not interrupt it, and the Python handler that
    passes a stop on to the ranks would only run once they had ended.  A wait with a timeout
    returns to the interpreter every few tens of milliseconds, where pending handlers run."""
    while True:
        try:
            return proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            continue


def _link_spec(model) -> dict:
    """What the ranks of a link-prediction run need beside their parts: the negatives drawn per
    training triple, the weight the loss scores relations with, the embeddings' width."""
    return {"negatives": model.program.negatives, "relation_weight": model.relation_weight,
            "width": int(model.program.logits.shape[-1])}


class RankFailure(UserError):
    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code
        # a rank's own verdict (2 bad input, 3 internal error) stands; a rank that crashed or was
        # killed is a failed run
        self.exit_status = code if code in (2, 3) else 1

"""The `compile`, `train` and `predict` commands: arguments in, terminal output and files out."""
from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

import numpy as np

from .api import CompiledModel
from .backends import require as require_backend
from .errors import UserError
from .outputs import check_output_folder, marked, write_atomically
from .passes.hoist_invariant import hoisted_aggregations
from .pipeline import build_library, edge_weight_reads, lower
from .stop_signals import STOPPED_EXIT_STATUS, stop_on_signals


REPORT_HEADER = "# morphgen compile --emit report"


def _compiled_folder(path: Path) -> bool:
    """An earlier `compile -o` output: it holds the program's IR, or a report morphgen wrote."""
    report = path / "report.txt"
    return (path / "program.ir").is_file() or (report.is_file() and report.read_text(errors="replace")
                                                .startswith(REPORT_HEADER))


def compile_command(args) -> int:
    if args.output is not None and args.emit in ("ir", "plan", "cpp"):
        raise UserError(f"morphgen: error: -o is the folder for what --emit lib and report write (the library, "
                        f"its sources, the report); --emit {args.emit} prints to the terminal: redirect it "
                        f"to a file")
    if args.dataset is not None:
        return _compile_for_dataset(args)
    if args.sparsity_threshold is not None:
        raise UserError("morphgen: error: --sparsity-threshold chooses the feature path for a dataset: "
                        "give --dataset too")
    if args.emit == "report":
        return _report(args)
    if args.emit == "ir":
        program = lower(args.model)
        print(program.dump())
        return 0
    backend = require_backend(args.backend)
    # The layout of typed linears at edge ends is the one rewrite a backend's capabilities gate
    # that needs no data: without a graph, auto is compact (passes/edge_typed_linear.py).
    fused = backend.capabilities.edge_typed_linear and args.edge_typed_layout != "gathered"
    program = lower(args.model, edge_typed_layout=args.edge_typed_layout if fused else None)
    backend.check_program(program)
    emitter = backend.emitter_class()(program)
    sources = emitter.emit()
    if args.emit == "plan":
        print(emitter.plan_table())
        return 0
    if args.emit == "cpp":
        for name, text in sources.items():
            print(f"// ---- {name}\n{text}")
        return 0
    library_name = f"lib{_safe_stem(args.model)}_{args.backend}.so"
    check_output_folder("-o", args.output, [*sources, "program.ir", library_name], _compiled_folder,
                        "compiled programs")
    lib = build_library(sources, backend)
    if args.output:
        out = Path(args.output)
        out.mkdir(parents=True, exist_ok=True)
        for name, text in sources.items():
            write_atomically(out / name, text)
        write_atomically(out / "program.ir", program.dump() + "\n")
        target = out / library_name
        write_atomically(target, Path(lib).read_bytes())
        print(f"wrote {', '.join(sorted(sources))}, program.ir and {target.name} to {out}")
    else:
        print(f"built {lib}")
    return 0


def _compile_for_dataset(args) -> int:
    """--emit ir, plan or cpp of the program lowered for a dataset, as `train` on it would build it."""
    from .data import load_dataset
    if args.emit not in ("ir", "plan", "cpp"):
        raise UserError(f"morphgen: error: --dataset is for --emit ir, plan or cpp (what `train` on it would "
                        f"build); `train --dataset` builds and runs it, not --emit {args.emit}")
    dataset = load_dataset(args.dataset, data_dir=args.data_dir)
    model = CompiledModel(args.model, backend=args.backend, sparsity_threshold=args.sparsity_threshold,
                          edge_typed_layout=args.edge_typed_layout)
    sources = model.lower_for(dataset)
    path, sparsity, tau, _ = model.feature_path
    print(f"morphgen: {dataset.name}: {dataset.graph.num_nodes} nodes, {dataset.graph.num_edges} edges; "
          f"feature path {path}" + (f" (sparsity {sparsity:.4f} vs tau {tau:.3f})" if tau is not None else ""),
          file=sys.stderr)
    if args.emit == "ir":
        print(model.program.dump())
    elif args.emit == "plan":
        print(model.plan_table())
    else:
        for name, text in sources.items():
            print(f"// ---- {name}\n{text}")
    return 0


def _report(args) -> int:
    """--emit report: ptxas' registers, spills and shared memory per kernel (backends/cuda/report.py)."""
    # Checked before the backend is required: for another backend this is the error that helps.
    if args.backend != "cuda":
        raise UserError("morphgen: error: --emit report reads ptxas' register and shared-memory use: "
                        "it is for --backend cuda")
    from .backends import REGISTRY
    from .backends.cuda.report import report
    out = check_output_folder("-o", args.output, ["report.txt"], _compiled_folder, "compiled programs")
    if out is not None:      # before the build, which takes a while: a bad -o fails at once
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise UserError(f"morphgen: error: -o {out}: cannot create the folder: {err.strerror or err}") from err
    table = report(args.model, REGISTRY["cuda"])
    print(table)
    if out is not None:
        write_atomically(out / "report.txt", f"{REPORT_HEADER} of {args.model}\n{table}\n")
        print(f"morphgen: report written to {out / 'report.txt'}", file=sys.stderr)
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
        self.open_line = False      # a bar drawn and not ended (the run stopped before its last epoch)

    def end(self) -> None:
        if self.open_line:
            self.stream.write("\n")
            self.open_line = False

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
            self.open_line = e != total
        elif e == total or e % max(1, total // 10) == 0 or e == 1:
            self.stream.write(text + "\n")


def note_missing_validation(dataset, log) -> None:
    """A classification dataset without validation nodes (aifb) reports val_acc 0: no measurement."""
    if dataset.num_classes and dataset.val_mask is not None and not np.any(dataset.val_mask):
        log(f"morphgen: note: {dataset.name} has no validation nodes; val_acc below reads 0")


def note_unread_edge_weights(dataset, program, log) -> None:
    """Weights in the data that the program never reads: trained as an unweighted graph, say so."""
    if dataset.graph.edge_weight is not None and not edge_weight_reads(program):
        log(f"morphgen: note: the edges of {dataset.name} carry weights, which this program does not read "
            f"(e.edge_weight; gnn.layer(..., edge_weight = true) for GCN layers)")


def final_metrics(final: dict) -> str:
    """Accuracies (node classification) or filtered ranking metrics (link prediction)."""
    if "train_acc" in final:
        selected = (f" (weights of epoch {final['best_epoch']}, the best validation accuracy; "
                    f"{final['epochs_run']} epochs run)" if "best_epoch" in final else "")
        return (f"train_acc {final['train_acc']:.4f} val_acc {final['val_acc']:.4f} "
                f"test_acc {final['test_acc']:.4f}{selected}")
    return " ".join(f"{k} {v:.4f}" for k, v in final.items() if k != "loss")


def epochs_to_train(args, program_epochs: int, epochs_before: int) -> int:
    """--epochs N trains N epochs (N more after --resume).  Without it a run trains the program's
    count, and a resumed run what is left of it: the command that was interrupted, run again with
    --resume and its last checkpoint (--checkpoint-every), finishes the run it started."""
    if args.until_epoch is not None:
        epochs = args.until_epoch - epochs_before
        if epochs <= 0:
            raise UserError(f"morphgen: error: --until-epoch {args.until_epoch}: the checkpoint {args.resume} has "
                            f"already trained {epochs_before} epochs: none are left")
    elif args.epochs is not None:
        epochs = args.epochs
    else:
        epochs = program_epochs - epochs_before
        if args.resume and program_epochs > 0 and epochs <= 0:
            raise UserError(f"morphgen: error: --resume {args.resume}: the checkpoint has already trained "
                            f"{epochs_before} epochs and the program trains {program_epochs}: none are left; give "
                            f"--epochs N to train N more")
    if epochs <= 0:
        raise UserError(f"morphgen: error: --epochs must be positive, got {epochs}")
    if args.resume:      # one line, also in a quiet log: where the run starts
        total = (f" (until epoch {args.until_epoch})" if args.until_epoch is not None else
                 "" if args.epochs is not None else f" (the program trains {program_epochs})")
        print(f"morphgen: resuming from {args.resume} after epoch {epochs_before}: {epochs} more epoch(s){total}",
              file=sys.stderr)
    return epochs


def check_epoch_counts(args) -> None:
    """--epochs and --until-epoch: positive, and one of them at most."""
    for flag, value in (("--epochs", args.epochs), ("--until-epoch", args.until_epoch)):
        if value is not None and value <= 0:
            raise UserError(f"morphgen: error: {flag} must be positive, got {value}")
    if args.epochs is not None and args.until_epoch is not None:
        raise UserError("morphgen: error: give --epochs (how many to train) or --until-epoch (the count to reach), "
                        "not both")


def check_checkpoint_every(args) -> None:
    """--checkpoint-every N: a positive count, and --checkpoint names where."""
    every = args.checkpoint_every
    if every is None:
        return
    if every <= 0:
        raise UserError(f"morphgen: error: --checkpoint-every must be positive, got {every}")
    if not args.checkpoint:
        raise UserError("morphgen: error: --checkpoint-every needs --checkpoint FILE, the file each checkpoint replaces")


def last_training_loss(history: list, final: dict) -> float:
    """The last epoch's training loss (--json's final_loss), or the evaluation's where a resumed run
    that early stopping had already ended trained no epoch."""
    return history[-1]["loss"] if history else final["loss"]


def median_epoch_s(times: list) -> float:
    """The median epoch time of a run, leaving out the first epoch when there are others, as the
    kernel timers do: it holds the one-off first touches of the library's buffers and the data (a
    10-node graph: 0.14-0.15 ms, then 0.015-0.02 ms an epoch), which made the median of a
    two-epoch run mostly the first's.  0 for no epoch."""
    if not times:
        return 0.0
    return float(np.median(times[1:] if len(times) > 1 else times))


def final_line(final: dict, history: list, times: list, where: str = "") -> str:
    """The run's last line: final metrics, last training loss and median epoch time
    (`median_epoch_s`).  A run resumed from one that early stopping had ended trains no epoch: its
    loss is the evaluation's."""
    if not history:
        return (f"final: {final_metrics(final)} loss {final['loss']:.4f} (no epoch trained: early stopping "
                f"had already ended the run this checkpoint comes from)")
    # with early stopping the accuracies are the kept epoch's: so is the loss, evaluated on its weights
    loss = final["loss"] if "best_epoch" in final else history[-1]["loss"]
    median_ms = median_epoch_s(times) * 1e3
    return f"final: {final_metrics(final)} loss {loss:.4f} median epoch {median_ms:.2f} ms{where}"


def train_command(args) -> int:
    backend = require_backend(args.backend)
    # Counts are checked before anything is compiled or loaded (the program's own epoch count,
    # when --epochs is not given, is checked once it is known).
    check_epoch_counts(args)
    if args.threads is not None and args.threads <= 0:
        raise UserError(f"morphgen: error: --threads must be positive, got {args.threads}")
    check_checkpoint_every(args)
    _choose_device(args, backend)
    if args.profile_ops and backend.capabilities.distributed:
        raise UserError(f"morphgen: error: --profile-ops times the ops of one process (--backend openmp or cuda); "
                        f"--profile gives the kernel timers of a {args.backend} run")
    if backend.capabilities.distributed:
        return _train_distributed(args)
    if args.ranks is not None or args.parts_dir is not None or args.partitioner is not None:
        raise UserError(f"morphgen: error: --ranks, --parts-dir and --partitioner need a distributed backend (--backend mpi), "
                        f"not {args.backend}")
    if args.sanitize:
        _rerun_with_sanitizer_runtime()
    _check_outputs_writable(args)
    resolve_seed(args)
    # From here on SIGTERM and SIGUSR1 stop the run at its next epoch's end, saved (stop_signals.py).
    with stop_on_signals(enabled=bool(args.checkpoint)) as stop:
        return _train_in_process(args, backend, stop)


def _choose_device(args, backend) -> None:
    """--backend cuda needs a GPU (said now, not after a build of a minute); --device picks one."""
    if backend.capabilities.device_memory:
        from morphgen.backends.cuda.calibrate import no_gpu_here
        from morphgen.backends.cuda.toolchain import EMULATION_ENV, emulated
        if not emulated() and no_gpu_here():
            raise UserError(f"morphgen: error: no usable CUDA GPU here (no /dev/nvidia* device, and nvidia-smi "
                            f"lists none); {EMULATION_ENV}=1 runs the CUDA kernels on the CPU instead, slowly")
    if args.device is not None:
        if not backend.capabilities.device_memory:
            raise UserError(f"morphgen: error: --device picks a GPU for --backend cuda, not for {args.backend}")
        if args.device < 0:
            raise UserError(f"morphgen: error: --device must be 0 or more, not {args.device}")
        from morphgen.backends.cuda.toolchain import DEVICE_ENV
        os.environ[DEVICE_ENV] = str(args.device)     # read by the library when it prepares


def predict_command(args) -> int:
    """`morphgen predict`: a checkpoint's weights applied to a dataset, in one process."""
    from .data import load_dataset
    from .data.resolve import dataset_file
    from .outputs import check_distinct, check_output_file, checkpoint_seed, is_checkpoint, is_report
    from .predictions import is_predictions
    backend = require_backend(args.backend)     # one of the backends that run in one process
    if args.threads is not None and args.threads <= 0:
        raise UserError(f"morphgen: error: --threads must be positive, got {args.threads}")
    _choose_device(args, backend)
    checkpoint = Path(args.checkpoint)
    if not checkpoint.is_file() or not is_checkpoint(checkpoint):
        why = ("does not exist" if not checkpoint.exists() else "is not a file" if not checkpoint.is_file()
               else "is not a morphgen checkpoint")
        raise UserError(f"morphgen: error: --checkpoint {args.checkpoint}: {why}; give a file written by "
                        f"`morphgen train --checkpoint`")
    inputs = [("the program", args.model), ("the dataset", dataset_file(args.dataset, args.data_dir)),
              ("the checkpoint", args.checkpoint)]
    check_output_file("-o", args.output, is_predictions, "predictions file", inputs)
    check_output_file("--json", args.json_out, is_report, "report", inputs)
    check_distinct([("-o", args.output), ("--json", args.json_out)])
    dataset = load_dataset(args.dataset, data_dir=args.data_dir)
    # the run's seed (0 for a checkpoint from before checkpoints recorded it): load_checkpoint
    # warns about any other, which would not matter here (evaluation draws no dropout mask)
    model = CompiledModel(args.model, backend=args.backend, threads=args.threads,
                          seed=checkpoint_seed(checkpoint) or 0)
    print(f"morphgen: compiling {args.model} for {args.backend} ...", file=sys.stderr)
    model.bind(dataset)
    model.load_checkpoint(checkpoint)
    final = model.evaluate()
    print(f"morphgen: {dataset.name}, weights of {checkpoint} ({model.session.epoch()} epochs trained): "
          f"loss {final['loss']:.6f} {final_metrics(final)}")
    write_predictions(args.output, model)
    if args.json_out:
        report = {"model": str(args.model), "backend": args.backend, "dataset": dataset.name,
                  "checkpoint": str(checkpoint), "epochs_trained": model.session.epoch(), **final,
                  "predictions": str(args.output)}
        write_atomically(Path(args.json_out), json.dumps(marked(report), indent=2) + "\n")
    return 0


def _train_in_process(args, backend, stop) -> int:
    from .data import load_dataset
    dataset = load_dataset(args.dataset, data_dir=args.data_dir)
    if args.sparsity_threshold is None and dataset.features is not None:
        backend.feature_calibration(args.threads)   # measured once per machine (then cached): not training's memory
    from .bench.memory import start_training_peak
    model = CompiledModel(args.model, backend=args.backend, threads=args.threads, seed=args.seed,
                          sparsity_threshold=args.sparsity_threshold, hoist_invariants=not args.no_hoist,
                          sanitize=args.sanitize, edge_typed_layout=args.edge_typed_layout,
                          op_timers=args.profile_ops)
    args.profile = args.profile or args.profile_ops
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
    task = (f"{dataset.num_classes} classes" if dataset.num_classes else
            f"{len(dataset.train_triples)} training triples")
    print(f"morphgen: {dataset.name}: {dataset.graph.num_nodes} nodes, {dataset.graph.num_edges} edges, "
          f"{dataset.num_features} features, {task}; {model.threads} threads; "
          f"compiled in {model.compile_seconds:.2f} s, data bound in {model.session.prepare_seconds:.2f} s",
          file=sys.stderr)
    note_missing_validation(dataset, lambda text: print(text, file=sys.stderr))
    note_unread_edge_weights(dataset, model.program, lambda text: print(text, file=sys.stderr))
    hoisted = hoisted_aggregations(model.program)
    if hoisted:
        print(f"morphgen: {hoisted} aggregation(s) of the input features computed once "
              f"instead of every epoch", file=sys.stderr)
    doubled = nodes_counting_themselves_twice(model.program, dataset.graph)
    if doubled:
        print(f"morphgen: note: {doubled} node(s) of {dataset.name} have an edge to themselves, and GCN's self "
              f"term (A + I) counts them twice; gnn.addSelfLoops() adds only the missing loops, as PyG's GCNConv "
              f"does (docs/language.md)", file=sys.stderr)
    typed_layouts = edge_typed_layouts(model.program)
    if typed_layouts:
        print(f"morphgen: typed linears of rows read at edge ends: {', '.join(typed_layouts)}", file=sys.stderr)
    epochs_before = 0
    if args.resume:
        with warnings.catch_warnings():     # a changed seed was said by resolve_seed, in the CLI's words
            warnings.simplefilter("ignore", UserWarning)
            model.load_checkpoint(args.resume)
        epochs_before = model.session.epoch()
    epochs = epochs_to_train(args, model.program.epochs, epochs_before)
    eval_every = max(1, epochs // 50)
    if args.profile:
        model.session.reset_timers()
    elif backend.capabilities.device_memory:
        model.session.time_kernels(False)      # two CUDA events per kernel call that nobody reads
    if model.link_task and not args.quiet:
        held_out = len(dataset.valid_triples) + len(dataset.test_triples)
        print(f"morphgen: after the last epoch, {held_out} held-out triples are ranked against all "
              f"{dataset.num_nodes} nodes as head and as tail (filtered MRR, Hits@1/3/10)", file=sys.stderr)
    progress = bar = Progress(quiet=args.quiet)
    if args.profile and epochs > 1:
        progress = _timers_from_second_epoch(model.session, bar)
    result = model.fit(epochs=epochs, progress=progress, eval_every=eval_every, checkpoint=args.checkpoint,
                       checkpoint_every=args.checkpoint_every, stop=stop)
    bar.end()
    final = result.final
    times = [r["epoch_time_s"] for r in result.history]
    print(final_line(final, result.history, times))
    if model.session.epoch_graph() and not args.quiet:
        print(f"morphgen: cuda: epochs 2-{len(result.history)} each replayed as one CUDA graph "
              f"(MORPHGEN_CUDA_GRAPHS=0: kernel by kernel)", file=sys.stderr)
    first_timed = 2 if epochs > 1 else 1
    if args.profile:
        left_out = " (the first, with its one-off library and module loading, left out)" if first_timed == 2 else ""
        print(f"kernel timers: epochs {first_timed}-{len(result.history)}{left_out}")
        print_profile(model.session.timers())
    if result.stopped:
        print(stop.message(len(result.history), epochs, args.checkpoint), file=sys.stderr)
    elif args.checkpoint:
        print(f"morphgen: checkpoint written to {args.checkpoint}", file=sys.stderr)
    if args.predictions and result.stopped:
        print(PREDICTIONS_AFTER_STOP, file=sys.stderr)
    elif args.predictions:
        write_predictions(args.predictions, model)
    if args.json_out:
        from .bench.memory import peak_rss_bytes
        peak = peak_rss_bytes()
        report = {
            "model": str(args.model), "backend": args.backend, "dataset": dataset.name,
            "epochs": epochs, "threads": model.threads, "seed": args.seed,
            **{k: v for k, v in final.items() if k != "loss"},
            "final_loss": last_training_loss(result.history, final), "epoch_times_s": times,
            "compile_seconds": model.compile_seconds, "prepare_seconds": model.session.prepare_seconds,
            "hoisted_aggregations": hoisted_aggregations(model.program), "feature_path": path,
            "edge_typed_layouts": typed_layouts, "cuda_graph": model.session.epoch_graph(),
            "feature_sparsity": sparsity, "sparsity_threshold": tau,
            "peak_rss_bytes": peak, "baseline_rss_bytes": baseline_rss,
            "allocated_bytes": model.session.allocated_bytes(),
            "history": result.history,
        }
        if args.predictions and not result.stopped:
            report["predictions"] = str(args.predictions)
        if args.resume:      # history counts this run's epochs; the checkpoint had trained the ones before
            report.update(resumed_from=str(args.resume), epochs_before=epochs_before)
        if result.stopped:   # "epochs" is what the run was to train; history what it did
            report["stopped_by"] = stop.signal_name
        if args.profile:
            report["profile"] = model.session.timers()
            report["profile_epochs"] = [first_timed, len(result.history)]
        write_atomically(Path(args.json_out), json.dumps(marked(report), indent=2) + "\n")
    return STOPPED_EXIT_STATUS if result.stopped else 0


PREDICTIONS_AFTER_STOP = ("morphgen: --predictions: not written, the run stopped before its last epoch; "
                          "the run resumed to its end writes them")


def write_predictions(path, model) -> None:
    from . import predictions
    arrays = predictions.of_model(model)
    predictions.write(path, arrays)
    print(f"morphgen: predictions written to {path} ({predictions.summary(arrays)})", file=sys.stderr)


def nodes_counting_themselves_twice(program, graph) -> int:
    """Nodes with a stored self loop that a GCN aggregation's own self term adds again."""
    gcn_self_term = any(op.opcode in ("aggregate", "gcn_norm") and op.attrs.get("self_loops")
                        and op.attrs.get("norm", "gcn") == "gcn" for op in program.forward)
    if not gcn_self_term or program.self_loops:
        return 0
    return int(np.unique(graph.src[graph.src == graph.dst]).size)


def edge_typed_layouts(program) -> list:
    """Each typed linear of rows read at edge ends, as 'src 3864->16 compact' (passes/edge_typed_linear.py)."""
    return [f"{op.attrs['end']} {op.inputs[0].width}->{op.output.width} {op.attrs['layout']}"
            for op in program.forward if op.opcode == "edge_typed_linear"]


def _train_distributed(args) -> int:
    from .backends.mpi.launch import train_distributed
    if args.sanitize:
        raise UserError(f"morphgen: error: --sanitize is not supported with --backend {args.backend} yet")
    _check_outputs_writable(args)
    resolve_seed(args)
    if args.parts_dir is not None and Path(args.parts_dir).exists() and not Path(args.parts_dir).is_dir():
        raise UserError(f"morphgen: error: --parts-dir {args.parts_dir}: exists and is not a folder")
    require_backend(args.backend).check_program(lower(args.model))   # before starting any rank
    if args.ranks is None:
        args.ranks = int(os.environ.get("SLURM_NTASKS", "1"))
    if args.partitioner is None:
        args.partitioner = "auto"
    return train_distributed(args)


def _check_outputs_writable(args) -> None:
    """--json, --checkpoint, --predictions and --resume are checked before anything is compiled or trained: a
    missing checkpoint, or an output that would destroy something (the program, the data, a file
    morphgen did not write, the other output), is refused at once (morphgen/outputs.py)."""
    from .data.resolve import dataset_file
    from .outputs import check_distinct, check_output_file, is_checkpoint, is_report
    from .predictions import is_predictions
    if args.resume is not None and not Path(args.resume).is_file():
        what = "does not exist" if not Path(args.resume).exists() else "is not a file"
        raise UserError(f"morphgen: error: --resume {args.resume or repr('')}: {what}; give a checkpoint "
                        f"written by --checkpoint")
    inputs = [("the program being trained", args.model),
              ("the dataset", dataset_file(args.dataset, args.data_dir))]
    check_output_file("--json", args.json_out, is_report, "report",
                      inputs + [("the checkpoint resumed from", args.resume)])
    check_output_file("--checkpoint", args.checkpoint, is_checkpoint, "checkpoint", inputs,
                      reusable_inputs=[args.resume])
    check_output_file("--predictions", args.predictions, is_predictions, "predictions file",
                      inputs + [("the checkpoint resumed from", args.resume)])
    check_distinct([("--json", args.json_out), ("--checkpoint", args.checkpoint),
                    ("--predictions", args.predictions)])


def resolve_seed(args) -> None:
    """A resumed run keeps the seed of the run it continues (its dropout masks and negative
    samples are keyed by seed and epoch, so only then does it equal the uninterrupted run); a
    --seed that differs from the checkpoint's is obeyed, and said."""
    from .outputs import checkpoint_seed
    recorded = checkpoint_seed(args.resume) if args.resume else None
    if args.seed is None:
        args.seed = 0 if recorded is None else recorded
    elif recorded is not None and recorded != args.seed:
        print(f"morphgen: warning: --seed {args.seed}, but {args.resume} was trained with seed {recorded}: the "
              f"resumed epochs draw other dropout masks (and negative samples) than the run would have drawn "
              f"uninterrupted; leave --seed out to keep the checkpoint's", file=sys.stderr)


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


def _timers_from_second_epoch(session, progress):
    """The progress callback, resetting the kernel timers once the first epoch is done: its cuBLAS
    set-up, lazy module loading (CUDA) and first touch of every buffer would dominate the totals."""
    def callback(row, epochs):
        if row["epoch"] == 1:
            session.reset_timers()
        progress(row, epochs)
    return callback


def print_profile(rows):
    rows = [r for r in rows if r["calls"]]
    width = max([28] + [len(r["kernel"]) + 2 for r in rows])    # per-op timers have longer names
    print(f"{'kernel':<{width}}{'calls':>8}{'seconds':>10}{'GB/s':>9}{'GFLOP/s':>9}")
    for r in sorted(rows, key=lambda r: -r["seconds"]):
        s = max(r["seconds"], 1e-12)
        print(f"{r['kernel']:<{width}}{r['calls']:>8}{r['seconds']:>10.4f}{r['bytes'] / s / 1e9:>9.2f}"
              f"{r['flops'] / s / 1e9:>9.2f}")

"""The `morphgen` command line.

Exit status: 0 success, 1 a run that finished but failed (e.g. NaN loss), 2 bad input (program,
data or arguments), 3 an internal error (a bug in morphgen: generated code failed to build), 4 a
`train --checkpoint` stopped by SIGTERM or SIGUSR1 after saving its checkpoint (stop_signals.py).
No Python traceback reaches the user unless MORPHGEN_DEBUG=1.
"""
from __future__ import annotations

import argparse
import os
import sys

from . import __version__, arg_types
from .errors import UserError, InternalError


def _add_edge_typed_layout(p, auto: str) -> None:
    # the choices of morphgen.api.EDGE_TYPED_LAYOUTS, written out: the parser does not import the API
    p.add_argument("--edge-typed-layout", default="auto", choices=("auto", "compact", "edge", "gathered"),
                   help="how a typed linear of node rows read at edges (x_src * W[etype]) is computed: "
                        "compact (one product per distinct (node, edge type) pair, copied to its edges), "
                        "edge (one product per edge), gathered (per-edge copies of the rows first), or " + auto)


def _add_common_model_args(p: argparse.ArgumentParser) -> None:
    from . import backends
    p.add_argument("model", help="the .mp program")
    p.add_argument("--backend", default="openmp", choices=backends.names(),
                   help=f"code generator (default openmp): {backends.help_text()}")


def _add_data_args(p: argparse.ArgumentParser, default="synthetic") -> None:
    p.add_argument("--dataset", default=default,
                   help="dataset name (resolved in --data-dir or $MORPHGEN_DATA), an .npz/edge-list "
                        "path, a raw Planetoid directory, or synthetic[:key=value,...] (default: %(default)s)")
    p.add_argument("--data-dir", default=None, help="where dataset names are looked up")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="morphgen", description="Compile and train GNN programs written in the morphgen language.")
    parser.add_argument("--version", action="version", version=f"morphgen {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("check", help="diagnose a program without generating code")
    p.add_argument("model", help="the .mp program")
    p.set_defaults(handler=_cmd_check)

    p = sub.add_parser("compile", help="lower a program and generate, build and cache its library")
    _add_common_model_args(p)
    p.add_argument("--emit", choices=("ir", "plan", "cpp", "lib", "report"), default="lib",
                   help="ir: print forward and backward IR; plan: per IR op, the kernel, fusion and buffer "
                        "the backend chose; cpp: print generated source; lib: build (default); "
                        "report (--backend cuda): build with nvcc and print ptxas' registers, spills, "
                        "shared memory and an occupancy estimate per kernel")
    p.add_argument("-o", "--output", default=None, help="directory for the sources, IR and library")
    p.add_argument("--dataset", default=None,
                   help="with --emit ir, plan or cpp: lower for this dataset first (its sizes, graph and feature "
                        "path), as `train` on it would; the rewrites that depend on widths (aggregating on "
                        "the narrower side of a product, hoisting) show only then.  A name (resolved in "
                        "--data-dir or $MORPHGEN_DATA), an .npz/edge-list path or synthetic[:key=value,...]")
    p.add_argument("--data-dir", default=None, help="where dataset names are looked up")
    p.add_argument("--sparsity-threshold", type=arg_types.fraction, default=None,
                   help="with --dataset: the feature path's threshold, as for `train` (default: calibrated)")
    _add_edge_typed_layout(p, "auto (the default: picked per op from --dataset's graph; compact without one)")
    p.set_defaults(handler=_cmd_compile)

    p = sub.add_parser("train", help="compile a program and train it")
    _add_common_model_args(p)
    _add_data_args(p)
    p.add_argument("--epochs", type=int, default=None, help="override the program's epoch count")
    p.add_argument("--seed", type=arg_types.seed, default=None,
                   help="seed for initialisation, dropout and negative sampling (default 0; with --resume, the "
                        "checkpoint's)")
    p.add_argument("--threads", type=int, default=None,
                   help="OpenMP threads (per rank with --backend mpi; default: the cores this process may "
                        "run on, shared by the ranks)")
    p.add_argument("--device", type=int, default=None,
                   help="--backend cuda: the GPU to train on (default 0, or $MORPHGEN_CUDA_DEVICE)")
    p.add_argument("--ranks", type=int, default=None,
                   help="MPI ranks for --backend mpi (default: $SLURM_NTASKS inside a SLURM job, else 1)")
    p.add_argument("--parts-dir", default=None,
                   help="--backend mpi: where the per-rank part files are written once and reused "
                        "(default: in the build cache, keyed by the data and the rank count)")
    p.add_argument("--partitioner", default=None, choices=("auto", "morphgen", "metis", "random"),
                   help="--backend mpi: who assigns nodes to ranks: the candidate with the fastest "
                        "predicted epoch (auto, the default: morphgen's partitioner at edge-load bounds "
                        "1.03-1.50 and vertex-balanced METIS), morphgen's edge-load balanced "
                        "partitioner at its 1.03 bound, vertex-balanced METIS, or a random split")
    p.add_argument("--sparsity-threshold", type=arg_types.fraction, default=None,
                   help="feature sparsity above which the sparse feature path is used "
                        "(default: tau = 1 - rho from this machine's calibration)")
    p.add_argument("--no-hoist", action="store_true",
                   help="recompute every epoch what never changes between epochs instead of once: "
                        "what the program computes from the graph alone (degrees and their chains) and "
                        "aggregations of the input features (dense feature path); all are hoisted out "
                        "of the training loop by default")
    _add_edge_typed_layout(p, "auto (the default: compact or edge, whichever the cost model predicts faster "
                              "for the graph)")
    p.add_argument("--json", dest="json_out", default=None, help="write the run's metrics to this JSON file")
    p.add_argument("--predictions", default=None, metavar="FILE",
                   help="after training, write every node's logits and predicted class (a link predictor: the "
                        "node embeddings and relation rows) to this .npz file (docs/data.md, \"Predictions\")")
    p.add_argument("--checkpoint", default=None,
                   help="save parameters and optimizer state here at the end; SIGTERM or SIGUSR1 then stop the "
                        "run at the end of its epoch, saved there (exit status 4)")
    p.add_argument("--checkpoint-every", type=int, default=None, metavar="N",
                   help="with --checkpoint: save there after every N epochs as well (each replacing the last), "
                        "so that a run killed on the way resumes from its last one")
    p.add_argument("--resume", default=None,
                   help="start from this checkpoint; without --epochs, train the rest of the program's epochs")
    p.add_argument("--until-epoch", type=int, default=None, metavar="N",
                   help="instead of --epochs: train until N epochs in all, counting those of the checkpoint "
                        "resumed from (what a requeued job needs)")
    p.add_argument("--profile", action="store_true", help="report per-kernel time, GB/s and GFLOP/s")
    p.add_argument("--profile-ops", action="store_true",
                   help="--profile with a timer per IR op (named 'family: %%id opcode', as `compile --emit "
                        "plan` lists the ops) instead of one per kernel family")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--sanitize", action="store_true",
                   help="build with AddressSanitizer and UndefinedBehaviorSanitizer (slow; for bug reports)")
    p.set_defaults(handler=_cmd_train)

    p = sub.add_parser("predict", help="write a trained model's predictions for every node of a dataset",
                       description="Load a checkpoint written by `train --checkpoint` (any backend), print its "
                                   "accuracies (or a link predictor's ranking metrics) on the dataset and write "
                                   "every node's logits and predicted class (a link predictor: the node "
                                   "embeddings and relation rows) to an .npz file (docs/data.md, \"Predictions\").")
    from . import backends
    p.add_argument("model", help="the .mp program")
    p.add_argument("--backend", default="openmp", choices=backends.one_process_names(),
                   help=f"code generator (default openmp; a checkpoint of any backend loads in either): "
                        f"{backends.help_text(backends.one_process_names())}")
    _add_data_args(p)
    p.add_argument("--checkpoint", required=True, help="the trained weights: a file written by `train --checkpoint`")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="the .npz file to write")
    p.add_argument("--threads", type=int, default=None,
                   help="OpenMP threads (default: the cores this process may run on)")
    p.add_argument("--device", type=int, default=None,
                   help="--backend cuda: the GPU to run on (default 0, or $MORPHGEN_CUDA_DEVICE)")
    p.add_argument("--json", dest="json_out", default=None, help="write the metrics to this JSON file")
    p.set_defaults(handler=_cmd_predict)

    p = sub.add_parser("slurm", help="write a SLURM batch script that trains a program (MPI ranks or OpenMP)",
                       description="Write a SLURM job script that runs `morphgen train` on an allocation; "
                                   "submit it with sbatch (see slurm/README.md).")
    from . import slurm
    slurm.add_arguments(p)
    p.set_defaults(handler=_cmd_slurm)

    p = sub.add_parser("calibrate", help="measure this machine's dense/sparse feature-path threshold again",
                       description="Measure rho (tau = 1 - rho: the feature sparsity above which the sparse "
                                   "path is faster) and the kernels' rates for a thread count, replacing the "
                                   "cached figures (`train` measures them once per machine and thread count; "
                                   "run this on a quiet machine if other work disturbed that measurement).")
    p.add_argument("--threads", type=int, default=None,
                   help="OpenMP threads (default: the cores this process may run on)")
    p.set_defaults(handler=_cmd_calibrate)

    p = sub.add_parser("doctor", help="say what this machine can build and run (backends, CPU, compilers, GPU)",
                       description="Check every backend's toolchain, the CPU's vector units, the compilers, "
                                   "the GPU, cuBLAS and mpiexec; always exits 0.")
    p.set_defaults(handler=_cmd_doctor)

    # subcommands whose implementation lives in their own package register themselves
    import importlib
    for module in ("morphgen.build_cache", "morphgen.partition.cli", "morphgen.bench.cli",
                   "morphgen.bench.sparsity_cli", "morphgen.bench.suite_cli", "morphgen.bench.layouts_cli"):
        importlib.import_module(module).add_parser(sub)
    return parser


def _cmd_calibrate(args) -> int:
    from .calibrate import CalibrationError, calibrate
    if args.threads is not None and args.threads < 1:
        raise UserError(f"morphgen: error: --threads must be positive, got {args.threads}")
    try:
        cal = calibrate(args.threads, force=True)
    except CalibrationError as err:
        raise UserError(f"morphgen: error: calibration failed: {err}") from None
    print(f"{cal.threads} thread(s): rho {cal.rho:.3f}, tau {cal.tau:.3f} (features sparser than that take the "
          f"sparse path); dense {cal.dense_gflops:.1f} GFLOP/s, sparse {cal.sparse_gflops:.1f} GFLOP/s, "
          f"triad {cal.triad_gbs:.1f} GB/s, aggregation {cal.spmm_gbs:.1f} GB/s (cached for later runs)")
    return 0


def _cmd_check(args) -> int:
    from .frontend import check_file
    from .grammar.diagnostics import render_all
    diagnostics = check_file(args.model)
    if diagnostics:
        print(render_all(diagnostics), file=sys.stderr)
    errors = [d for d in diagnostics if d.severity == "error"]
    if errors:
        print(f"{len(errors)} error{'s' if len(errors) != 1 else ''}", file=sys.stderr)
        return 2
    print(f"{args.model}: ok")
    return 0


def _cmd_compile(args) -> int:
    from . import commands
    _print_program_warnings(args.model)
    return commands.compile_command(args)


def _cmd_train(args) -> int:
    from . import commands
    _print_program_warnings(args.model)
    return commands.train_command(args)


def _cmd_predict(args) -> int:
    from . import commands
    _print_program_warnings(args.model)
    return commands.predict_command(args)


def _print_program_warnings(path) -> None:
    """The program's warnings (`morphgen check` lists them too), said once before the command's
    work; a program with errors gets them from the command itself."""
    from .frontend import check_file
    from .grammar.diagnostics import render_all
    diagnostics = check_file(path)
    if diagnostics and not any(d.severity == "error" for d in diagnostics):
        print(render_all(diagnostics), file=sys.stderr)


def _cmd_doctor(args) -> int:
    from . import doctor
    return doctor.run(args)


def _cmd_slurm(args) -> int:
    from . import slurm
    return slurm.run(args)


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    debug = os.environ.get("MORPHGEN_DEBUG") == "1"
    try:
        return args.handler(args)
    except UserError as err:
        if debug:
            raise
        # data errors name their field ("synthetic: nodes: ..."), not the tool; program
        # diagnostics their place (FILE:LINE:COL: error: ...)
        text = str(err)
        print(text if err.located or text.startswith("morphgen") else f"morphgen: error: {text}", file=sys.stderr)
        return err.exit_status
    except InternalError as err:
        if debug:
            raise
        print(f"morphgen: internal error: {err}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("morphgen: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as err:  # a bug in morphgen: say so plainly, keep the traceback for MORPHGEN_DEBUG=1
        if debug:
            raise
        print(f"morphgen: internal error: {type(err).__name__}: {err} "
              f"(run with MORPHGEN_DEBUG=1 for details)", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())

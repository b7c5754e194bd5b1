"""`morphgen bench MODEL.mp --dataset D [--peers pyg,dgl] [--threads T] [--epochs N] [--out DIR]`.

One run: measure the machine's limits (STREAM copy/triad, sgemm), write the dataset once as a
canonical .npz, train morphgen and each peer on it in separate processes under one memory cap,
optionally check loss parity over the first epochs, and write bench.json, bench.md and PNG plots to DIR.
`--sweep edges` hands over to morphgen.bench.sweep. The method is in docs/benchmarking.md.
`--backend cuda [--device N]` runs morphgen's CUDA backend and the peers on the same GPU.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Optional

from morphgen import arg_types

from . import harness, report as rep
from .runs import (DEFAULT_TIMEOUT_S, DEFAULT_WARMUP, backend_of, bench_one, measure_limits, parse_peers,
                   resolve_cap, resolve_device, resolve_threads)

DEFAULT_EPOCHS = 50


def add_run_options(p) -> None:
    """Options shared by `bench`, `sweep-sparsity` and `bench-suite`."""
    p.add_argument("--threads", type=int, default=None, help="threads for every system (default: all usable cores)")
    p.add_argument("--seed", type=arg_types.seed, default=0, help="seed of morphgen's initial weights and dropout")
    p.add_argument("--memory-cap-gib", type=float, default=None,
                   help="address-space cap of every child process (default: 3/4 of physical memory; "
                        "none with --backend cuda, whose driver reserves more address space than it uses)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help=f"seconds before a child run (one system on one graph) is abandoned and reported as "
                        f"timed out (default {DEFAULT_TIMEOUT_S:g}: a peer that takes longer than that for "
                        f"its epochs does not hold up the rest of a suite)")
    p.add_argument("--quick-machine", action="store_true",
                   help="measure machine limits on small arrays (fast, less accurate; for smoke tests)")


BACKENDS = ("openmp", "cuda")


def add_device_options(p) -> None:
    """Options shared by `bench` and `bench-suite` (the commands that run the peers too)."""
    p.add_argument("--backend", choices=BACKENDS, default="openmp",
                   help="morphgen's backend (default openmp, peers on CPU threads); cuda: morphgen trains "
                        "with --backend cuda and the peers on the same GPU (torch device cuda:N)")
    p.add_argument("--device", type=int, default=None,
                   help="--backend cuda: the GPU morphgen and the peers train on (default 0, or "
                        "$MORPHGEN_CUDA_DEVICE)")
    p.add_argument("--rounds", type=int, default=1,
                   help="runs of every system, interleaved (morphgen, the peers, morphgen, ...); the report "
                        "keeps each system's fastest median and lists every round's (default 1)")
    p.add_argument("--peer-input-dropout", choices=("program", "none"), default="program",
                   help="program (default): the peers drop out the input features as the program does; "
                        "none: they skip it (morphgen still applies it), which times the layers alone")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("bench", help="time morphgen against PyG/DGL on one graph (or a sweep)",
                              description=__doc__.split("\n")[0])
    p.add_argument("model", help="the .mp program")
    p.add_argument("--dataset", default="synthetic", help="dataset name, .npz path or synthetic:... spec")
    p.add_argument("--data-dir", default=None, help="where dataset names are looked up")
    p.add_argument("--peers", default="pyg,dgl", help="comma-separated peers, or none (default: pyg,dgl)")
    p.add_argument("--epochs", type=int, default=DEFAULT_EPOCHS, help="epochs per system (default 50)")
    p.add_argument("--warmup", type=int, default=None,
                   help=f"epochs left out of the median (default {DEFAULT_WARMUP}, fewer when --epochs leaves "
                        f"fewer than {DEFAULT_WARMUP + 1})")
    p.add_argument("--out", default="bench-out", help="output directory (default bench-out)")
    p.add_argument("--parity", action="store_true",
                   help="also check loss parity: the first epochs' losses from identical initial weights, "
                        "dropout 0")
    p.add_argument("--peer-features", choices=("auto", "dense", "sparse"), default="auto",
                   help="input features given to the peers; auto: sparse when morphgen takes its sparse path")
    p.add_argument("--no-profile", action="store_true", help="do not collect morphgen's per-kernel timers")
    p.add_argument("--sparsity-threshold", type=arg_types.fraction, default=None,
                   help="passed to morphgen train (default: its calibrated tau = 1 - rho)")
    p.add_argument("--sweep", choices=("edges",), default=None,
                   help="edges: synthetic graphs from 2^18 to 2^24 edges (see --sweep-min/--sweep-max)")
    p.add_argument("--sweep-min", type=int, default=18, help="log2 of the smallest edge count (default 18)")
    p.add_argument("--sweep-max", type=int, default=24, help="log2 of the largest edge count (default 24)")
    add_device_options(p)
    add_run_options(p)
    p.set_defaults(handler=run)


def default_data_dir(given: Optional[str]) -> Optional[str]:
    """--data-dir, else $MORPHGEN_DATA, else ../shared/datasets where it exists (the repository's
    neighbour): the real graphs of the suites."""
    if given:
        return given
    if os.environ.get("MORPHGEN_DATA"):
        return os.environ["MORPHGEN_DATA"]
    return "../shared/datasets" if Path("../shared/datasets").is_dir() else None


# What the bench commands write at the top of --out (with plots and per-graph folders).
BENCH_OUTPUTS = ("bench.json", "bench.md", "suite.json", "suite.md", "sparsity.json", "sparsity.md",
                 "edge_layouts.json", "edge_layouts.md")


def _is_bench_report(path: Path) -> bool:
    """A JSON summary one of the bench commands wrote: recognised by its fields."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    if isinstance(document, list):                                       # edge_layouts.json
        return bool(document) and all(isinstance(row, dict) and {"model", "graph", "pairs"} <= row.keys()
                                      for row in document)
    return isinstance(document, dict) and any(keys <= document.keys() for keys in (
        {"model", "command", "dataset", "systems"},                      # bench.json
        {"graphs", "geometric_mean_ratios"},                             # suite.json
        {"model", "crossovers", "runs"}))                                # sparsity.json


def is_bench_folder(path: Path) -> bool:
    """Whether `path` holds an earlier bench command's output, whose files --out may replace."""
    return any(_is_bench_report(path / name) for name in BENCH_OUTPUTS if name.endswith(".json"))


def check_common(args) -> None:
    """The options every bench command shares (--data-dir resolved to its default here)."""
    out = getattr(args, "out", None)
    if out:
        from morphgen.outputs import check_output_folder
        check_output_folder("--out", out, BENCH_OUTPUTS, is_bench_folder, "benchmark reports")
    if hasattr(args, "data_dir"):
        args.data_dir = default_data_dir(args.data_dir)
    if args.threads is not None and args.threads < 1:
        raise harness.BenchError(f"--threads: must be >= 1, got {args.threads}")
    if args.memory_cap_gib is not None and not args.memory_cap_gib >= 1:
        # below that, the libraries' own reservations fail at start-up (OpenBLAS then retries forever)
        raise harness.BenchError(f"--memory-cap-gib: must be at least 1, got {args.memory_cap_gib}")
    if args.timeout is not None and args.timeout <= 0:
        raise harness.BenchError(f"--timeout: must be positive, got {args.timeout}")


def check_device(args) -> None:
    if args.device is not None and args.backend != "cuda":
        raise harness.BenchError(f"--device: picks a GPU for --backend cuda, not for {args.backend}")
    if args.device is not None and args.device < 0:
        raise harness.BenchError(f"--device: must be 0 or more, got {args.device}")
    resolve_device(args)                  # a bad $MORPHGEN_CUDA_DEVICE is named before anything runs
    if args.rounds < 1:
        raise harness.BenchError(f"--rounds: must be >= 1, got {args.rounds}")


def check_args(args) -> None:
    check_common(args)
    check_device(args)
    if args.epochs < 1:
        raise harness.BenchError(f"--epochs: must be >= 1, got {args.epochs}")
    if args.warmup is None:            # not given: the default, but never all the epochs
        args.warmup = min(DEFAULT_WARMUP, args.epochs - 1)
    if not 0 <= args.warmup < args.epochs:
        raise harness.BenchError(f"--warmup: must lie in [0, epochs) = [0, {args.epochs}), got {args.warmup}")
    if not Path(args.model).is_file():
        raise harness.BenchError(f"model: {args.model}: no such file")


def run_single(args) -> dict:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    shape = harness.program_shape(args.model)
    threads = resolve_threads(args)
    machine = measure_limits(threads, args.quick_machine)
    with harness.scratch_dir(out) as tmp:
        work = Path(tmp)
        # featureless data: the R-GCN peers take node ids; peers that cannot run need no features
        data = harness.prepare_dataset(args.dataset, args.data_dir, work, keep=args.parity,
                                       feature_normalization=shape.feature_normalization,
                                       featureless_ok=shape.conv in ("rgcn", "hgt", "rgat") or shape.unsupported is not None
                                       or not parse_peers(args.peers))
        report = bench_one(args, data, shape, work, machine)
        if args.parity:
            peers = parse_peers(args.peers)
            if shape.unsupported:
                report["parity"] = {"error": f"not comparable: {shape.unsupported}"}
            else:
                report["parity"] = harness.parity_check(
                    args.model, shape, data, peers, work, threads=threads, seed=args.seed,
                    sparse_features=report["peer_features"] == "sparse", cap_gib=resolve_cap(args),
                    timeout_s=args.timeout,
                    sparsity_threshold=(report["systems"][0].get("config") or {}).get("sparsity_threshold",
                                                                                      args.sparsity_threshold),
                    backend=backend_of(args), device=resolve_device(args))
    rep.write_json(report, out / "bench.json")
    (out / "bench.md").write_text(rep.markdown(report))
    report["plots"] = [p.name for p in rep.write_plots(report, out)]
    rep.write_json(report, out / "bench.json")
    return report


def print_summary(report: dict, out: Path) -> None:
    for s in report["systems"]:
        if s.get("error"):
            print(f"{s['system']:<9} failed: {s['error']}")
        else:
            ratio = s.get("time_ratio_vs_morphgen")
            extra = f"  ({ratio:.2f}x morphgen's time)" if ratio else ""
            device = (f"  peak device {rep._fmt(s['peak_device_bytes'], '8.1f', 1 / rep.MiB)} MiB"
                      if "peak_device_bytes" in s else "")
            print(f"{s['system']:<9} median epoch {s['epoch_time_s'] * 1e3:9.2f} ms  peak RSS "
                  f"{s['peak_rss_bytes'] / rep.MiB:8.1f} MiB{device}  final loss {s['final_loss']:.4f}  "
                  f"test acc {s['test_acc']:.3f}{extra}")
        for a in s.get("alternatives") or []:
            timed = (f"{a['epoch_time_s'] * 1e3:.2f} ms" if a.get("epoch_time_s") is not None
                     else f"failed: {a.get('error')}")
            print(f"{'':<9} ({s.get('configuration')}; also timed as {a['configuration']}: {timed})")
    par = report.get("parity")
    if par and "peers" in par:
        for name, row in par["peers"].items():
            verdict = row["error"] if row.get("error") else (
                f"max |diff| over {par['epochs']} epoch{'s' if par['epochs'] != 1 else ''} {row['abs_diff']:.2e}, "
                f"{'within' if row['passed'] else 'EXCEEDS'} the tolerance per epoch "
                f"({', '.join(f'{t:.1e}' for t in par['tolerances'])})")
            print(f"parity {name}: {verdict}")
    print(f"wrote {out / 'bench.json'}, {out / 'bench.md'} and plots to {out}")


def run(args) -> int:
    check_args(args)
    parse_peers(args.peers)
    if args.sweep == "edges":
        from . import sweep
        return sweep.run(args)
    report = run_single(args)
    print_summary(report, Path(args.out))
    failed_morphgen = report["systems"][0].get("error") is not None
    parity_failed = any(r.get("passed") is False for r in (report.get("parity") or {}).get("peers", {}).values())
    return 1 if failed_morphgen or parity_failed else 0


if __name__ == "__main__":
    from morphgen.cli import main
    sys.exit(main(["bench", *sys.argv[1:]]))

"""One benchmark run: morphgen and the peers on one prepared graph, and the options it reads.
Shared by `bench` (cli), its edge sweep, `sweep-sparsity` and `bench-suite`."""
from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Optional

from morphgen.errors import UserError

from . import harness, report as rep
from .gpu_limits import as_ceilings, measure_gpu_limits

DEFAULT_WARMUP = 3              # epochs left out of the median
# Long enough for every system on the largest suite graph; a peer that needs more (PyG's HGTConv
# with 500 edge types took more than 14 minutes for 10 epochs) is reported as timed out.
DEFAULT_TIMEOUT_S = 1800.0


def parse_peers(text: str) -> tuple:
    if text.strip().lower() in ("", "none"):
        return ()
    peers = tuple(p.strip().lower() for p in text.split(",") if p.strip())
    for p in peers:
        if p not in harness.KNOWN_PEERS:
            raise harness.BenchError(f"--peers: unknown peer '{p}' (known: {', '.join(harness.KNOWN_PEERS)}, or none)")
    if len(set(peers)) != len(peers):
        raise harness.BenchError(f"--peers: '{text}' names a peer twice")
    return peers


def resolve_threads(args) -> int:
    from morphgen.resources import usable_cores
    return args.threads or usable_cores()


def backend_of(args) -> str:
    """--backend of `bench` and `bench-suite`; the commands without the option run openmp."""
    return getattr(args, "backend", None) or "openmp"


def resolve_device(args) -> Optional[int]:
    """The GPU of a cuda run, None for openmp. Always a number, handed to morphgen as --device, so
    that morphgen and the peers cannot end up on different GPUs; the default follows
    `morphgen train` ($MORPHGEN_CUDA_DEVICE, else 0)."""
    if backend_of(args) != "cuda":
        return None
    if getattr(args, "device", None) is not None:
        return args.device
    env = os.environ.get(harness.CUDA_DEVICE_ENV, "").strip()
    if not env:
        return 0
    if not env.isdigit():
        raise harness.BenchError(f"${harness.CUDA_DEVICE_ENV}: expected a GPU number, got {env!r}")
    return int(env)


def resolve_cap(args) -> Optional[float]:
    """The address-space cap of every child. None by default on a GPU: the CUDA driver reserves
    virtual address space far beyond what a process touches, and under RLIMIT_AS its
    initialisation fails as if out of memory; --memory-cap-gib still sets one."""
    if args.memory_cap_gib is None and backend_of(args) == "cuda":
        return None
    return args.memory_cap_gib or harness.default_memory_cap_gib()


def measure_limits(threads: int, quick: bool) -> dict:
    """Machine ceilings, or an entry with "error" when the kernels cannot be built or run."""
    from .machine import measure_machine
    try:
        if quick:
            m = measure_machine(threads, stream_elements=1 << 22, gemm_size=512, reps=3)
        else:
            m = measure_machine(threads)
    except (UserError, RuntimeError, OSError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}", "threads": threads}
    m["quick"] = quick
    return m


def command_line(args) -> str:
    parts = ["morphgen", "bench", args.model]
    if not args.sweep:
        parts += ["--dataset", args.dataset]
    if args.data_dir and not args.sweep:
        parts += ["--data-dir", args.data_dir]
    parts += ["--peers", ",".join(parse_peers(args.peers)) or "none", "--threads", str(resolve_threads(args)),
              "--epochs", str(args.epochs), "--out", args.out]
    if backend_of(args) != "openmp":
        parts += ["--backend", backend_of(args), "--device", str(resolve_device(args))]
    if args.parity:
        parts.append("--parity")
    if args.sweep:
        parts += ["--sweep", args.sweep, "--sweep-min", str(args.sweep_min), "--sweep-max", str(args.sweep_max)]
    if args.sparsity_threshold is not None:
        parts += ["--sparsity-threshold", repr(args.sparsity_threshold)]
    if skips_input_dropout(args):
        parts += ["--peer-input-dropout", "none"]
    # the rest only where they differ from their defaults, so the line stays short
    for flag, name, default in (("--warmup", "warmup", DEFAULT_WARMUP), ("--rounds", "rounds", 1), ("--seed", "seed", 0),
                                ("--peer-features", "peer_features", "auto"), ("--memory-cap-gib", "memory_cap_gib", None),
                                ("--timeout", "timeout", DEFAULT_TIMEOUT_S)):
        if getattr(args, name, default) != default:
            parts += [flag, str(getattr(args, name))]
    parts += [flag for flag, name in (("--quick-machine", "quick_machine"), ("--no-profile", "no_profile"))
              if getattr(args, name, False)]
    return shlex.join(parts)


def peer_sparse_features(choice: str, morphgen_entry: dict, sparsity: float) -> bool:
    if choice != "auto":
        return choice == "sparse"
    path = (morphgen_entry.get("config") or {}).get("feature_path")
    if path is not None:
        return path == "sparse"
    return sparsity >= 0.9            # morphgen failed: fall back to a fixed, documented rule


def bench_one(args, data: harness.PreparedData, shape: harness.PeerModel, work: Path, machine: dict) -> dict:
    """Run every system on prepared data; returns the report dict (not yet written)."""
    from .memory import analytic_minimum_bytes
    threads, cap = resolve_threads(args), resolve_cap(args)
    backend, device = backend_of(args), resolve_device(args)
    peers = parse_peers(args.peers)
    rounds = getattr(args, "rounds", 1)
    notes = list(shape.notes)
    if skips_input_dropout(args) and shape.input_dropout > 0:
        notes.append(f"--peer-input-dropout none: the peers skip the program's dropout of the input features "
                     f"(p = {shape.input_dropout}), which morphgen applies: morphgen does that work alone")
    kept: dict = {}                       # system -> the run reported (harness.faster_run)
    times: dict = {}                      # system -> every round's median epoch (None: failed)
    # Rounds interleave the systems, so that a slow spell of a shared machine hits each of them.
    for r in range(rounds):
        tag = f"_r{r}" if rounds > 1 else ""
        for entry in run_round(args, data, shape, work, peers, tag, threads, cap, backend, device):
            kept[entry["system"]] = harness.faster_run(kept.get(entry["system"]), entry)
            times.setdefault(entry["system"], []).append(entry.get("epoch_time_s"))
    systems = list(kept.values())
    sparse = peer_sparse_features(args.peer_features, systems[0], data.feature_sparsity)
    if rounds > 1:
        notes.append("every system ran " + str(rounds) + " times, interleaved; the table keeps each one's fastest "
                     "median (a failure in any round is reported instead). Medians per round: "
                     + "; ".join(f"{name} " + ", ".join("failed" if t is None else f"{t * 1e3:.2f}" for t in ts)
                                 + " ms" for name, ts in times.items() if any(t is not None for t in ts)))
    rep.add_ratios(systems)
    widths = shape.resolved_layers(data.num_features, data.num_classes)
    morphgen_sparse = (systems[0].get("config") or {}).get("feature_path") == "sparse"
    relational = shape.conv == "rgcn" and not shape.unsupported
    # GCN-shaped models count one self loop per node; R-GCN has its self-loop weight instead.
    # APPNP and SGC are held to the GCN of their linear layers' widths: their propagation steps are
    # linear, so backward keeps nothing of them, and a lower bound needs no more.
    # The relational attention models' minimum (typed projections at both edge ends, per-edge
    # scores and messages) is not modelled.
    analytic = None
    if shape.conv not in ("hgt", "rgat"):
        analytic = analytic_minimum_bytes(data.num_nodes, data.num_edges + (0 if relational else data.num_nodes),
                                          data.num_features, widths[1:-1], data.num_classes,
                                          sparse_nnz=data.feature_nnz if morphgen_sparse else None,
                                          dropout=any(p > 0 for p in shape.dropouts),
                                          relations=data.num_relations if relational else 0,
                                          bases=shape.num_bases if relational else None,
                                          identity_input=data.featureless)
    # The machine's ceilings are the CPU's: a GPU kernel is held against the GPU's own, measured on
    # that GPU (none under the SIMT emulation, whose kernels ran on the CPU).
    gpu = gpu_limits(args, device) if backend != "openmp" else None
    ceilings = machine if backend == "openmp" else as_ceilings(gpu)
    report = {
        "model": str(args.model), "command": command_line(args), "dataset": data.describe(),
        "threads": threads, "epochs": args.epochs, "warmup": args.warmup, "seed": args.seed,
        "memory_cap_gib": cap, "peer_features": "sparse" if sparse else "dense", "rounds": rounds,
        "systems": systems, "machine": machine, "analytic_minimum_bytes": analytic,
        "kernels": rep.kernel_limits(systems[0].get("profile") or [], ceilings),
        "notes": notes,
    }
    if backend != "openmp":               # an openmp report keeps the keys it always had
        report.update(backend=backend, device=harness.device_name(backend, device), gpu_limits=gpu)
        report["notes"] = notes + gpu_notes(systems[0], cap)
    return report


def run_round(args, data: harness.PreparedData, shape: harness.PeerModel, work: Path, peers: tuple, tag: str,
              threads: int, cap, backend: str, device) -> list:
    """One run of morphgen, then of each peer: their system entries, morphgen first."""
    systems = [harness.run_morphgen(args.model, data.path, work, epochs=args.epochs, warmup=args.warmup,
                                    seed=args.seed, threads=threads, cap_gib=cap, timeout_s=args.timeout,
                                    profile=not args.no_profile,
                                    sparsity_threshold=getattr(args, "sparsity_threshold", None),
                                    tag=f"morphgen{tag}", backend=backend, device=device)]
    sparse = peer_sparse_features(args.peer_features, systems[0], data.feature_sparsity)
    for system in peers:
        why = shape.unsupported or shape.peer_unsupported.get(system)
        if why:
            entry = harness._empty_system(system)
            entry["error"] = f"not comparable: {why}"
            systems.append(entry)
            continue
        spec = harness.peer_spec(shape, data, epochs=args.epochs, warmup=args.warmup, threads=threads,
                                 sparse_features=sparse, device=harness.device_name(backend, device),
                                 input_dropout=0.0 if skips_input_dropout(args) else None)
        systems.append(harness.run_peer_fastest(system, data.peer_path, spec, work,
                                                harness.peer_variants(system, shape), cap_gib=cap,
                                                timeout_s=args.timeout, round_tag=tag))
    return systems


def skips_input_dropout(args) -> bool:
    """--peer-input-dropout none: the peers leave out the program's dropout of the input features."""
    return getattr(args, "peer_input_dropout", "program") == "none"


def gpu_limits(args, device: int) -> dict:
    """The GPU's ceilings (morphgen.bench.gpu_limits), or why there are none."""
    from morphgen.backends.cuda.toolchain import emulated
    if emulated():
        return {"error": "the SIMT emulation ran morphgen's kernels"}
    return measure_gpu_limits(device, bool(getattr(args, "quick_machine", False)))


def gpu_notes(morphgen_entry: dict, cap: Optional[float]) -> list:
    notes = ["peak device memory: morphgen's is the device buffers it allocates (its allocated_bytes), a "
             "peer's is torch.cuda.max_memory_allocated over the whole run (data included); neither counts "
             "the CUDA context. Peak RSS is host memory, as on the CPU"]
    if (morphgen_entry.get("config") or {}).get("cuda_emulation"):
        notes.append("morphgen ran its CUDA kernels in the CPU SIMT emulation ($MORPHGEN_CUDA_EMULATION): "
                     "its times and device bytes are not GPU measurements")
    if cap is None:
        notes.append("no address-space cap on the child processes (--memory-cap-gib sets one): under "
                     "RLIMIT_AS the CUDA driver's virtual address reservations fail")
    return notes

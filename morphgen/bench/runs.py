"""One benchmark run: morphgen and the peers on one prepared graph, and the options it reads.
Shared by `bench` (cli), its edge sweep, `sweep-sparsity` and `bench-suite`."""
from __future__ import annotations

import shlex
from pathlib import Path

from morphgen.errors import UserError

from . import harness, report as rep


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
    from .machine import usable_cores
    return args.threads or usable_cores()


def resolve_cap(args) -> float:
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
    if args.parity:
        parts.append("--parity")
    if args.sweep:
        parts += ["--sweep", args.sweep, "--sweep-min", str(args.sweep_min), "--sweep-max", str(args.sweep_max)]
    if args.sparsity_threshold is not None:
        parts += ["--sparsity-threshold", repr(args.sparsity_threshold)]
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
    peers = parse_peers(args.peers)
    systems = [harness.run_morphgen(args.model, data.path, work, epochs=args.epochs, warmup=args.warmup,
                                    seed=args.seed, threads=threads, cap_gib=cap, timeout_s=args.timeout,
                                    profile=not args.no_profile,
                                    sparsity_threshold=getattr(args, "sparsity_threshold", None))]
    sparse = peer_sparse_features(args.peer_features, systems[0], data.feature_sparsity)
    notes = list(shape.notes)
    if peers and shape.unsupported:
        for system in peers:
            entry = harness._empty_system(system)
            entry["error"] = f"not comparable: {shape.unsupported}"
            systems.append(entry)
    for system in peers if not shape.unsupported else ():
        spec = harness.peer_spec(shape, data, epochs=args.epochs, warmup=args.warmup, threads=threads,
                                 sparse_features=sparse)
        systems.append(harness.run_peer_capped(system, data.peer_path, spec, work, cap_gib=cap, timeout_s=args.timeout))
    rep.add_ratios(systems)
    widths = shape.resolved_layers(data.num_features, data.num_classes)
    morphgen_sparse = (systems[0].get("config") or {}).get("feature_path") == "sparse"
    analytic = analytic_minimum_bytes(data.num_nodes, data.num_edges + data.num_nodes, data.num_features,
                                      widths[1:-1], data.num_classes,
                                      sparse_nnz=data.feature_nnz if morphgen_sparse else None,
                                      dropout=any(p > 0 for p in shape.dropouts))
    return {
        "model": str(args.model), "command": command_line(args), "dataset": data.describe(),
        "threads": threads, "epochs": args.epochs, "warmup": args.warmup, "seed": args.seed,
        "memory_cap_gib": cap, "peer_features": "sparse" if sparse else "dense",
        "systems": systems, "machine": machine, "analytic_minimum_bytes": analytic,
        "kernels": rep.kernel_limits(systems[0].get("profile") or [], machine),
        "notes": notes,
    }

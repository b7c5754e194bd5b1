"""`morphgen bench MODEL.mp --sweep edges`: epoch time and peak memory against graph size.

Synthetic planted-community graphs with 2^k directed edges for k = --sweep-min .. --sweep-max
(default 18..24) and nodes in proportion (average degree SWEEP_DEGREE), dense SWEEP_FEATURES-wide
features, SWEEP_CLASSES classes. Every point runs morphgen and each peer in its own process under
the memory cap; a failed point is kept (with its error) and drawn as a red mark on the plots.
morphgen's scaling exponent is the least-squares slope of log(time) against log(edges).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Sequence

from . import harness, report as rep, runs

SWEEP_DEGREE = 16
SWEEP_FEATURES = 64
SWEEP_CLASSES = 16


def sweep_points(lo: int, hi: int) -> list:
    """(edges, nodes) for every power of two from 2^lo to 2^hi edges."""
    if not 4 <= lo <= hi <= 34:
        raise harness.BenchError(f"--sweep-min/--sweep-max: need 4 <= min <= max <= 34, got {lo}, {hi}")
    return [(1 << k, max((1 << k) // SWEEP_DEGREE, 4 * SWEEP_CLASSES * 20)) for k in range(lo, hi + 1)]


def synthetic_spec(edges: int, nodes: int, seed: int) -> str:
    val, test = min(500, nodes // 8), min(1000, nodes // 4)
    return (f"synthetic:nodes={nodes},edges={edges},features={SWEEP_FEATURES},classes={SWEEP_CLASSES},"
            f"val={val},test={test},seed={seed}")


def fit_exponent(xs: Sequence[float], ys: Sequence[float]):
    """Least-squares slope b of log y = a + b log x; None with fewer than two positive points."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x and y and x > 0 and y > 0]
    if len(pts) < 2 or len({p[0] for p in pts}) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx


def collect_series(points: list, key: str, scale: float = 1.0):
    """(series name -> (edges, values), failures name -> [(edges, error)]) over sweep points."""
    series, failures = {}, {}
    for pt in points:
        for s in pt["systems"]:
            name = s["system"]
            if s.get("error") or s.get(key) is None:
                failures.setdefault(name, []).append((pt["edges"], s.get("error") or "no value"))
                series.setdefault(name, ([], []))
            else:
                xs, ys = series.setdefault(name, ([], []))
                xs.append(pt["edges"])
                ys.append(s[key] * scale)
    return series, failures


def markdown(summary: dict) -> str:
    gpu = summary.get("backend", "openmp") != "openmp"
    where = (f"{summary['backend']} on {summary['device']} (peers on the same GPU), {summary['threads']} CPU threads"
             if gpu else f"{summary['threads']} threads")
    cap = (f"memory cap {summary['memory_cap_gib']} GiB per process" if summary["memory_cap_gib"]
           else "no memory cap on the processes")
    lines = [f"# morphgen bench --sweep edges: {Path(summary['model']).name}", "",
             f"Command: `{summary['command']}`", "",
             f"Synthetic graphs, average degree {SWEEP_DEGREE}, {SWEEP_FEATURES} dense features, "
             f"{SWEEP_CLASSES} classes; {where}, {summary['epochs']} epochs "
             f"(median after {summary['warmup']} warm-up); {cap}.", "",
             "| edges | nodes | system | median epoch (ms) | peak RSS (MiB) |" + (" peak device (MiB) |" if gpu else "")
             + " note |", "|---:|---:|---|---:|---:|" + ("---:|" if gpu else "") + "---|"]
    for pt in summary["points"]:
        for s in pt["systems"]:
            if s.get("error"):
                lines.append(f"| {pt['edges']:,} | {pt['nodes']:,} | {s['system']} | | |" + (" |" if gpu else "")
                             + f" failed: {s['error']} |")
            else:
                device = f" {rep._fmt(s.get('peak_device_bytes'), '.1f', 1 / rep.MiB)} |" if gpu else ""
                lines.append(f"| {pt['edges']:,} | {pt['nodes']:,} | {s['system']} | {s['epoch_time_s'] * 1e3:.2f} | "
                             f"{s['peak_rss_bytes'] / rep.MiB:.1f} |{device} |")
    lines += ["", "Fitted exponent b of epoch time ~ edges^b (1 = linear):", ""]
    for name, b in summary["exponents"].items():
        lines.append(f"- {name}: " + ("not enough successful points" if b is None else f"{b:.3f}"))
    return "\n".join(lines) + "\n"


def run(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    shape = harness.program_shape(args.model)
    threads = runs.resolve_threads(args)
    machine = runs.measure_limits(threads, args.quick_machine)
    points = []
    for edges, nodes in sweep_points(args.sweep_min, args.sweep_max):
        with harness.scratch_dir(out) as tmp:
            data = harness.prepare_dataset(synthetic_spec(edges, nodes, args.seed), None, tmp,
                                           feature_normalization=shape.feature_normalization)
            r = runs.bench_one(args, data, shape, Path(tmp), machine)
        points.append({"edges": edges, "nodes": nodes, "systems": r["systems"],
                       "analytic_minimum_bytes": r["analytic_minimum_bytes"]})
        for s in r["systems"]:
            s.pop("profile", None)                   # kept per point only in the single-graph report
            state = f"failed: {s['error']}" if s.get("error") else f"{s['epoch_time_s'] * 1e3:.2f} ms"
            print(f"edges 2^{edges.bit_length() - 1}: {s['system']:<9} {state}", flush=True)
    time_series, time_fail = collect_series(points, "epoch_time_s", 1e3)
    mem_series, mem_fail = collect_series(points, "peak_rss_bytes", 1 / rep.MiB)
    exponents = {name: fit_exponent(*xy) for name, xy in time_series.items()}
    summary = {"model": str(args.model), "command": runs.command_line(args), "threads": threads,
               "epochs": args.epochs, "warmup": args.warmup, "memory_cap_gib": runs.resolve_cap(args),
               "machine": machine, "points": points, "exponents": exponents}
    backend = runs.backend_of(args)
    if backend != "openmp":               # an openmp summary keeps the keys it always had
        summary.update(backend=backend, device=harness.device_name(backend, runs.resolve_device(args)))
        dev_series, dev_fail = collect_series(points, "peak_device_bytes", 1 / rep.MiB)
        rep.line_plot(dev_series, "edges", "peak device memory (MiB)", "peak device memory vs edges",
                      out / "sweep_peak_device_memory.png", failures=dev_fail)
    rep.line_plot(time_series, "edges", "median epoch time (ms)", "epoch time vs edges",
                  out / "sweep_epoch_time.png", failures=time_fail)
    rep.line_plot(mem_series, "edges", "peak RSS (MiB)", "peak memory vs edges",
                  out / "sweep_peak_memory.png", failures=mem_fail)
    (out / "sweep.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "sweep.md").write_text(markdown(summary))
    for name, b in exponents.items():
        print(f"{name}: fitted exponent {'n/a' if b is None else f'{b:.3f}'}")
    print(f"wrote {out / 'sweep.json'}, {out / 'sweep.md'} and plots to {out}")
    return 0 if exponents.get("morphgen") is not None else 1

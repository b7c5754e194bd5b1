"""`morphgen sweep-sparsity MODEL.mp`: where does the sparse feature path start to pay off?

For every feature width and feature sparsity of the grid, one synthetic graph is generated and
morphgen trains on it twice, each in its own process: once forced onto the dense feature path
(`--sparsity-threshold 1`, which no sparsity exceeds) and once onto the sparse path
(`--sparsity-threshold 0`, taken by any sparsity above 0). The two median epoch times give the
ratio t_sparse / t_dense; the measured crossover is the sparsity where that ratio falls through 1
(linear interpolation between the two grid points around the sign change). It is compared with
tau = 1 - rho, the threshold morphgen's calibration microbenchmark predicts (morphgen.calibrate).
A run whose reported feature path is not the one asked for (sparsity exactly 0 cannot take the
sparse path) is recorded as such, not timed.  Beside the two runs, the path morphgen picks by
itself on each graph (lowered as `train` lowers it, which counts hoisting) is recorded, with the
forced time of that path over the faster one's.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Sequence

from . import cli as bench_cli, harness, report as rep
from .runs import resolve_cap, resolve_threads

DEFAULT_SPARSITIES = "0,0.2,0.35,0.5,0.65,0.8,0.9,0.95,0.98,0.99,0.995,0.999"
DEFAULT_WIDTHS = "128,512,2048"
FORCE_DENSE, FORCE_SPARSE = 1.0, 0.0


def _float_list(text: str, option: str, lo: float, hi: float) -> list:
    try:
        vals = [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise harness.BenchError(f"{option}: expected comma-separated numbers, got {text!r}") from None
    bad = [v for v in vals if not lo <= v < hi]
    if not vals or bad:
        raise harness.BenchError(f"{option}: every value must lie in [{lo}, {hi}), got {text!r}")
    return sorted(set(vals))


def _int_list(text: str, option: str) -> list:
    try:
        vals = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise harness.BenchError(f"{option}: expected comma-separated integers, got {text!r}") from None
    if not vals or min(vals) < 1:
        raise harness.BenchError(f"{option}: widths must be positive integers, got {text!r}")
    return sorted(set(vals))


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("sweep-sparsity", help="time the dense and sparse feature paths over sparsity and width",
                              description=__doc__.split("\n")[0])
    p.add_argument("model", help="the .mp program")
    p.add_argument("--sparsities", default=DEFAULT_SPARSITIES, help=f"feature sparsities (default {DEFAULT_SPARSITIES})")
    p.add_argument("--widths", default=DEFAULT_WIDTHS, help=f"feature widths (default {DEFAULT_WIDTHS})")
    p.add_argument("--nodes", type=int, default=20000, help="nodes of each synthetic graph (default 20000)")
    p.add_argument("--edges", type=int, default=200000, help="directed edges of each graph (default 200000)")
    p.add_argument("--classes", type=int, default=16, help="classes (default 16)")
    p.add_argument("--epochs", type=int, default=10, help="epochs per run (default 10)")
    p.add_argument("--warmup", type=int, default=3, help="epochs left out of the median (default 3)")
    p.add_argument("--out", default="sparsity-out", help="output directory (default sparsity-out)")
    bench_cli.add_run_options(p)
    p.set_defaults(handler=run)


def crossover(sparsities: Sequence[float], ratios: Sequence[Optional[float]]) -> dict:
    """Sparsity where t_sparse/t_dense first drops below 1 for good (ratios aligned with sparsities).

    Returns {"sparsity": value or None, "kind": "interpolated" | "below_grid" | "above_grid" | "none"}:
    below_grid when sparse already wins at the lowest measured sparsity, above_grid when it never wins.
    """
    pts = [(s, r) for s, r in zip(sparsities, ratios) if r is not None]
    if not pts:
        return {"sparsity": None, "kind": "none"}
    # the last point from which sparse wins at every higher sparsity
    k = len(pts)
    while k > 0 and pts[k - 1][1] < 1.0:
        k -= 1
    if k == len(pts):
        return {"sparsity": None, "kind": "above_grid"}
    if k == 0:
        return {"sparsity": pts[0][0], "kind": "below_grid"}
    (s0, r0), (s1, r1) = pts[k - 1], pts[k]
    t = (r0 - 1.0) / (r0 - r1)
    return {"sparsity": s0 + t * (s1 - s0), "kind": "interpolated"}


def calibrated_tau(threads=None) -> dict:
    """rho and tau from morphgen's calibration, or an entry saying why they are unavailable."""
    from morphgen import calibrate
    try:
        cal = calibrate.calibrate(threads)
    except Exception as exc:     # a failed calibration is reported beside the measurement, not fatal
        return {"rho": None, "tau": None, "error": f"{type(exc).__name__}: {exc}"}
    return {"rho": float(cal.rho), "tau": float(cal.tau), "error": None}


def _time_path(args, data, work, threshold: float, want: str, threads: int) -> dict:
    entry = harness.run_morphgen(args.model, data.path, work, epochs=args.epochs, warmup=args.warmup,
                                 seed=args.seed, threads=threads, cap_gib=resolve_cap(args),
                                 timeout_s=args.timeout, profile=False, sparsity_threshold=threshold,
                                 tag=f"morphgen_{want}")
    got = (entry.get("config") or {}).get("feature_path")
    if entry.get("error") is None and got != want:
        entry["error"] = f"asked for the {want} path, morphgen took {got}"
        entry["epoch_time_s"] = None
    return {"epoch_time_s": entry.get("epoch_time_s"), "peak_rss_bytes": entry.get("peak_rss_bytes"),
            "error": entry.get("error")}


def _auto_path(compiled, data_path) -> str:
    """The feature path morphgen takes by itself on this graph (no --sparsity-threshold): the
    program (``compiled``, read once for the sweep) lowered as `train` would lower it, neither
    compiled nor run."""
    from morphgen.data.resolve import load_dataset
    compiled.lower_for(load_dataset(str(data_path)))
    return compiled.feature_path[0]


def auto_ratio(row: dict):
    """The epoch time of the path morphgen picks over the faster of the two (1: it picked the
    faster), from the two forced runs; None when the pick or both paths were not timed."""
    times = {p: row[p]["epoch_time_s"] for p in ("dense", "sparse") if row[p]["epoch_time_s"]}
    picked = times.get(row.get("auto"))
    return picked / min(times.values()) if picked and times else None


def markdown(summary: dict) -> str:
    cal = summary["calibration"]
    tau_text = (f"rho = {cal['rho']:.4f}, tau = 1 - rho = {cal['tau']:.4f}" if cal.get("tau") is not None
                else f"calibration unavailable ({cal.get('error')})")
    lines = [f"# morphgen sweep-sparsity: {Path(summary['model']).name}", "", f"Command: `{summary['command']}`", "",
             f"{summary['nodes']:,} nodes, {summary['edges']:,} edges, {summary['classes']} classes; "
             f"{summary['threads']} threads; median epoch over {summary['epochs']} epochs after "
             f"{summary['warmup']} warm-up. Calibration: {tau_text}.", "",
             "| width | sparsity | dense (ms) | sparse (ms) | sparse / dense | morphgen picks | picked / faster |",
             "|---:|---:|---:|---:|---:|---|---:|"]
    picked = [auto_ratio(r) for r in summary["runs"]]
    for r, pick in zip(summary["runs"], picked):
        d, s = r["dense"], r["sparse"]
        dt = f"{d['epoch_time_s'] * 1e3:.2f}" if d["epoch_time_s"] else f"({d['error']})"
        st = f"{s['epoch_time_s'] * 1e3:.2f}" if s["epoch_time_s"] else f"({s['error']})"
        ratio = f"{r['ratio']:.3f}" if r["ratio"] is not None else "–"
        lines.append(f"| {r['width']} | {r['sparsity']:g} | {dt} | {st} | {ratio} | {r.get('auto') or '–'} | "
                     f"{_f(pick, '.3f')} |")
    ratios = [x for x in picked if x is not None]
    if ratios:
        lines += ["", f"morphgen's own pick (no `--sparsity-threshold`) is within 5% of the faster path at "
                      f"{sum(x <= 1.05 for x in ratios)} of {len(ratios)} points; at most "
                      f"{max(ratios):.3f}x the faster path's time."]
    lines += ["", "| width | measured crossover sparsity | tau | difference |", "|---:|---:|---:|---:|"]
    for w, c in summary["crossovers"].items():
        if c["sparsity"] is None:
            text = {"above_grid": "sparse never faster on this grid", "none": "no measurement"}[c["kind"]]
            lines.append(f"| {w} | {text} | {_f(cal.get('tau'))} | – |")
        else:
            prefix = "<= " if c["kind"] == "below_grid" else ""
            diff = c["sparsity"] - cal["tau"] if cal.get("tau") is not None else None
            lines.append(f"| {w} | {prefix}{c['sparsity']:.4f} | {_f(cal.get('tau'))} | {_f(diff, '+.4f')} |")
    return "\n".join(lines) + "\n"


def _f(v, spec=".4f"):
    return "–" if v is None else format(v, spec)


def run(args) -> int:
    bench_cli.check_common(args)
    sparsities = _float_list(args.sparsities, "--sparsities", 0.0, 1.0)
    widths = _int_list(args.widths, "--widths")
    if args.epochs < 1 or not 0 <= args.warmup < args.epochs:
        raise harness.BenchError(f"--epochs/--warmup: need epochs >= 1 and 0 <= warmup < epochs, "
                                 f"got {args.epochs}/{args.warmup}")
    if not Path(args.model).is_file():
        raise harness.BenchError(f"model: {args.model}: no such file")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    threads = resolve_threads(args)
    calibration = calibrated_tau(threads)
    from morphgen.api import compile as compile_model
    model = compile_model(args.model, threads=threads)
    runs = []
    for width in widths:
        for s in sparsities:
            spec = (f"synthetic:nodes={args.nodes},edges={args.edges},features={width},sparsity={s},"
                    f"classes={args.classes},seed={args.seed},format=csr")
            with harness.scratch_dir(out) as tmp:
                data = harness.prepare_dataset(spec, None, tmp)
                dense = _time_path(args, data, Path(tmp), FORCE_DENSE, "dense", threads)
                sparse = _time_path(args, data, Path(tmp), FORCE_SPARSE, "sparse", threads)
                auto = _auto_path(model, data.path)
            ratio = (sparse["epoch_time_s"] / dense["epoch_time_s"]
                     if sparse["epoch_time_s"] and dense["epoch_time_s"] else None)
            runs.append({"width": width, "sparsity": s, "measured_sparsity": data.feature_sparsity,
                         "dense": dense, "sparse": sparse, "ratio": ratio, "auto": auto})
            print(f"width {width:>5} sparsity {s:<6g} dense {_ms(dense)} sparse {_ms(sparse)} picks {auto}",
                  flush=True)
    crossovers = {}
    for width in widths:
        rows = [r for r in runs if r["width"] == width]
        crossovers[str(width)] = crossover([r["sparsity"] for r in rows], [r["ratio"] for r in rows])
    summary = {"model": str(args.model), "command": _command(args, threads), "nodes": args.nodes,
               "edges": args.edges, "classes": args.classes, "threads": threads, "epochs": args.epochs,
               "warmup": args.warmup, "calibration": calibration, "runs": runs, "crossovers": crossovers}
    (out / "sparsity.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "sparsity.md").write_text(markdown(summary))
    series = {}
    for width in widths:
        rows = [r for r in runs if r["width"] == width and r["ratio"] is not None]
        series[f"F={width}"] = ([max(1.0 - r["sparsity"], 1e-6) for r in rows], [r["ratio"] for r in rows])
    rho = calibration.get("rho")
    rep.line_plot(series, "feature density 1 - sparsity (log)", "t_sparse / t_dense (below 1: sparse wins)",
                  "sparse vs dense feature path", out / "sparsity_ratio.png", xbase=10, ylog=False,
                  hline=1.0, vline=rho, vline_label=f"rho = 1 - tau = {rho:.3f}" if rho is not None else "")
    print(markdown(summary))
    print(f"wrote {out / 'sparsity.json'}, {out / 'sparsity.md'} and {out / 'sparsity_ratio.png'}")
    return 0 if any(c["kind"] != "none" for c in crossovers.values()) else 1


def _ms(r: dict) -> str:
    return f"{r['epoch_time_s'] * 1e3:9.2f} ms" if r["epoch_time_s"] else f"failed ({r['error']})"


def _command(args, threads: int) -> str:
    import shlex
    return shlex.join(["morphgen", "sweep-sparsity", args.model, "--sparsities", args.sparsities,
                       "--widths", args.widths, "--nodes", str(args.nodes), "--edges", str(args.edges),
                       "--classes", str(args.classes), "--epochs", str(args.epochs), "--threads", str(threads),
                       "--out", args.out])

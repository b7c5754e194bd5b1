"""Turn benchmark results into bench.json, a markdown table and PNG plots.

Nothing here measures or estimates: a system that failed keeps its error and shows as "failed"
in every table and plot. Ratios are peer / morphgen, so a ratio above 1 means morphgen is faster
(or smaller). A report of a GPU run ("backend": "cuda") also shows each system's peak device
memory ("peak_device_bytes") and its ratio.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Optional, Sequence

MiB = float(1 << 20)
# The configuration keys shown in the table; the full configuration is listed under it.
TABLE_CONFIG_KEYS = ("feature_path", "hoisted_aggregations", "adjacency", "features")


def _ok(entry: dict) -> bool:
    return entry.get("error") is None and entry.get("epoch_time_s") is not None


def add_ratios(systems: list) -> None:
    """Each peer gets time_ratio and memory_ratio against morphgen (None when either failed)."""
    base = next((s for s in systems if s["system"] == "morphgen"), None)
    for s in systems:
        if s["system"] == "morphgen":
            continue
        both = base is not None and _ok(base) and _ok(s)
        s["time_ratio_vs_morphgen"] = s["epoch_time_s"] / base["epoch_time_s"] if both else None
        s["memory_ratio_vs_morphgen"] = (s["peak_rss_bytes"] / base["peak_rss_bytes"]
                                         if both and s.get("peak_rss_bytes") and base.get("peak_rss_bytes")
                                         else None)
        if base is not None and "peak_device_bytes" in base:      # GPU runs only
            s["device_memory_ratio_vs_morphgen"] = (s["peak_device_bytes"] / base["peak_device_bytes"]
                                                    if both and s.get("peak_device_bytes")
                                                    and base.get("peak_device_bytes") else None)


def kernel_limits(profile: Sequence[dict], machine: Optional[dict]) -> list:
    """Per-kernel achieved GB/s and GFLOP/s, and the fraction of the ceiling that binds it.

    A kernel whose arithmetic intensity (flops per byte) is below the machine balance
    (sgemm GFLOP/s / triad GB/s) is bandwidth-bound and compared with triad; otherwise with sgemm.
    machine None: no ceilings apply (GPU kernels; the measured ones are the CPU's), so the rates
    are listed with bound and fraction None.
    """
    if machine is None:
        return [{**row, "bound": None, "fraction_of_limit": None} for row in kernel_limits(profile, {})]
    triad, sgemm = machine.get("triad_gbs"), machine.get("sgemm_gflops")
    balance = sgemm / triad if triad and sgemm else None
    rows = []
    for k in profile or []:
        secs = float(k.get("seconds") or 0.0)
        if not k.get("calls") or secs <= 0:
            continue
        gbs = float(k.get("bytes") or 0) / secs / 1e9
        gflops = float(k.get("flops") or 0) / secs / 1e9
        intensity = (float(k.get("flops") or 0) / float(k["bytes"])) if k.get("bytes") else math.inf
        bound = "memory" if balance is None or intensity < balance else "compute"
        frac = (gbs / triad if bound == "memory" and triad else gflops / sgemm if sgemm else None)
        rows.append({"kernel": k["kernel"], "calls": k["calls"], "seconds": secs, "gb_per_s": gbs,
                     "gflop_per_s": gflops, "bound": bound, "fraction_of_limit": frac})
    rows.sort(key=lambda r: -r["seconds"])
    return rows


def _gpu_limits_lines(gpu: Optional[dict]) -> list:
    """What a GPU run's kernels are held against (morphgen.bench.gpu_limits); nothing for a CPU run."""
    if gpu is None:
        return []
    if gpu.get("error"):
        return [f"GPU ceilings: not measured ({gpu['error']}); the kernels' rates are not held against a limit.", ""]
    quick = " (quick measurement)" if gpu.get("quick") else ""
    return [f"GPU ({gpu['device_name']}): device-to-device copy {gpu['device_copy_gbs']:.0f} GB/s (read + write), "
            f"sgemm {gpu['sgemm_gflops']:.0f} GFLOP/s (FP32, TF32 off){quick}; the kernel table's "
            f"\"% of limit\" is against these.", ""]


def write_json(report: dict, path) -> Path:
    path = Path(path)
    path.write_text(json.dumps(report, indent=2, default=_json_default) + "\n")
    return path


def _json_default(o):
    if hasattr(o, "item"):
        return o.item()
    return str(o)


def _fmt(v, spec: str, scale: float = 1.0, none: str = "–") -> str:
    if v is None:
        return none
    return format(v * scale, spec)


def _compile_and_setup(system: dict) -> str:
    """morphgen's compile time and its one-off work when the data is bound (layouts, feature
    blocks, hoisted aggregations), both outside the epochs; '–' for the peers."""
    compile_s, setup_s = system.get("compile_seconds"), system.get("setup_seconds")
    if setup_s is None:
        return _fmt(compile_s, ".2f")
    return f"{_fmt(compile_s, '.2f')} + {setup_s:.2f}"


def _device_cells(s: dict) -> str:
    return (f" {_fmt(s.get('peak_device_bytes'), '.1f', 1 / MiB)} | "
            f"{_fmt(s.get('device_memory_ratio_vs_morphgen'), '.2f')} |")


def systems_table(systems: Sequence[dict], analytic_bytes: Optional[int], device: bool = False) -> list:
    """device: add the peak device memory columns (GPU runs)."""
    dev_head, dev_rule = (" peak device (MiB) | peer/morphgen device memory |", "---:|---:|") if device else ("", "")
    lines = ["| system | configuration | median epoch (ms) | peer/morphgen time | compile + setup (s) | "
             "peak RSS (MiB) | growth (MiB) | growth / analytic min |" + dev_head + " first loss | final loss | test acc |",
             "|---|---|---:|---:|---:|---:|---:|---:|" + dev_rule + "---:|---:|---:|"]
    for s in systems:
        cfg = ", ".join(f"{k}={v}" for k, v in (s.get("config") or {}).items()
                        if v is not None and k in TABLE_CONFIG_KEYS)
        if s.get("error"):
            lines.append(f"| {s['system']} | {cfg} | failed: {s['error']} | | | | | | | | |" + (" | |" if device else ""))
            continue
        # growth: what training adds to a process that already holds the data (peak - baseline)
        growth = (s["peak_rss_bytes"] - s["baseline_rss_bytes"]
                  if s.get("peak_rss_bytes") and s.get("baseline_rss_bytes") else None)
        mem_ratio = growth / analytic_bytes if analytic_bytes and growth is not None else None
        lines.append(
            f"| {s['system']} | {cfg} | {_fmt(s.get('epoch_time_s'), '.2f', 1e3)} | "
            f"{_fmt(s.get('time_ratio_vs_morphgen'), '.2f')} | {_compile_and_setup(s)} | "
            f"{_fmt(s.get('peak_rss_bytes'), '.1f', 1 / MiB)} | {_fmt(growth, '.1f', 1 / MiB)} | "
            f"{_fmt(mem_ratio, '.2f')} |{_device_cells(s) if device else ''} "
            f"{_fmt(s.get('first_epoch_loss'), '.4f')} | {_fmt(s.get('final_loss'), '.4f')} | "
            f"{_fmt(s.get('test_acc'), '.3f')} |")
    return lines


def cap_text(cap_gib: Optional[float]) -> str:
    return f"Memory cap per process: {cap_gib} GiB." if cap_gib else "No memory cap on the processes."


def _gpu_name(systems: Sequence[dict]) -> Optional[str]:
    """The GPU's name as a peer's torch reported it (morphgen's report does not carry one)."""
    return next(((s.get("config") or {}).get("device_name") for s in systems
                 if (s.get("config") or {}).get("device_name")), None)


def backend_line(report: dict) -> list:
    """For a GPU run: where each side ran, and what --threads still means."""
    if report.get("backend", "openmp") == "openmp":
        return []
    name = _gpu_name(report["systems"])
    return [f"Backend: {report['backend']}, GPU {report['device']}" + (f" ({name})" if name else "")
            + f": morphgen `train --backend {report['backend']}` and the peers (torch device {report['device']}) "
            f"train on it; --threads {report['threads']} sets the CPU side's threads. The peers' epoch times "
            "are read after torch.cuda.synchronize().", ""]


def rounds_text(rounds: int) -> str:
    return f", the fastest of {rounds} interleaved rounds per system" if rounds > 1 else ""


def markdown(report: dict) -> str:
    d, m = report["dataset"], report["machine"]
    out = [f"# morphgen bench: {Path(report['model']).name} on {d['name']}", "",
           f"Command: `{report['command']}`", ""]
    out += backend_line(report)
    typed = f" of {d['edge_types']} types" if d.get("edge_types", 1) > 1 else ""
    features = (f"{d['features']} features (featureless: identity input, node ids for the peers)"
                if d.get("featureless") else f"{d['features']} features (sparsity {d['feature_sparsity']:.4f})")
    out += [f"Graph: {d['nodes']:,} nodes, {d['edges']:,} edges{typed}, {features}, {d['classes']} classes. "
            f"{report['threads']} threads, {report['epochs']} epochs, median over epochs after "
            f"{report['warmup']} warm-up epochs{rounds_text(report.get('rounds', 1))}; compile time excluded and "
            f"reported apart. "
            f"{cap_text(report['memory_cap_gib'])}", ""]
    out += systems_table(report["systems"], report.get("analytic_minimum_bytes"),
                         device=report.get("backend", "openmp") != "openmp")
    out += ["", "Configurations:", ""]
    for s in report["systems"]:
        cfg = "; ".join(f"{k}: {v}" for k, v in (s.get("config") or {}).items() if v is not None)
        out.append(f"- {s['system']}: {cfg or 'not reported'}")
        for a in s.get("alternatives") or []:
            result = (f"median epoch {a['epoch_time_s'] * 1e3:.2f} ms, peak RSS {_fmt(a.get('peak_rss_bytes'), '.1f', 1 / MiB)} MiB"
                      if a.get("epoch_time_s") is not None else f"failed: {a.get('error')}")
            out.append(f"  - also timed as {a['configuration']}: {result} (the row above is the faster, "
                       f"{s.get('configuration')})")
    out += ["", f"Analytic minimum memory (morphgen.bench.memory): "
                f"{_fmt(report.get('analytic_minimum_bytes'), '.1f', 1 / MiB)} MiB.", ""]
    if m.get("error"):
        out += [f"Machine limits: not measured ({m['error']}).", ""]
    else:
        quick = " (quick measurement on small arrays: indicative only)" if m.get("quick") else ""
        out += [f"Machine ({m.get('cpu_model')}, {m.get('kernel_isa', 'kernel ISA not recorded')} kernels, "
                f"{m.get('threads')} threads): STREAM copy "
                f"{m['copy_gbs']:.2f} GB/s, triad {m['triad_gbs']:.2f} GB/s, sgemm {m['sgemm_gflops']:.1f} GFLOP/s"
                f"{quick}.", ""]
    out += _gpu_limits_lines(report.get("gpu_limits"))
    if report.get("kernels"):
        out += ["| kernel | calls | seconds | GB/s | GFLOP/s | bound | % of limit |",
                "|---|---:|---:|---:|---:|---|---:|"]
        for k in report["kernels"]:
            out.append(f"| {k['kernel']} | {k['calls']} | {k['seconds']:.4f} | {k['gb_per_s']:.2f} | "
                       f"{k['gflop_per_s']:.2f} | {k['bound'] or '–'} | {_fmt(k['fraction_of_limit'], '.1f', 100)} |")
        out.append("")
    if report.get("parity"):
        out += _parity_lines(report["parity"])
    for note in report.get("notes", []):
        out.append(f"- {note}")
    return "\n".join(out).rstrip() + "\n"


def _parity_lines(par: dict) -> list:
    """The parity check's paragraph and table (harness.parity_check), or why it did not run."""
    if "peers" not in par:
        return [f"Parity: not checked ({par['error']}).", ""]
    epochs = par["epochs"]
    out = [f"Parity (dropout 0, morphgen's initial weights given to every peer, {epochs} "
           f"epoch{'s' if epochs != 1 else ''} on each side): morphgen's losses {_losses(par['morphgen_losses'])}; "
           f"tolerance per epoch {', '.join(f'{t:.1e}' for t in par['tolerances'])} ({par['tolerance']:g}, "
           f"relative above a loss of 1)."]
    if par["nudged_losses"]:
        runs = "; ".join(_losses(run) for run in par["nudged_losses"])
        out.append(f"Trained again from weights nudged by {par['nudge']:g} of themselves, morphgen's losses are "
                   f"{runs}; an epoch's tolerance is {par['drift_factor']:g} times the larger drift where "
                   f"that is larger.")
    out += ["", "| peer | losses | max abs diff | within tolerance |", "|---|---|---:|---|"]
    for name, row in par["peers"].items():
        if row["error"]:
            out.append(f"| {name} | failed: {row['error']} | | |")
        else:
            out.append(f"| {name} | {_losses(row['losses'])} | {row['abs_diff']:.2e} | "
                       f"{'yes' if row['passed'] else 'NO'} |")
    return out + [""]


def _losses(values) -> str:
    return ", ".join("not finite" if v is None else f"{v:.6f}" for v in values)


# ----------------------------------------------------------------------------- plots
def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _bar_plot(systems, key, scale, ylabel, title, path, hline=None, hline_label=None) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    names = [s["system"] for s in systems]
    vals = [(s.get(key) or 0) * scale if not s.get("error") else 0 for s in systems]
    bars = ax.bar(names, vals, color=["#1f77b4" if n == "morphgen" else "#999999" for n in names])
    top = max(vals + [hline * scale if hline else 0]) or 1.0
    for bar, s in zip(bars, systems):
        label = "failed" if s.get("error") else f"{bar.get_height():.3g}"
        ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height() + 0.01 * top, label,
                ha="center", va="bottom", fontsize=8, color="red" if s.get("error") else "black")
    if hline:
        ax.axhline(hline * scale, color="green", linestyle="--", label=hline_label)
        ax.legend(fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def write_plots(report: dict, out_dir) -> list:
    out_dir = Path(out_dir)
    title = f"{Path(report['model']).name} on {report['dataset']['name']}, {report['threads']} threads"
    if report.get("backend", "openmp") != "openmp":
        title = f"{Path(report['model']).name} on {report['dataset']['name']}, {report['backend']} {report['device']}"
        return [
            _bar_plot(report["systems"], "epoch_time_s", 1e3, "median epoch time (ms)", title,
                      out_dir / "epoch_time.png"),
            # on a GPU the data, parameters and activations of the analytic minimum are device memory
            _bar_plot(report["systems"], "peak_device_bytes", 1 / MiB, "peak device memory (MiB)", title,
                      out_dir / "peak_device_memory.png", hline=report.get("analytic_minimum_bytes"),
                      hline_label="analytic minimum"),
            _bar_plot(report["systems"], "peak_rss_bytes", 1 / MiB, "peak RSS, host (MiB)", title,
                      out_dir / "peak_memory.png"),
        ]
    return [
        _bar_plot(report["systems"], "epoch_time_s", 1e3, "median epoch time (ms)", title,
                  out_dir / "epoch_time.png"),
        _bar_plot(report["systems"], "peak_rss_bytes", 1 / MiB, "peak RSS (MiB)", title,
                  out_dir / "peak_memory.png", hline=report.get("analytic_minimum_bytes"),
                  hline_label="analytic minimum"),
    ]


def line_plot(series: dict, xlabel: str, ylabel: str, title: str, path, failures: Optional[dict] = None,
              xbase: Optional[int] = 2, ylog: bool = True, vline: Optional[float] = None,
              vline_label: str = "", hline: Optional[float] = None) -> Path:
    """series: name -> (xs, ys); log axes (x in base `xbase`, None for linear); failures: name -> [(x, message)] drawn as red crosses at the axis."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, (xs, ys) in series.items():
        if xs:
            ax.plot(xs, ys, marker="o", label=name)
    if xbase:
        ax.set_xscale("log", base=xbase)
    if ylog:
        ax.set_yscale("log")
    if hline is not None:
        ax.axhline(hline, color="black", linewidth=0.8)
    for name, fails in (failures or {}).items():
        for x, msg in fails:
            ax.axvline(x, color="red", alpha=0.15)
            ax.annotate(f"{name}: {msg[:28]}", (x, 0.02), xycoords=("data", "axes fraction"),
                        rotation=90, fontsize=6, color="red", va="bottom")
    if vline is not None:
        ax.axvline(vline, color="green", linestyle="--", label=vline_label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)

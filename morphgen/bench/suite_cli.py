"""`morphgen bench-suite` (what `make bench` runs): the CPU suite of the paper, on what we have.

examples/gcn3.mp on the real cora and citeseer graphs and on synthetic graphs shaped like the
paper's larger datasets (same node count, edge count, feature width, feature sparsity and class
count, planted-community structure). Reddit, ogbn-products and AmazonProducts are scaled down so
that every system fits in this machine's 24 GiB: nodes and edges are divided by the factor in
SUITE (average degree and feature width unchanged). Each graph is one `morphgen bench` run with
the parity check; with `--docs FILE` (`make bench` names docs/benchmarks.md) the suite table, plots
and command are written into FILE between the markers BEGIN_MARK and END_MARK (everything outside
them is left untouched).  Without it only --out is written: a run of a few graphs or models does
not replace a section that a whole suite wrote, and no markdown file of the user's is touched.

`--backend cuda` runs the same graphs with morphgen's CUDA backend and the peers on the same GPU.
Its table has the peak device memory beside the peak RSS, and goes between its own markers
(GPU_MARKS) with its own plot files, so a GPU run never overwrites the CPU suite's results.

The relational graphs (RELATIONAL: aifb and mutag, featureless with typed edges; acm_heco, typed
nodes with features of their own; a synthetic typed graph small enough for PyG's RGATConv, which
copies a relation matrix to every edge) are for R-GCN, R-GAT and HGT programs: `--only` with their
names selects them, and they are the default when every --model program is one of those. A run on them
alone has its own docs section (RELATIONAL_MARKS) and plot files.

The model x graph and relational tables are kept per kernel ISA (`for_isa`): a run on an AVX2
machine and one on an AVX-512 machine each refresh their own section and plots, so the docs hold
both and neither overwrites the other.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from morphgen import arg_types
from morphgen.errors import UserError

from . import cli as bench_cli, harness, report as rep, runs

BEGIN_MARK = "<!-- bench-suite:begin -->"
END_MARK = "<!-- bench-suite:end -->"
GPU_MARKS = ("<!-- bench-suite-cuda:begin -->", "<!-- bench-suite-cuda:end -->")


MODELS_MARKS = ("<!-- bench-suite-models:begin -->", "<!-- bench-suite-models:end -->")
RELATIONAL_MARKS = ("<!-- bench-suite-relational:begin -->", "<!-- bench-suite-relational:end -->")
KERNEL_ISAS = ("avx512", "avx2", "portable")     # morphgen.calibrate.kernel_isa's answers


def marks(backend: str, several_models: bool = False, relational: bool = False, isa: Optional[str] = None) -> tuple:
    """The docs section a suite run refreshes: the GPU suite, the relational table (only
    relational graphs, CPU), the model x graph table (several --model programs, CPU), or the CPU
    suite. The relational and model x graph sections are per kernel ISA (`isa`, when known)."""
    if backend == "cuda":
        return GPU_MARKS
    if relational:
        return for_isa(RELATIONAL_MARKS, isa)
    return for_isa(MODELS_MARKS, isa) if several_models else (BEGIN_MARK, END_MARK)


def for_isa(names: tuple, isa: Optional[str]) -> tuple:
    """Markers (or plots) of a section kept per kernel ISA: `bench-suite-models:begin` becomes
    `bench-suite-models-avx512:begin`, `suite_models_epoch_time.png` becomes
    `suite_models_avx512_epoch_time.png`. Unchanged when the ISA is not one of the known ones."""
    if isa not in KERNEL_ISAS:
        return names

    def keyed(name):
        if isinstance(name, tuple):                       # a plot: (key, scale, label, file name)
            return name[:-1] + (keyed(name[-1]),)
        if name.startswith("<!--"):
            return name.replace(":", f"-{isa}:", 1)
        suite, section, rest = name.split("_", 2)          # suite_models_epoch_time.png
        return f"{suite}_{section}_{isa}_{rest}"
    return tuple(keyed(n) for n in names)


@dataclass(frozen=True)
class SuiteGraph:
    name: str
    dataset: str                 # a dataset name (looked up in --data-dir) or a synthetic spec
    shape_of: str                # what it stands for, with the scaling
    scale: int = 1               # nodes and edges divided by this


def _syn(nodes, edges, features, classes, sparsity=0.0, scale=1):
    n, e = nodes // scale, edges // scale
    return (f"synthetic:nodes={n},edges={e},features={features},classes={classes},sparsity={sparsity},"
            f"seed=0")


SUITE = (
    SuiteGraph("cora", "cora", "Cora (real)"),
    SuiteGraph("citeseer", "citeseer", "CiteSeer (real)"),
    SuiteGraph("flickr-like", _syn(89_250, 899_756, 500, 7), "Flickr: 89,250 nodes, 899,756 edges, 500 features"),
    SuiteGraph("arxiv-like", _syn(169_343, 1_166_243, 128, 40),
               "ogbn-arxiv: 169,343 nodes, 1,166,243 edges, 128 features"),
    SuiteGraph("nell-like", _syn(65_755, 251_550, 61_278, 186, sparsity=0.992),
               "NELL: 65,755 nodes, 251,550 edges, 61,278 features at 99.2% sparsity"),
    SuiteGraph("reddit-1/8", _syn(232_965, 114_615_892, 602, 41, scale=8),
               "Reddit (232,965 nodes, 114,615,892 edges, 602 features) / 8", 8),
    SuiteGraph("products-1/8", _syn(2_449_029, 61_859_140, 100, 47, scale=8),
               "ogbn-products (2,449,029 nodes, 61,859,140 edges, 100 features) / 8", 8),
    SuiteGraph("amazon-1/16", _syn(1_569_960, 264_339_468, 200, 107, scale=16),
               "AmazonProducts (1,569,960 nodes, 264,339,468 edges, 200 features) / 16", 16),
)


# R-GCN's entity-classification graphs (Schlichtkrull et al. 2018): typed edges with their
# inverses, no features (identity input); and ACM (HeCo), typed nodes with sparse features of
# their own. Not in the default suite, whose models are homogeneous.
RELATIONAL = (
    SuiteGraph("aifb", "aifb", "AIFB (real): 90 edge types, featureless"),
    SuiteGraph("mutag", "mutag", "MUTAG (real): 46 edge types, featureless"),
    SuiteGraph("acm_heco", "acm_heco", "ACM (HeCo, real): 3 node types, 4 edge types, 3,864 sparse features"),
    SuiteGraph("typed-16", "synthetic:nodes=10000,edges=100000,features=64,classes=8,etypes=16,seed=0",
               "synthetic: 10,000 nodes, 100,000 edges, 64 dense features, 16 edge types"),
    SuiteGraph("typed-500", "synthetic:nodes=10000,edges=100000,features=64,classes=8,etypes=500,seed=0",
               "synthetic: 10,000 nodes, 100,000 edges, 64 dense features, 500 edge types"),
)


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("bench-suite", help="the benchmark suite (CPU, or --backend cuda); --docs: refresh its section of a markdown file",
                              description=__doc__.split("\n")[0])
    p.add_argument("--model", default="examples/gcn3.mp",
                   help="program, or comma-separated programs for a model x graph table (default examples/gcn3.mp)")
    p.add_argument("--data-dir", default=None,
                   help="where cora/citeseer are (default: $MORPHGEN_DATA, else ../shared/datasets)")
    p.add_argument("--out", default="bench-out", help="output directory (default bench-out)")
    p.add_argument("--docs", default=None,
                   help="markdown file whose suite section (between its markers) to refresh with the table, plots "
                        "and command (default: none; `make bench` refreshes docs/benchmarks.md)")
    p.add_argument("--only", default=None,
                   help=f"comma-separated subset of: {', '.join(g.name for g in SUITE)}; or of the relational "
                        f"graphs {', '.join(g.name for g in RELATIONAL)} (the default for R-GCN and HGT programs)")
    p.add_argument("--peers", default="pyg,dgl", help="peers (default pyg,dgl; none for morphgen only)")
    p.add_argument("--epochs", type=int, default=50, help="epochs per system (default 50)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--no-parity", action="store_true",
                   help="skip the loss parity check (the first epochs from identical weights)")
    p.add_argument("--sparsity-threshold", type=arg_types.fraction, default=None, help="passed to morphgen train")
    bench_cli.add_device_options(p)
    bench_cli.add_run_options(p)
    p.set_defaults(handler=run)


def select(only: Optional[str], relational: bool = False) -> list:
    """The --only graphs; without it the suite, or the relational graphs when `relational` (every
    program is an R-GCN)."""
    if not only:
        return list(RELATIONAL if relational else SUITE)
    names = [n.strip() for n in only.split(",") if n.strip()]
    known = {g.name: g for g in SUITE + RELATIONAL}
    for n in names:
        if n not in known:
            raise harness.BenchError(f"--only: unknown graph '{n}' (known: {', '.join(known)})")
    return [known[n] for n in names]


def models(args) -> list:
    """The --model programs, each checked to exist."""
    paths = [m.strip() for m in args.model.split(",") if m.strip()]
    if not paths:
        raise harness.BenchError("--model: no program given")
    for m in paths:
        if not Path(m).is_file():
            raise harness.BenchError(f"--model: {m}: no such file")
    return paths


def all_relational(programs: list) -> bool:
    """Every program is a relational model (R-GCN, R-GAT, HGT) the peers can rebuild (front end only)."""
    return all(s.conv in ("rgcn", "rgat", "hgt") and not s.unsupported for s in map(harness.program_shape, programs))


def bench_args(args, graph: SuiteGraph, out: Path, model: str) -> argparse.Namespace:
    return argparse.Namespace(
        model=model, dataset=graph.dataset, data_dir=args.data_dir, peers=args.peers, epochs=args.epochs,
        warmup=args.warmup, out=str(out), parity=not args.no_parity, peer_features="auto", no_profile=False,
        sparsity_threshold=args.sparsity_threshold, sweep=None, threads=args.threads, seed=args.seed,
        memory_cap_gib=args.memory_cap_gib, timeout=args.timeout, quick_machine=args.quick_machine,
        backend=args.backend, device=args.device, rounds=args.rounds, peer_input_dropout=args.peer_input_dropout)


def run_graph(args, graph: SuiteGraph, out: Path, model: str) -> dict:
    """One suite row: the bench report, or an entry with the error that stopped it; "suite_model"
    names the program."""
    try:
        r = bench_cli.run_single(bench_args(args, graph, out, model))
    except UserError as exc:          # e.g. cora not found: the rest of the suite still runs
        r = {"error": str(exc)}
    r["suite_model"] = Path(model).stem
    return r


def geometric_mean_ratios(rows: list, peers: tuple) -> dict:
    """Per peer, the geometric mean of peer/morphgen time over the cells both ran, and their count."""
    out = {}
    for p in peers:
        ratios = [s["time_ratio_vs_morphgen"] for _, r in rows for s in [_system(r, p)]
                  if s and not s.get("error") and s.get("time_ratio_vs_morphgen")]
        if ratios:
            out[p] = (math.exp(sum(math.log(x) for x in ratios) / len(ratios)), len(ratios))
    return out


def _system(report: dict, name: str) -> Optional[dict]:
    return next((s for s in report.get("systems", []) if s["system"] == name), None)


def _cell_ms(s) -> str:
    if s is None:
        return "–"
    error = s.get("error")
    if error:
        # the reason in a few words; the per-graph report has the whole message
        for short in (r"not comparable", r"out of memory \(cap [^)]*\)", r"timed out[^:]*"):
            found = re.match(short, error)
            if found:
                return found.group(0)
        return f"failed: {error[:60]}"
    return f"{s['epoch_time_s'] * 1e3:.1f}"


def _cell_mib(s, key: str = "peak_rss_bytes") -> str:
    if s is None or s.get("error") or not s.get(key):
        return "–"
    return f"{s[key] / rep.MiB:.0f}"


def suite_table(rows: list, peers: tuple, device: bool = False) -> list:
    """device: also the peak device memory of every system (GPU runs). A relational row (typed
    edges) names its edge type count in the "edges" cell, and a featureless one its input."""
    head = ["graph", "model", "stands for", "nodes", "edges", "F", "sparsity", "morphgen ms"]
    head += [f"{p} ms" for p in peers] + [f"{p}/morphgen" for p in peers]
    head += ["morphgen MiB"] + [f"{p} MiB" for p in peers]
    if device:
        head += ["morphgen device MiB"] + [f"{p} device MiB" for p in peers]
    head += ["analytic min MiB", "parity max abs diff"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for graph, r in rows:
        model = r.get("suite_model", "")
        if r.get("error"):
            lines.append(f"| {graph.name} | {model} | {graph.shape_of} | failed: {r['error']} |" + " |" * (len(head) - 4))
            continue
        d = r["dataset"]
        edges = f"{d['edges']:,}" + (f" ({d['edge_types']} types)" if d.get("edge_types", 1) > 1 else "")
        features = f"{d['features']} (identity)" if d.get("featureless") else str(d["features"])
        cells = [graph.name, model, graph.shape_of, f"{d['nodes']:,}", edges, features,
                 f"{d['feature_sparsity']:.3f}", _cell_ms(_system(r, "morphgen"))]
        cells += [_cell_ms(_system(r, p)) for p in peers]
        cells += [(f"{s['time_ratio_vs_morphgen']:.2f}" if s and s.get("time_ratio_vs_morphgen") else "–")
                  for s in (_system(r, p) for p in peers)]
        cells += [_cell_mib(_system(r, "morphgen"))] + [_cell_mib(_system(r, p)) for p in peers]
        if device:
            cells += [_cell_mib(_system(r, n), "peak_device_bytes") for n in ("morphgen",) + peers]
        analytic = r.get("analytic_minimum_bytes")          # None where it is not modelled (HGT)
        cells.append(f"{analytic / rep.MiB:.0f}" if analytic else "–")
        checked = [row for row in (r.get("parity") or {}).get("peers", {}).values() if row.get("abs_diff") is not None]
        verdict = " (over tolerance)" if any(row.get("passed") is False for row in checked) else ""
        cells.append(f"{max(row['abs_diff'] for row in checked):.1e}{verdict}" if checked else "–")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


PLOTS = (("epoch_time_s", 1e3, "median epoch time (ms, log)", "suite_epoch_time.png"),
         ("peak_rss_bytes", 1 / rep.MiB, "peak RSS (MiB, log)", "suite_peak_memory.png"))
# Their own file names: the docs keep the CPU suite's plots beside these.
GPU_PLOTS = (("epoch_time_s", 1e3, "median epoch time (ms, log)", "suite_cuda_epoch_time.png"),
             ("peak_device_bytes", 1 / rep.MiB, "peak device memory (MiB, log)", "suite_cuda_peak_device_memory.png"))
MODELS_PLOTS = (("epoch_time_s", 1e3, "median epoch time (ms, log)", "suite_models_epoch_time.png"),
                ("peak_rss_bytes", 1 / rep.MiB, "peak RSS (MiB, log)", "suite_models_peak_memory.png"))
RELATIONAL_PLOTS = (("epoch_time_s", 1e3, "median epoch time (ms, log)", "suite_relational_epoch_time.png"),
                    ("peak_rss_bytes", 1 / rep.MiB, "peak RSS (MiB, log)", "suite_relational_peak_memory.png"))


def not_comparable_lines(rows: list) -> list:
    """Why a peer has no figure for a model: each reason once, with the models it holds for."""
    reasons: dict = {}
    for _, r in rows:
        for s in r.get("systems", []):
            error = s.get("error") or ""
            if error.startswith("not comparable: "):
                models = reasons.setdefault((s["system"], error[len("not comparable: "):]), [])
                if r.get("suite_model") not in models:
                    models.append(r.get("suite_model"))
    if not reasons:
        return []
    return ["Peers reported as not comparable:", ""] + [
        f"- {system} on {', '.join(models)}: {why}" for (system, why), models in reasons.items()] + [""]


def alternatives_lines(rows: list) -> list:
    """The other configurations a peer was timed in (PyG's two R-GCN convolutions): its figure in
    the table is the fastest."""
    lines = []
    for graph, r in rows:
        for s in r.get("systems", []):
            if not s.get("alternatives") or s.get("error"):
                continue
            others = ", ".join(f"{a['configuration']} " + (f"{a['epoch_time_s'] * 1e3:.1f} ms" if a.get("epoch_time_s")
                                                             else f"failed: {a.get('error')}")
                               for a in s["alternatives"])
            lines.append(f"- {graph.name} ({r.get('suite_model')}): {s['system']} {s['configuration']} "
                         f"{s['epoch_time_s'] * 1e3:.1f} ms (the table's figure); also timed: {others}")
    return ["Peers timed in more than one configuration (the faster is the table's figure):", ""] + lines + [""] \
        if lines else []


def suite_plots(rows: list, peers: tuple, out: Path, plots: tuple = PLOTS) -> list:
    plt = rep._pyplot()
    paths = []
    ok = [(g, r) for g, r in rows if not r.get("error")]
    for key, scale, label, fname in plots:
        fig, ax = plt.subplots(figsize=(8, 4))
        systems = ("morphgen",) + peers
        width = 0.8 / len(systems)
        for j, name in enumerate(systems):
            for i, (g, r) in enumerate(ok):
                s = _system(r, name)
                x = i + (j - (len(systems) - 1) / 2) * width
                if s is None or s.get("error") or not s.get(key):
                    ax.text(x, 1, "failed", rotation=90, fontsize=6, color="red", ha="center", va="bottom",
                            transform=ax.get_xaxis_transform())
                    continue
                ax.bar(x, s[key] * scale, width, color=f"C{j}", label=name if i == 0 else None)
        several = len({r.get("suite_model") for _, r in ok}) > 1
        ax.set_xticks(range(len(ok)), [g.name + (f"\n{r.get('suite_model')}" if several else "") for g, r in ok],
                      rotation=20, fontsize=7 if several else 8)
        ax.set_yscale("log")
        values = [(_system(r, n) or {}).get(key) for _, r in ok for n in systems]
        values = [v * scale for v in values if v]
        if values:                     # log bars start at the axis: leave room below the smallest
            ax.set_ylim(bottom=min(values) / 4)
        ax.set_ylabel(label)
        handles, names = ax.get_legend_handles_labels()
        if handles:
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / fname, dpi=110)
        plt.close(fig)
        paths.append(out / fname)
    return paths


def replace_between_markers(text: str, body: str, markers: tuple = (BEGIN_MARK, END_MARK)) -> str:
    """Put `body` between the suite markers; append a marked section when the file has none."""
    begin_mark, end_mark = markers
    if text.count(begin_mark) > 1 or text.count(end_mark) > 1:
        raise harness.BenchError(f"docs: the markers {begin_mark} / {end_mark} appear more than once")
    begin, end = text.find(begin_mark), text.find(end_mark)
    if begin == -1 and end == -1:
        sep = "" if not text or text.endswith("\n\n") else ("\n" if text.endswith("\n") else "\n\n")
        return f"{text}{sep}{begin_mark}\n{body.rstrip()}\n{end_mark}\n"
    if begin == -1 or end == -1 or end < begin:
        raise harness.BenchError(f"docs: {begin_mark} and {end_mark} must both appear, in that order")
    return text[:begin + len(begin_mark)] + "\n" + body.rstrip() + "\n" + text[end:]


def docs_section(args, programs: list, rows, peers, machine: dict, plot_links: list, command: str) -> str:
    lines = [f"Command: `{command}` (models {', '.join(f'`{m}`' for m in programs)}, {args.epochs} epochs, median after "
             f"{args.warmup} warm-up epochs{rep.rounds_text(args.rounds)}, compile time excluded). Other work may "
             f"have shared the machine while it ran; treat the times as indicative.", ""]
    if machine and not machine.get("error"):
        lines += [f"Machine: {machine.get('cpu_model')}, {machine.get('kernel_isa', 'kernel ISA not recorded')} kernels, "
                  f"{machine.get('threads')} threads; STREAM copy "
                  f"{machine['copy_gbs']:.2f} GB/s, triad {machine['triad_gbs']:.2f} GB/s, sgemm "
                  f"{machine['sgemm_gflops']:.1f} GFLOP/s.", ""]
    gpu = args.backend == "cuda"
    if gpu:
        reports = [r for _, r in rows if not r.get("error")]
        lines += gpu_lines(reports[0] if reports else None)
    lines += suite_table(rows, peers, device=gpu) + [""]
    lines += not_comparable_lines(rows)
    lines += alternatives_lines(rows)
    means = geometric_mean_ratios(rows, peers)
    if means:
        lines += ["Geometric mean of peer/morphgen time: " + ", ".join(
            f"{p} {g:.2f}x over {n} cells" for p, (g, n) in means.items()) + ".", ""]
    lines += ["Ratios are peer time / morphgen time (above 1: morphgen is faster). Peak RSS is each "
              "process's peak resident set (VmHWM, reset once its data is loaded; imports and data "
              "included, `docs/benchmarking.md`); the analytic minimum is "
              "`morphgen.bench.memory.analytic_minimum_bytes`. "
              + ("Peak device memory: morphgen's allocated device buffers, a peer's "
                 "torch.cuda.max_memory_allocated (data included; the CUDA context in neither). " if gpu else "")
              + "The parity column is the largest difference between a peer's loss and morphgen's over the "
              "parity check's epochs (`docs/benchmarking.md`, parity). "
              + "Per-graph reports (configuration of every system, per-kernel GB/s and GFLOP/s, parity) are in "
              + (f"`{args.out}/<model>/<graph>/bench.md`." if len(programs) > 1 else f"`{args.out}/<graph>/bench.md`."),
              ""]
    lines += [f"![{Path(p).stem}]({p})" for p in plot_links]
    return "\n".join(lines)


def gpu_lines(report) -> list:
    """Which GPU the suite ran on, and whether morphgen's side was only the CPU emulation."""
    if report is None:
        return []
    line = rep.backend_line(report)
    morphgen = _system(report, "morphgen") or {}
    if (morphgen.get("config") or {}).get("cuda_emulation"):
        line = [line[0] + " morphgen ran in the CPU SIMT emulation: its numbers are not GPU measurements.", ""]
    return line


def run(args) -> int:
    bench_cli.check_common(args)
    bench_cli.check_device(args)
    programs = models(args)
    graphs = select(args.only, relational=not args.only and all_relational(programs))
    relational = all(g in RELATIONAL for g in graphs)
    peers = runs.parse_peers(args.peers)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for model in programs:
        for graph in graphs:
            where = out / graph.name.replace("/", "_")
            if len(programs) > 1:
                where = out / Path(model).stem / graph.name.replace("/", "_")
            print(f"== {graph.name} ({Path(model).stem}): {graph.shape_of}", flush=True)
            r = run_graph(args, graph, where, model)
            rows.append((graph, r))
            if r.get("error"):
                print(f"   failed: {r['error']}")
            else:
                bench_cli.print_summary(r, where)
    machine = next((r["machine"] for _, r in rows if "machine" in r), {})
    gpu = args.backend == "cuda"
    command = shlex.join(["morphgen", "bench-suite",
                          *(["--model", args.model] if args.model != "examples/gcn3.mp" else []),
                          *(["--only", args.only] if args.only else []),
                          "--epochs", str(args.epochs), "--peers", args.peers,
                          *(["--sparsity-threshold", repr(args.sparsity_threshold)]
                            if args.sparsity_threshold is not None else []),
                          *(["--backend", "cuda", "--device", str(runs.resolve_device(args))] if gpu else []),
                          *(["--rounds", str(args.rounds)] if args.rounds > 1 else []),
                          *(["--peer-input-dropout", "none"] if args.peer_input_dropout == "none" else [])])
    if command == shlex.join(["morphgen", "bench-suite", "--epochs", "50", "--peers", "pyg,dgl"]):
        command = "make bench"
    (out / "suite.json").write_text(json.dumps({"graphs": [{"name": g.name, "model": r.get("suite_model"),
                                                            "stands_for": g.shape_of, "scale": g.scale,
                                                            "report": r} for g, r in rows],
                                                "geometric_mean_ratios": geometric_mean_ratios(rows, peers)},
                                               indent=2, default=str) + "\n")
    isa = machine.get("kernel_isa") if not gpu else None
    plots = suite_plots(rows, peers, out, GPU_PLOTS if gpu else for_isa(RELATIONAL_PLOTS, isa) if relational
                        else for_isa(MODELS_PLOTS, isa) if len(programs) > 1 else PLOTS)
    docs = Path(args.docs) if args.docs else None
    links = []
    if docs is not None:
        img_dir = docs.parent / "benchmarks"
        img_dir.mkdir(parents=True, exist_ok=True)
        for p in plots:
            shutil.copyfile(p, img_dir / p.name)
            links.append(f"benchmarks/{p.name}")
        text = docs.read_text() if docs.exists() else "# Benchmarks\n\n"
        docs.write_text(replace_between_markers(text, docs_section(args, programs, rows, peers, machine, links, command),
                                                marks(args.backend, len(programs) > 1, relational, isa)))
    (out / "suite.md").write_text("\n".join(suite_table(rows, peers, device=gpu)) + "\n")
    print(f"wrote {out / 'suite.json'}, {out / 'suite.md'}, plots" + (f", and refreshed {docs}" if docs else ""))
    morphgen_failed = any(r.get("error") or (_system(r, "morphgen") or {}).get("error") for _, r in rows)
    parity_failed = any(row.get("passed") is False for _, r in rows
                        for row in (r.get("parity") or {}).get("peers", {}).values())
    return 1 if morphgen_failed or parity_failed else 0

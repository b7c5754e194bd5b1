"""`morphgen bench-edge-layouts`: the edge typed layout the cost model picks against every fixed one.

A typed linear of node rows read at edge ends (R-GAT's ``x_src * W[etype]``, HGT's keys and
messages) has three layouts (passes/edge_typed_linear.py): ``gathered`` copies the rows to every
edge first (the unfused form), ``edge`` makes one product per edge from the rows in place,
``compact`` one per distinct (node, edge type) pair, copied to its edges (Hector's compact
materialisation). For every model and graph, morphgen trains once per fixed layout and once with
``auto``, each in its own process, in the manner of Hector's Table 5: the table shows each time,
what auto picked and how far it is from the best fixed choice. The first-epoch losses of the four
runs must agree (the layouts change the order of float sums only).
"""
from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from . import cli as bench_cli, harness
from .runs import resolve_cap, resolve_threads
from .suite_cli import replace_between_markers

LAYOUTS = ("gathered", "edge", "compact", "auto")
MARKS = ("<!-- bench-edge-layouts:begin -->", "<!-- bench-edge-layouts:end -->")
DEFAULT_MODELS = "examples/rgat.mp,examples/hgt.mp"
LOSS_TOLERANCE = 1e-4


@dataclass(frozen=True)
class LayoutGraph:
    name: str
    dataset: str
    shape_of: str


def _typed(etypes: int) -> LayoutGraph:
    return LayoutGraph(f"typed-{etypes}", f"synthetic:nodes=20000,edges=400000,features=128,classes=8,"
                                         f"etypes={etypes},seed=0",
                       f"synthetic: 20,000 nodes, 400,000 edges, 128 features, {etypes} edge types")


GRAPHS = (
    LayoutGraph("aifb", "aifb", "AIFB (real): 90 edge types, featureless"),
    LayoutGraph("mutag", "mutag", "MUTAG (real): 46 edge types, featureless"),
    LayoutGraph("acm_heco", "acm_heco", "ACM (real, HeCo): 4 edge types, 3,864 features"),
    _typed(10), _typed(100), _typed(500),
)


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("bench-edge-layouts",
                              help="time every layout of typed linears at edge ends against the cost model's pick",
                              description=__doc__.split("\n")[0])
    p.add_argument("--model", default=DEFAULT_MODELS, help=f"comma-separated programs (default {DEFAULT_MODELS})")
    p.add_argument("--only", default=None, help=f"comma-separated subset of: {', '.join(g.name for g in GRAPHS)}")
    p.add_argument("--data-dir", default=None,
                   help="where the real graphs are (default: $MORPHGEN_DATA, else ../shared/datasets)")
    p.add_argument("--epochs", type=int, default=20, help="epochs per run (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="epochs left out of the median (default 3)")
    p.add_argument("--rounds", type=int, default=1,
                   help="runs of every layout, interleaved; the table keeps each layout's fastest median "
                        "(default 1)")
    p.add_argument("--out", default="bench-out/edge-layouts", help="output directory (default bench-out/edge-layouts)")
    p.add_argument("--docs", default=None,
                   help="markdown file whose section (between its markers) to refresh (default: none)")
    bench_cli.add_run_options(p)
    p.set_defaults(handler=run)


def _graphs(only):
    if only is None:
        return list(GRAPHS)
    names = [n.strip() for n in only.split(",") if n.strip()]
    known = {g.name: g for g in GRAPHS}
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise harness.BenchError(f"--only: unknown graph(s) {', '.join(unknown) or '(none given)'}; "
                                 f"choose from {', '.join(known)}")
    return [known[n] for n in names]


def _models(text: str) -> list:
    models = [m.strip() for m in text.split(",") if m.strip()]
    missing = [m for m in models if not Path(m).is_file()]
    if not models or missing:
        raise harness.BenchError(f"--model: no such file: {', '.join(missing) or '(none given)'}")
    return models


def best_fixed(times: dict):
    """(layout, seconds) of the fastest fixed layout that ran, or (None, None)."""
    ran = {k: v for k, v in times.items() if k != "auto" and v is not None}
    if not ran:
        return None, None
    layout = min(ran, key=ran.get)
    return layout, ran[layout]


def _picked(entry: dict) -> str:
    layouts = (entry.get("config") or {}).get("edge_typed_layouts") or []
    return ", ".join(text.rsplit(" ", 1)[-1] for text in layouts) or "-"


def measure(args, model: str, graph: LayoutGraph, threads: int, out: Path) -> dict:
    from morphgen.pipeline import edge_type_pairs
    with harness.scratch_dir(out) as tmp:
        data = harness.prepare_dataset(graph.dataset, args.data_dir, tmp, keep=True, featureless_ok=True)
        pairs = edge_type_pairs(data.dataset.graph)
        runs = {}
        for _ in range(args.rounds):       # interleaved, so that a slow spell of the machine hits every layout
            for layout in LAYOUTS:
                entry = harness.run_morphgen(model, data.path, Path(tmp), epochs=args.epochs, warmup=args.warmup,
                                             seed=args.seed, threads=threads, cap_gib=resolve_cap(args),
                                             timeout_s=args.timeout, profile=False, tag=f"morphgen_{layout}",
                                             edge_typed_layout=layout)
                print(f"  {Path(model).stem} {graph.name} {layout:>8}: {_ms(entry)}", flush=True)
                runs[layout] = harness.faster_run(runs.get(layout), entry)
    losses = [r.get("first_epoch_loss") for r in runs.values() if r.get("first_epoch_loss") is not None]
    return {"model": model, "graph": graph.name, "shape_of": graph.shape_of, "pairs": pairs,
            "times": {k: r.get("epoch_time_s") for k, r in runs.items()},
            "peak_rss_bytes": {k: r.get("peak_rss_bytes") for k, r in runs.items()},
            "errors": {k: r.get("error") for k, r in runs.items() if r.get("error")},
            "picked": _picked(runs["auto"]),
            "loss_spread": max(losses) - min(losses) if len(losses) == len(LAYOUTS) else None}


def _ms(entry: dict) -> str:
    t = entry.get("epoch_time_s")
    return f"{t * 1e3:.1f} ms" if t else f"failed ({entry.get('error')})"


def markdown(rows: list, command: str, threads: int, machine: str, rounds: int = 1) -> str:
    kept = (f"the fastest of {rounds} interleaved runs' medians per layout" if rounds > 1
            else "one run per layout")
    lines = [f"Command: `{command}` ({threads} threads; median epoch after the warm-up, {kept}, each run in "
             f"its own process). Machine: {machine}.", "",
             "| graph | model | edges | distinct (node, type) pairs, src / dst | gathered ms | edge ms | compact ms "
             "| auto ms | auto picked | auto / best fixed | peak MiB gathered / auto | first-loss spread |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        t, p, mem = r["times"], r["pairs"], r["peak_rss_bytes"]
        layout, best = best_fixed(t)
        ratio = f"{t['auto'] / best:.2f} ({layout})" if best and t.get("auto") else "-"
        share = f"{p['src'] / p['edges']:.0%} / {p['dst'] / p['edges']:.0%}" if p["edges"] else "-"
        cells = [_cell(t[k]) for k in LAYOUTS]
        mib = " / ".join(f"{mem[k] / 2**20:.0f}" if mem.get(k) else "-" for k in ("gathered", "auto"))
        spread = f"{r['loss_spread']:.1e}" if r["loss_spread"] is not None else "-"
        lines.append(f"| {r['graph']} | {Path(r['model']).stem} | {p['edges']:,} | {share} | {' | '.join(cells)} "
                     f"| {r['picked']} | {ratio} | {mib} | {spread} |")
    failures = [(r, k, e) for r in rows for k, e in r["errors"].items()]
    if failures:
        lines += [""] + [f"- {Path(r['model']).stem} on {r['graph']}, {k}: {e}" for r, k, e in failures]
    return "\n".join(lines) + "\n"


def _cell(t):
    return f"{t * 1e3:.1f}" if t else "failed"


def run(args) -> int:
    bench_cli.check_common(args)
    if args.rounds < 1:
        raise harness.BenchError(f"--rounds: must be >= 1, got {args.rounds}")
    if args.epochs < 2 or not 0 <= args.warmup < args.epochs:
        raise harness.BenchError(f"--epochs/--warmup: need epochs >= 2 and 0 <= warmup < epochs, "
                                 f"got {args.epochs}/{args.warmup}")
    models, graphs = _models(args.model), _graphs(args.only)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    threads = resolve_threads(args)
    from .machine import describe_cpu
    rows = []
    for model in models:
        for graph in graphs:
            rows.append(measure(args, model, graph, threads, out))
    command = shlex.join(["morphgen", "bench-edge-layouts", "--model", args.model, "--epochs", str(args.epochs),
                          "--warmup", str(args.warmup), "--rounds", str(args.rounds), "--threads", str(threads)]
                         + (["--only", args.only] if args.only else []) + (["--docs", args.docs] if args.docs else []))
    text = markdown(rows, command, threads, describe_cpu(), args.rounds)
    (out / "edge_layouts.json").write_text(json.dumps(rows, indent=2) + "\n")
    (out / "edge_layouts.md").write_text(text)
    docs = Path(args.docs) if args.docs else None
    if docs is not None and not (docs.is_file() and MARKS[0] in docs.read_text(encoding="utf-8")):
        print(f"morphgen: {docs} has no {MARKS[0]} marker: left as it is", file=sys.stderr)
    elif docs is not None:
        docs.write_text(replace_between_markers(docs.read_text(encoding="utf-8"), text, MARKS), encoding="utf-8")
        print(f"refreshed {docs}")
    print(text)
    bad = [r for r in rows if r["errors"] or r["loss_spread"] is None or r["loss_spread"] > LOSS_TOLERANCE]
    return 1 if bad else 0

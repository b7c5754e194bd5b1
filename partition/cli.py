"""`morphgen partition DATASET --parts K [--strategy S] [--json OUT] [--out DIR]`.

Prints a table comparing every strategy and vertex-balanced METIS on the dataset; the chosen
strategy's result is the one written to --json (top-level fields) and saved with --out.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from morphgen import arg_types
from morphgen.errors import UserError
from morphgen.outputs import marked, write_atomically

from .compare import REFERENCE, evaluate
from .hierarchical import STRATEGIES
from .inputs import load_input_graph
from .io import is_partition_folder, part_file, save_partition
from .layout import build_layouts
from .table import render


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("partition", help="partition a graph for distributed training and report quality")
    p.add_argument("dataset", help="dataset name (in --data-dir or $MORPHGEN_DATA), .npz path, "
                                   "or rmat:NODES:EDGES[:SEED]")
    p.add_argument("--parts", type=int, required=True, help="number of parts K (one per rank)")
    p.add_argument("--strategy", choices=STRATEGIES, default="auto",
                   help="auto runs METIS -> components -> greedy; the others force one phase")
    p.add_argument("--json", dest="json_out", default=None, help="write the result and comparison as JSON here")
    p.add_argument("--out", default=None, help="save the chosen partition here (one file per part)")
    p.add_argument("--data-dir", default=None, help="where dataset names are looked up")
    p.add_argument("--symmetrize", action="store_true", help="add the missing reverse edges first")
    p.add_argument("--imbalance", type=float, default=1.03, help="edge-load constraint max/mean (default 1.03)")
    p.add_argument("--max-imbalance", type=float, default=1.10, help="how far it may be relaxed (default 1.10)")
    p.add_argument("--feature-width", type=int, default=128, help="F for halo bytes (default 128, fp32)")
    p.add_argument("--seed", type=arg_types.seed, default=0)
    p.add_argument("--no-compare", action="store_true", help="run only the chosen strategy")
    p.set_defaults(handler=run)
    return p


COLUMNS = ["strategy", "phase", "edge cut", "cut ratio", "ghosts", "halo MiB",
           "imb. edges", "imb. load", "imb. nodes", "seconds"]


def _table_row(row: dict) -> list:
    if "error" in row:
        return [row["strategy"], "failed", "-", "-", "-", "-", "-", "-", "-", "-"]
    return [row["strategy"], row["phase"], row["edge_cut"], row["cut_ratio"], row["ghost_nodes"],
            row["halo_bytes"] / 2**20, row["load_imbalance_edges"], row["load_imbalance_load"],
            row["load_imbalance_nodes"], row["seconds"]]


def run(args) -> int:
    try:
        return _run(args)
    except (UserError, ValueError) as exc:   # PartitionError, DataError, GraphError
        print(f"morphgen: error: {str(exc).removeprefix('morphgen: error: ')}", file=sys.stderr)
        return 2


def _check_outputs(args) -> None:
    """Before the work: a report or folder that would replace what morphgen did not write is refused."""
    from morphgen.data.resolve import dataset_file
    from morphgen.outputs import check_output_file, check_output_folder, is_report
    check_output_file("--json", args.json_out, is_report, "report",
                      [("the dataset", dataset_file(args.dataset, args.data_dir))])
    check_output_folder("--out", args.out, ["manifest.json"] + [part_file(k) for k in range(args.parts)],
                        is_partition_folder, "part files")


def _run(args) -> int:
    _check_outputs(args)
    graph = load_input_graph(args.dataset, data_dir=args.data_dir, symmetric=args.symmetrize)
    if args.parts > graph.num_nodes:
        raise UserError(f"--parts {args.parts} is more than the graph's {graph.num_nodes} nodes "
                        f"(every part needs a node)")
    options = dict(feature_width=args.feature_width, seed=args.seed,
                   imbalance=args.imbalance, max_imbalance=args.max_imbalance)
    chosen, assignment = evaluate(graph, args.parts, args.strategy, **options)
    if "error" in chosen:
        print(f"morphgen: error: {chosen['error']}", file=sys.stderr)
        return 2
    rows = [chosen]
    if not args.no_compare:
        for strategy in STRATEGIES + (REFERENCE,):
            if strategy != args.strategy:
                rows.append(evaluate(graph, args.parts, strategy, **options)[0])

    print(f"{args.dataset}: {graph.num_nodes} nodes, {graph.num_edges} edges, K = {args.parts}, "
          f"halo for F = {args.feature_width} fp32")
    print(render(COLUMNS, [_table_row(r) for r in rows]))
    print(f"chosen: {args.strategy} -> {chosen['phase']}: {chosen['reason']}")
    for row in rows[1:]:
        if "error" in row:
            print(f"note: {row['strategy']}: {row['error']}")

    if args.out:
        layouts = build_layouts(graph, assignment, args.parts)
        save_partition(layouts, args.out, meta={"dataset": args.dataset, "strategy": args.strategy,
                                                "phase": chosen["phase"], "seed": args.seed})
        print(f"saved {args.parts} parts to {args.out}")
    if args.json_out:
        document = dict(chosen, dataset=args.dataset, num_nodes=graph.num_nodes,
                        num_edges=graph.num_edges, comparison=rows)
        write_atomically(Path(args.json_out), json.dumps(marked(document), indent=2) + "\n")
    return 0

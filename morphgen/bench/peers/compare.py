"""Run several peers on one dataset and print epoch time and memory side by side.

    python -m morphgen.bench.peers.compare --data D.npz --spec SPEC.json [--peers pyg dgl] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from morphgen.errors import UserError

from . import PEERS
from .launcher import run_peer

MiB = 1 << 20


def format_row(r: dict) -> str:
    if r["error"] is not None:
        return f"{r['system']:<5} error: {r['error']}"
    return (f"{r['system']:<5} epoch {r['epoch_time_s'] * 1e3:9.2f} ms   peak RSS {r['peak_rss_bytes'] / MiB:8.1f} MiB"
            f"   baseline {r['baseline_rss_bytes'] / MiB:8.1f} MiB   loss {r['first_epoch_loss']:.4f} -> "
            f"{r['final_loss']:.4f}   test acc {r['test_acc']}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m morphgen.bench.peers.compare")
    ap.add_argument("--data", required=True)
    ap.add_argument("--spec", required=True)
    ap.add_argument("--peers", nargs="+", default=list(PEERS), choices=PEERS)
    ap.add_argument("--json", help="also write all results to this file")
    args = ap.parse_args(argv)
    try:
        results = [run_peer(p, args.data, args.spec) for p in args.peers]
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for r in results:
        print(format_row(r))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0 if all(r["error"] is None for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

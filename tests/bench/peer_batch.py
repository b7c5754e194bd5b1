"""Several peer runs in one process, for the parity fixture of test_peers.py.

`python -m tests.bench.peer_batch PEER JOBS.json` runs each job of JOBS.json (a list of
[data, spec, out] paths) through the peer's own entry point, as `python -m
morphgen.bench.peers.PEER --data D --spec S --out O` runs one: the same driver, the same result
file.  Most of a small run is importing torch, so a batch imports it once per peer instead of
once per job.  The jobs must share one thread count: the driver sets it before torch loads, and
torch reads it once.  Memory figures of a batch's runs are the process's, not each run's.
"""
import importlib
import json
import sys
from pathlib import Path


def main(argv: list) -> int:
    peer, jobs_path = argv
    jobs = json.loads(Path(jobs_path).read_text())
    threads = {json.loads(Path(spec).read_text()).get("threads", 1) for _, spec, _ in jobs}
    if len(threads) > 1:
        print(f"error: a batch runs at one thread count, the specs ask for {sorted(threads)}", file=sys.stderr)
        return 2
    runner = importlib.import_module(f"morphgen.bench.peers.{peer}")
    for data, spec, out in jobs:
        runner.main(["--data", data, "--spec", spec, "--out", out])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

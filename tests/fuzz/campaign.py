"""A long differential-testing campaign over generated programs.

    python -m tests.fuzz.campaign --start 0 --programs 2000 --jobs 2 [--variants plain passes ...]

Each program runs the variants of `variants_for` (or those given) in a worker process; a
mismatch or error prints the program's seed, variant, message and source.  A program whose
oracle loss leaves float32's range (`WildProgram`) is counted apart as wild: inconclusive, not
failed.  The exit status is 1 when anything failed.  Results of the campaigns run so far are in
docs/testing.md.
"""
from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
import traceback


def _run(job):
    seed, variants = job
    from tests.fuzz.differential import WildProgram, check, variants_for
    from tests.fuzz.generator import generate
    fp = generate(seed)
    failures, wild = [], []
    for variant in variants or variants_for(fp):
        try:
            check(fp, variant)
        except WildProgram as exc:
            wild.append((variant, str(exc)))
        except Exception as exc:       # report every kind of failure, keep going
            message = str(exc) if isinstance(exc, AssertionError) else traceback.format_exc(limit=3)
            failures.append((variant, f"{type(exc).__name__}: {message}"))
    return seed, fp.style, failures, wild, fp.source


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--programs", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--variants", nargs="*", default=None)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    seeds = range(args.start, args.start + args.programs)
    failed, wild_seeds, styles = 0, set(), {}
    with multiprocessing.Pool(args.jobs) as pool:
        for done, (seed, style, failures, wild, source) in enumerate(
                pool.imap_unordered(_run, [(s, args.variants) for s in seeds]), 1):
            styles[style] = styles.get(style, 0) + 1
            for variant, message in failures:
                failed += 1
                print(f"--- seed {seed} [{variant}] {message}\n{source}", flush=True)
            for variant, message in wild:
                wild_seeds.add(seed)
                print(f"--- seed {seed} [{variant}] wild, inconclusive: {message}", flush=True)
            if done % 50 == 0:
                print(f"{done}/{args.programs} programs, {failed} failures, {len(wild_seeds)} wild, "
                      f"{time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    print(f"{args.programs} programs (seeds {args.start}..{args.start + args.programs - 1}; "
          f"{', '.join(f'{n} {k}' for k, n in sorted(styles.items()))}): {failed} failures, "
          f"{len(wild_seeds)} wild {sorted(wild_seeds)} in {time.perf_counter() - t0:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Generated programs trained by the MPI backend against one process.

    python -m tests.fuzz.mpi_campaign --start 0 --programs 100 [--ranks 2 3] [--epochs 3]

Each generated program (tests/fuzz/generator.py) trains with `morphgen train --backend openmp`
and with `--backend mpi` at each rank count, one thread per process, on a small synthetic graph
(typed when the program reads edge or node types; sparse features for every other seed, so both
feature paths run): every epoch's loss must agree to 1e-5 and the accuracies exactly, as in
tests/mpi/test_mpi_parity.py.  A program the MPI backend refuses with a located error counts as
refused, not failed, one whose model starts dead as tied (`uniform_predictions`), and one whose
loss blows up to NaN at the same epoch in one process and on every rank count as diverged (a
wild program of the generator, `diverges_alike`).  The
exit status is 1 when anything failed.  Builds are unoptimised
($MORPHGEN_OPT_LEVEL=0): the lowering is under test, not the compiler.  Results of the campaigns
run so far are in docs/testing.md.
"""
from __future__ import annotations

import argparse
import math
import os
import re
import sys
import tempfile
import time
from pathlib import Path

RTOL = 1e-5
REFUSED = "the mpi backend does not support"


def dataset_for(fp, directory: Path) -> str:
    """A graph of 120 nodes: typed (features, or none when the program reads them only through
    weights) for typed programs, else the synthetic generator's, sparse for odd seeds."""
    if fp.typed:
        from morphgen.data.npz import save_npz
        from tests.e2e.support import typed_dataset
        features = None if fp.features_only_through_weights and fp.seed % 2 else 7
        return str(save_npz(typed_dataset(features=features, nodes=120, edges=600, weighted=fp.weighted),
                            directory / "typed.npz"))
    sparsity = 0.7 if fp.seed % 2 else 0.0
    return (f"synthetic:nodes=120,edges=700,features=6,classes=3,train_per_class=12,val=30,test=40,"
            f"sparsity={sparsity},seed={fp.seed % 7}{',weighted=1' if fp.weighted else ''}")


def uniform_predictions(reference: dict) -> bool:
    """Whether one process's model starts dead: its first epoch's loss is ln(C) for some class
    count C, the logits equal for every class at initialisation (every activation before the
    last layer died, so the logits are its bias).  Such a network trains only on exact
    cancellations: gradients that are exact zeros where terms cancel (a bias's, over balanced
    classes).  The ranks' sums of those terms round to 1e-11 instead, which breaks the tied
    predictions either way, which Adam, dividing by the gradient's own size, turns into a full
    step of the learning rate, and which an activation's kink at 0 (leaky_relu's slope 1 or
    0.01 for a pre-activation of +1e-11 or exactly 0) turns into a gradient 100 times another
    (seed 1639).  So only its first epoch, before any step, must agree."""
    first = reference["history"][0]["loss"]
    return any(abs(first - math.log(c)) < 1e-6 for c in range(2, 65))


def same_first_epoch(reference: dict, run: dict) -> bool:
    first, expected = run["history"][0]["loss"], reference["history"][0]["loss"]
    return abs(first - expected) <= RTOL * expected


def diverged_at(message: str):
    """The epoch whose loss became NaN or infinite, from a failed run's message, or None."""
    found = re.search(r"the loss became \S+ at epoch (\d+)", message)
    return int(found.group(1)) if found else None


def diverges_alike(tmp_path: Path, program: Path, data: str, epochs: int, ranks: tuple, epoch: int) -> tuple:
    """A wild program (the generator's: products of products under SGD) whose one-process loss
    blew up at `epoch`: ('diverged', ...) when every rank count blows up at the same epoch."""
    from tests.mpi.support import train
    for n in ranks:
        try:
            train(tmp_path, program, data, backend="mpi", ranks=n, epochs=epochs)
        except AssertionError as exc:
            if diverged_at(str(exc)) == epoch:
                continue
            return "failed", f"one process diverged at epoch {epoch}; {n} ranks: {str(exc)[-1500:]}"
        return "failed", f"one process diverged at epoch {epoch}; {n} ranks trained on"
    return "diverged", f"the loss became NaN or infinite at epoch {epoch} in one process and on every rank count"


def check(seed: int, ranks: tuple, epochs: int) -> tuple:
    """('ok' | 'refused' | 'tied' | 'diverged' | 'failed', message, source) for one generated program."""
    from tests.fuzz.generator import generate
    from tests.mpi.support import assert_same_run, train
    fp = generate(seed)
    with tempfile.TemporaryDirectory(prefix=f"mpi-fuzz-{seed}-") as tmp:
        tmp_path = Path(tmp)
        program = tmp_path / f"{fp.name}.mp"
        program.write_text(fp.source)
        data = dataset_for(fp, tmp_path)
        reference = run = None
        try:
            reference = train(tmp_path, program, data, epochs=epochs)
            for n in ranks:
                run = None
                run = train(tmp_path, program, data, backend="mpi", ranks=n, epochs=epochs)
                assert run["feature_path"] == reference["feature_path"], \
                    f"feature path {run['feature_path']} != {reference['feature_path']}"
                assert_same_run(reference, run, RTOL, f"seed {seed} on {n} ranks")
        except AssertionError as exc:
            blew_up = diverged_at(str(exc)) if reference is None else None
            if blew_up is not None:
                return (*diverges_alike(tmp_path, program, data, epochs, ranks, blew_up), fp.source)
            if REFUSED in str(exc):
                line = next(x for x in str(exc).splitlines() if REFUSED in x)
                return "refused", line.strip(), fp.source
            if run is not None and uniform_predictions(reference) and same_first_epoch(reference, run):
                return "tied", str(exc).strip(), fp.source
            return "failed", str(exc)[-2000:], fp.source
    return "ok", "", fp.source


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--programs", type=int, default=100)
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 3])
    ap.add_argument("--epochs", type=int, default=3)
    args = ap.parse_args(argv)
    os.environ.setdefault("MORPHGEN_OPT_LEVEL", "0")
    t0 = time.perf_counter()
    counts = {"ok": 0, "refused": 0, "tied": 0, "diverged": 0, "failed": 0}
    for done, seed in enumerate(range(args.start, args.start + args.programs), 1):
        verdict, message, source = check(seed, tuple(args.ranks), args.epochs)
        counts[verdict] += 1
        if verdict != "ok":
            print(f"--- seed {seed}: {verdict}: {message}", flush=True)
            if verdict == "failed":
                print(source, flush=True)
        if done % 10 == 0:
            print(f"{done}/{args.programs} programs, {counts}, {time.perf_counter() - t0:.0f} s",
                  file=sys.stderr, flush=True)
    print(f"{args.programs} programs (seeds {args.start}..{args.start + args.programs - 1}, ranks "
          f"{' '.join(map(str, args.ranks))}): {counts['ok']} agree, {counts['refused']} refused, "
          f"{counts['tied']} with tied predictions, {counts['diverged']} diverged alike, {counts['failed']} failed in "
          f"{time.perf_counter() - t0:.0f} s")
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())

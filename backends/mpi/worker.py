"""One MPI rank of `morphgen train --backend mpi`: run by mpiexec as
``python -m morphgen.backends.mpi.worker RUN.json``.

Each rank reads only its own part file, binds it to the library the launcher built (handing
over the communicator as mpi4py's Fortran handle), and trains in lockstep with the others: every
epoch's loss and every evaluation are collective, so all ranks see the same numbers.  Rank 0
prints progress and writes the JSON report, with per-rank figures gathered from all ranks.

A rank that fails prints ``morphgen: rank R: <message>`` and aborts the whole job, so no rank
is left waiting in a collective.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from morphgen.stop_signals import STOPPED_EXIT_STATUS, stop_on_signals

import numpy as np


def _session(spec: dict, part, comm):
    from morphgen.layout import GraphLayout
    from morphgen.library import PARTITION_ARRAYS, Session
    layout = GraphLayout.from_csr(part["indptr"], part["col"], part.get("etype"), part.get("ntype"),
                                  int(part["num_etypes"]), int(part["num_ntypes"]),
                                  edge_weight=part.get("edge_weight"))
    partition = {"comm": comm.py2f(), "num_owned": int(part["num_owned"]),
                 "global_nodes": int(part["num_global_nodes"]),
                 **{k: part[k] for k in PARTITION_ARRAYS}}
    link = spec.get("link") is not None      # a link predictor has triples, no labels or masks
    masks = None if link else (part["train_mask"], part["val_mask"], part["test_mask"])
    session = Session(spec["library"], layout, part.features(), part.get("labels"), masks, spec["sizes"],
                      spec["threads"], spec["seed"], donate_features=True, partition=partition)
    with np.load(spec["init_params"], allow_pickle=False) as z:
        session.set_params({k: z[k] for k in z.files})
    return session


def _timer(session, name: str) -> dict:
    return next((t for t in session.timers() if t["kernel"] == name), {"seconds": 0.0, "bytes": 0.0})


def _blocking_allreduce_seconds(session, comm, reps: int = 3) -> float:
    """What one epoch's gradient all-reduces cost when nothing overlaps them: every weight's
    gradient summed across ranks by a blocking MPI_Allreduce of the size the epoch reduced (a
    table's: the rows written on some rank), best of ``reps``."""
    from mpi4py import MPI
    buffers = [np.ones(n, np.float32) for n in session.reduced_floats() if n > 0]
    best = float("inf")
    for _ in range(reps):
        comm.Barrier()
        t0 = time.perf_counter()
        for b in buffers:
            comm.Allreduce(MPI.IN_PLACE, b, op=MPI.SUM)
        best = min(best, time.perf_counter() - t0)
    return best


def _rank_figures(session, part, times: list, train_halo_bytes: float, allreduce_s: float) -> dict:
    from morphgen.commands import median_epoch_s
    epochs = max(1, len(times))      # the epochs trained (early stopping may end a run before its count)
    timers = {t["kernel"]: t for t in session.timers()}
    halo, wait, exposed = timers["halo"], timers["allreduce_wait"], timers["allreduce_exposed"]
    return {"owned": int(part["num_owned"]), "ghosts": part.num_local - int(part["num_owned"]),
            "halo_rows_sent": int(part["send_ptr"][-1]), "edges": int(part["col"].shape[0]),
            "median_epoch_s": median_epoch_s(times),
            "halo_bytes_per_epoch": train_halo_bytes / epochs,      # training epochs only
            "halo_s_per_epoch": halo["seconds"] / epochs,          # evaluations' exchanges included
            "allreduce_wait_s_per_epoch": wait["seconds"] / epochs,          # skew included
            "allreduce_exposed_s_per_epoch": exposed["seconds"] / epochs,    # after every rank had posted
            "allreduce_s_per_epoch": allreduce_s,       # the same reductions, blocking, nothing overlapped
            "allreduce_floats_per_epoch": sum(n for n in session.reduced_floats() if n > 0),
            "allocated_bytes": session.allocated_bytes()}


def allreduce_hidden(per_rank: list) -> float:
    """The share of the gradient all-reduce that the pipelined backward hides: 1 - exposed /
    blocking, where exposed is the wait after every rank had posted its gradient (the wait
    before that is skew between ranks, not communication; distributed.h, GradientReduce).  The
    rank with the least exposure posted last and runs the critical path."""
    blocking = float(np.mean([r["allreduce_s_per_epoch"] for r in per_rank]))
    if blocking <= 0:
        return 1.0
    return max(0.0, 1.0 - min(r["allreduce_exposed_s_per_epoch"] for r in per_rank) / blocking)


def _set_epoch_triples(session, part, spec: dict) -> None:
    """The epoch's training triples and fresh negatives, drawn on every rank alike (global ids,
    keyed by the library's epoch as in one process)."""
    from morphgen.negative_sampling import epoch_triples
    session.set_triples(epoch_triples(part["train_triples"], int(part["num_global_nodes"]),
                                      spec["link"]["negatives"], spec["seed"], session.epoch()))


def _node_rows(session, part, comm, width: int):
    """Every node's row of the model's output (logits, or a link predictor's embeddings) on rank
    0, in the dataset's node order, gathered from their owners; None on the other ranks.
    Collective: every rank runs the forward."""
    owned = int(part["num_owned"])
    local = session.predict(part.num_local, width)[:owned]
    pieces = comm.gather((part["node_gid"][:owned], local), root=0)
    if comm.Get_rank() != 0:
        return None
    rows = np.empty((int(part["num_global_nodes"]), width), np.float32)
    for gid, piece in pieces:
        rows[gid] = piece
    return rows


def _link_results(session, part, comm, link: dict):
    """(metrics, the embeddings, the relation rows): filtered MRR and Hits@k of the held-out
    triples (morphgen/link_eval.py), ranked on rank 0 against the embeddings of every node;
    (None, None, None) on the other ranks.  Collective."""
    from morphgen.data.link import SPLITS
    from morphgen.link_eval import held_out_metrics
    loss = session.evaluate()["loss"]
    z = _node_rows(session, part, comm, link["width"])
    params = session.get_params()       # collective: ranks may hold shares of a table (TableRows)
    if comm.Get_rank() != 0:
        return None, None, None
    rel = params[link["relation_weight"]].reshape(-1, z.shape[1])
    metrics = held_out_metrics(z, rel, {split: part[f"{split}_triples"] for split in SPLITS})
    return {"loss": loss, **metrics}, z, rel


def _final_results(session, part, comm, spec: dict, write_predictions: bool):
    """The final metrics, and the predictions file's arrays (morphgen/predictions.py) on rank 0
    when the run writes one, else None.  Collective."""
    from morphgen import predictions
    link = spec.get("link")
    if link:
        final, z, rel = _link_results(session, part, comm, link)
        return final, (predictions.link_arrays(z, rel) if write_predictions and z is not None else None)
    final = session.evaluate()
    if not write_predictions:
        return final, None
    logits = _node_rows(session, part, comm, spec["predictions"]["width"])
    return final, (predictions.classification_arrays(logits) if logits is not None else None)


def _progress_thread_setting(comm, threads: int) -> None:
    """The progress thread (distributed.h) needs a core of its own to poll on: when this node's
    ranks and their threads already take every core it has, it only competes with the
    computation for them, so it is turned off unless $MORPHGEN_MPI_POLL_US says otherwise.  On a
    full node each step of a reduction or a halo then waits for the scheduler to give a peer's
    thread its turn: with 2 ranks x 1 thread on 2 cores, small epochs were several times longer
    with the thread (docs/benchmarks.md, "The MPI progress thread on a full node")."""
    import os
    from mpi4py import MPI
    from morphgen.resources import usable_cores
    if "MORPHGEN_MPI_POLL_US" in os.environ:
        return
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    ranks_here = node.Get_size()
    node.Free()
    if ranks_here * threads >= usable_cores():
        os.environ["MORPHGEN_MPI_POLL_US"] = "0"


def _stop_agreed(comm, stop) -> bool:
    """Whether any rank was asked to stop: all ranks stop after the same epoch, whichever got the
    signal first (collective)."""
    from mpi4py import MPI
    return comm.allreduce(stop(), op=MPI.LOR)


def run(spec: dict, comm, stop=None) -> int:
    from morphgen.backends.mpi.parts import load_part
    from morphgen.commands import (PREDICTIONS_AFTER_STOP, Progress, final_line, last_training_loss, print_profile,
                                   write_atomically)
    from morphgen.early_stopping import TrainingRecord
    from morphgen.outputs import marked
    rank, size = comm.Get_rank(), comm.Get_size()
    if size != spec["ranks"]:
        raise RuntimeError(f"started with {size} ranks, the run was prepared for {spec['ranks']}")
    _progress_thread_setting(comm, spec["threads"])
    part = load_part(Path(spec["parts_dir"]), rank, size)
    session = _session(spec, part, comm)
    record = TrainingRecord(session, spec.get("early_stopping"))
    if spec.get("resume"):
        record.load_checkpoint(spec["resume"])
    epochs, eval_every = spec["epochs"], spec["eval_every"]
    if record.stopper:
        eval_every = 1          # it selects by the validation accuracy of every epoch
    progress = Progress(quiet=spec["quiet"] or rank != 0)
    session.reset_timers()
    history, times, train_halo_bytes = [], [], 0.0
    link = spec.get("link")
    every = spec.get("checkpoint_every")      # --checkpoint-every: also saved after every `every` epochs
    stopped = False
    for epoch in range(1, epochs + 1):
        if record.should_stop():        # resumed from a run that had stopped
            break
        before = _timer(session, "halo")["bytes"]
        t0 = time.perf_counter()
        if link:
            _set_epoch_triples(session, part, spec)
        loss = session.train_epoch()       # collective: the same global loss on every rank
        times.append(time.perf_counter() - t0)
        train_halo_bytes += _timer(session, "halo")["bytes"] - before
        row = {"epoch": epoch, "loss": loss, "epoch_time_s": times[-1]}
        if not np.isfinite(loss):
            if rank == 0:
                print(f"morphgen: error: the loss became {loss} at epoch {epoch}", file=sys.stderr)
            return 1
        if not link and (epoch == epochs or epoch % eval_every == 0):   # links: ranked at the end only
            row.update(session.evaluate())
            row["loss"] = loss
        history.append(row)
        progress(row, epochs)
        if record.observe(row.get("val_acc", 0.0)):      # the same global accuracy on every rank
            break
        if stop is not None and epoch < epochs and _stop_agreed(comm, stop):
            stopped = True
            break
        if every and epoch % every == 0 and epoch < epochs:
            record.save_checkpoint(spec["checkpoint"])   # after observe, as fit() does; every rank calls it
    record.keep_best()
    allreduce_s = _blocking_allreduce_seconds(session, comm) if size > 1 else 0.0
    figures = _rank_figures(session, part, times, train_halo_bytes, allreduce_s)
    if spec.get("profile"):
        figures["profile"] = session.timers()      # every rank's kernels; rank 0's are printed
    # a run stopped on the way (SIGTERM, ...) writes no predictions: its resumed end will
    write_predictions = bool(spec.get("predictions")) and not stopped
    final, predicted = _final_results(session, part, comm, spec, write_predictions)
    if record.stopper:
        final.update(best_epoch=record.stopper.best_epoch, epochs_run=len(history))
    if spec.get("checkpoint"):
        record.save_checkpoint(spec["checkpoint"])      # rank 0 writes, the others wait for it
    per_rank = comm.gather(figures, root=0)
    status = STOPPED_EXIT_STATUS if stopped else 0
    if rank != 0:
        return status
    if stopped:      # the signal the launcher got (SIGTERM, ...), not the SIGUSR1 it passed on
        stop.signal_name = _launcher_signal(spec) or stop.signal_name
    print(final_line(final, history, times, f" ({size} ranks x {spec['threads']} threads)"))
    if spec.get("profile"):
        print("rank 0:")
        print_profile(per_rank[0]["profile"])
    hidden = allreduce_hidden(per_rank)
    slowest = max(r["median_epoch_s"] for r in per_rank)
    mean = sum(r["median_epoch_s"] for r in per_rank) / size
    print(f"morphgen: per rank: halo {sum(r['halo_bytes_per_epoch'] for r in per_rank) / 1e6:.3f} MB/epoch in "
          f"total, slowest/mean rank {slowest / mean if mean else 1.0:.2f}, all-reduce wait "
          f"{max(r['allreduce_wait_s_per_epoch'] for r in per_rank) * 1e3:.2f} ms/epoch at most (skew included); "
          f"{hidden:.0%} of the all-reduce hidden (it takes "
          f"{np.mean([r['allreduce_s_per_epoch'] for r in per_rank]) * 1e3:.3f} ms/epoch blocking)", file=sys.stderr)
    if stopped:
        print(stop.message(len(history), epochs, spec["checkpoint"]), file=sys.stderr)
        if spec.get("predictions"):
            print(PREDICTIONS_AFTER_STOP, file=sys.stderr)
    elif spec.get("checkpoint"):
        print(f"morphgen: checkpoint written to {spec['checkpoint']}", file=sys.stderr)
    if predicted is not None:
        from morphgen import predictions
        predictions.write(spec["predictions"]["path"], predicted)
        print(f"morphgen: predictions written to {spec['predictions']['path']} ({predictions.summary(predicted)})",
              file=sys.stderr)
    if spec.get("json_out"):
        report = dict(spec["report"], epochs=epochs, threads=spec["threads"], ranks=size,
                      **{k: v for k, v in final.items() if k != "loss"}, final_loss=last_training_loss(history, final),
                      epoch_times_s=times, history=history, per_rank=per_rank, allreduce_hidden=hidden)
        if stopped:
            report["stopped_by"] = stop.signal_name
        if predicted is not None:
            report["predictions"] = spec["predictions"]["path"]
        if spec.get("profile"):
            report["profile"] = per_rank[0]["profile"]
        write_atomically(Path(spec["json_out"]), json.dumps(marked(report), indent=2) + "\n")
    return status


def _launcher_signal(spec: dict):
    """The name of the signal that made the launcher stop the ranks, when it wrote one."""
    try:
        name = Path(spec["stop_signal_file"]).read_text().strip()
    except (KeyError, OSError):
        return None
    return name or None


def _error_file(run_dir: Path, rank: int) -> Path:
    return run_dir / f"rank-{rank}.error"


def _leave_message(run_dir: Path, rank: int, text: str) -> None:
    """The message also goes beside the run's spec, for the launcher: MPI_Abort can end mpiexec
    before it has forwarded what the rank printed."""
    try:
        _error_file(run_dir, rank).write_text(text)
    except OSError:
        pass        # the printed message is all there is


def rank_messages(run_dir: Path, ranks: int) -> list:
    """The messages that failing ranks left in ``run_dir`` (_leave_message), in rank order."""
    return [path.read_text() for path in (_error_file(run_dir, r) for r in range(ranks)) if path.is_file()]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        spec = _read_spec(argv)
    except (OSError, ValueError, IndexError):
        spec = None             # read again where its error ends the job
    saves = bool(spec and spec.get("checkpoint"))
    # First, before MPI starts: the launcher passes SIGTERM and SIGUSR1 on as SIGUSR1, whose
    # default would end a rank that has no handler yet.
    with stop_on_signals(enabled=saves) as stop:
        return _main(spec, argv, stop if saves else None)


def _read_spec(argv: list) -> dict:
    return json.loads(Path(argv[0]).read_text())


def _main(spec, argv: list, stop) -> int:
    from mpi4py import MPI
    from morphgen.errors import UserError
    comm = MPI.COMM_WORLD
    try:
        code = run(spec if spec is not None else _read_spec(argv), comm, stop)
    except BaseException as err:       # noqa: BLE001 - every failure must end the whole job
        if isinstance(err, KeyboardInterrupt):
            text = "interrupted"
        else:
            text = str(err) if isinstance(err, UserError) else f"internal error: {type(err).__name__}: {err}"
        text = f"rank {comm.Get_rank()}: " + text.removeprefix("morphgen: ")
        print(f"morphgen: {text}", file=sys.stderr, flush=True)
        if argv:
            _leave_message(Path(argv[0]).parent, comm.Get_rank(), text)
        comm.Abort(2 if isinstance(err, UserError) else 3)
        return 3
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())

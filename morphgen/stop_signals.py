"""Stopping a run cleanly when the scheduler says its time is up.

SLURM warns a job before its time limit with a signal (`sbatch --signal=B:USR1@120`, which the
scripts of `morphgen slurm` ask for), and ends it with SIGTERM, then SIGKILL.  A run that saves
checkpoints (`--checkpoint`) takes SIGTERM and SIGUSR1 as a request to stop: it finishes the
epoch under way, saves its checkpoint and exits with STOPPED_EXIT_STATUS, so that the job (or
its requeued self) resumes from there.  The handler only records the request: an epoch is never
cut short, and a second signal asks for nothing more.  Without a checkpoint there is nothing to
save, and the signals keep their default meaning (the process ends at once).
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

# `morphgen train`'s exit status for a run stopped by one of STOP_SIGNALS after saving its
# checkpoint (0, 1, 2, 3: morphgen/cli.py).  The sbatch scripts requeue the job on it.
STOPPED_EXIT_STATUS = 4
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class StopRequest:
    """Callable: whether a stop was requested; `signal_name` says by which signal."""

    def __init__(self):
        self.signal_name = None

    def __call__(self) -> bool:
        return self.signal_name is not None

    def request(self, signum: int) -> None:
        if self.signal_name is None:
            self.signal_name = signal.Signals(signum).name

    def message(self, epoch: int, total: int, checkpoint) -> str:
        return (f"morphgen: {self.signal_name}: stopped after epoch {epoch} of this run's {total} and saved "
                f"{checkpoint}; resume with --resume {checkpoint} (exit status {STOPPED_EXIT_STATUS})")


@contextmanager
def stop_on_signals(enabled: bool = True, forward=None):
    """Within the block, STOP_SIGNALS set the yielded StopRequest instead of ending the process;
    `forward(signum)`, when given, is called as well (the MPI launcher passes the request on to
    its ranks).  The previous handlers come back at the end.  Disabled (no checkpoint to save),
    or outside the main thread, where Python cannot set handlers, nothing changes."""
    stop = StopRequest()
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handler(signum, _frame):
        stop.request(signum)
        if forward is not None:
            forward(signum)

    previous = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield stop
    finally:
        for s, h in previous.items():
            signal.signal(s, h)

"""A real single-node SLURM cluster for tests: munged, slurmctld and slurmd, all private.

Everything the daemons write (configuration, munge key and socket, state, spool, pid and log
files) lives in one fresh directory under /tmp, and both SLURM ports are picked free, so the
cluster neither needs nor disturbs a system-wide SLURM or munge set-up and two clusters can run
side by side.  The daemons run in the foreground as children of the test process, so stopping
them is a terminate-and-wait on processes we own.

Requirements (installed by `make slurm-deps`): Debian's `slurm-wlm` and `munge`, and root, since
slurmd starts jobs and this configuration runs everything as SlurmUser=root.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

TOOLS = ("munged", "mungekey", "slurmctld", "slurmd", "sinfo", "sbatch", "scontrol", "scancel")


class ClusterError(RuntimeError):
    """The cluster could not be started; the message says why (and quotes the logs)."""


def _find(tool: str) -> str | None:
    # Debian installs the daemons in /usr/sbin, which is not always on a test runner's PATH.
    return shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/sbin:/usr/bin")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"({path} not written)"
    return f"last lines of {path}:\n" + "\n".join(text[-lines:])


class Cluster:
    """Start with `start()` (raises ClusterError), stop with `stop()`; `env` is what SLURM's
    client commands (sbatch, squeue, ...) need to find this cluster."""

    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root else Path(tempfile.mkdtemp(prefix="mg-slurm-"))
        self.node = socket.gethostname().split(".")[0]
        self.conf = self.root / "slurm.conf"
        self.munge_socket = self.root / "munge.sock"
        self._procs: list[tuple[str, subprocess.Popen, Path]] = []
        self.tools: dict[str, str] = {}
        self.error: str | None = None     # set by a caller that keeps a start failure for later

    @property
    def env(self) -> dict:
        return dict(os.environ, SLURM_CONF=str(self.conf))

    # -- start -------------------------------------------------------------------------------

    def start(self, timeout_s: float = 60.0) -> "Cluster":
        missing = [t for t in TOOLS if _find(t) is None]
        if missing:
            raise ClusterError(f"SLURM/munge tools not found: {', '.join(missing)} "
                               f"(install them with `make slurm-deps`: apt-get install slurm-wlm munge)")
        self.tools = {t: _find(t) for t in TOOLS}
        if os.geteuid() != 0:
            raise ClusterError("the test SLURM cluster runs its daemons as root (SlurmUser=root, "
                               "slurmd starts jobs); run the tests as root")
        try:
            self._start_munge()
            self._write_conf()
            self._spawn("slurmctld", [self.tools["slurmctld"], "-D", "-f", str(self.conf)],
                        self.root / "slurmctld.log")
            self._spawn("slurmd", [self.tools["slurmd"], "-D", "-f", str(self.conf), "-N", self.node],
                        self.root / "slurmd.log")
            self._wait_idle(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_munge(self) -> None:
        # munged insists on a private key (0600) and on a socket directory others can traverse.
        os.chmod(self.root, 0o711)
        key = self.root / "munge.key"
        self._run([self.tools["mungekey"], "--create", "--keyfile", str(key)], "mungekey")
        log = self.root / "munged.log"
        self._spawn("munged", [self.tools["munged"], "--foreground", "--force",
                               f"--socket={self.munge_socket}", f"--key-file={key}",
                               f"--log-file={log}", f"--pid-file={self.root / 'munged.pid'}",
                               f"--seed-file={self.root / 'munged.seed'}"], log)
        deadline = time.monotonic() + 15
        while not self.munge_socket.exists():
            self._check_alive()
            if time.monotonic() > deadline:
                raise ClusterError(f"munged did not create its socket in 15 s; {_tail(log)}")
            time.sleep(0.1)

    def _write_conf(self) -> None:
        r = self.root
        for sub in ("state", "spool"):
            (r / sub).mkdir(exist_ok=True)
        # At least 2 CPUs, so a 2-rank job fits on a 1-core runner too; config_overrides lets
        # slurmd accept a count above the hardware's instead of draining the node.
        cpus = max(2, os.cpu_count() or 1)
        self.conf.write_text("\n".join([
            "ClusterName=morphgen-test",
            f"SlurmctldHost={self.node}(127.0.0.1)",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            # no cgroups in a container: track processes by their parent, bind nothing
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/builtin",
            "MpiDefault=none",
            "SwitchType=switch/none",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
            "ReturnToService=2",
            "SlurmdParameters=config_overrides",
            # keep finished jobs visible to scontrol for the test's checks
            "MinJobAge=600",
            f"StateSaveLocation={r / 'state'}",
            f"SlurmdSpoolDir={r / 'spool'}",
            f"SlurmctldPidFile={r / 'slurmctld.pid'}",
            f"SlurmdPidFile={r / 'slurmd.pid'}",
            f"SlurmctldLogFile={r / 'slurmctld.log'}",
            f"SlurmdLogFile={r / 'slurmd.log'}",
            f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1000 State=UNKNOWN",
            f"PartitionName=debug Nodes={self.node} Default=YES MaxTime=INFINITE State=UP",
            "",
        ]))

    def _wait_idle(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        state = ""
        while time.monotonic() < deadline:
            self._check_alive()
            try:   # sinfo retries a silent slurmctld for MessageTimeout; do not hang on it
                out = subprocess.run([self.tools["sinfo"], "-h", "-N", "-o", "%T"], env=self.env,
                                     capture_output=True, text=True, timeout=30)
            except subprocess.TimeoutExpired:
                continue
            state = (out.stdout or out.stderr).strip()
            if out.returncode == 0 and state == "idle":
                return
            time.sleep(0.5)
        raise ClusterError(f"node {self.node} not idle after {timeout_s:.0f} s (sinfo says {state!r}); "
                           f"{_tail(self.root / 'slurmctld.log')}\n{_tail(self.root / 'slurmd.log')}")

    def _spawn(self, name: str, argv: list[str], log: Path) -> None:
        out = open(self.root / f"{name}.stdout", "wb")
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=self.env)
        out.close()
        self._procs.append((name, proc, log))

    def _check_alive(self) -> None:
        for name, proc, log in self._procs:
            if proc.poll() is not None:
                raise ClusterError(f"{name} exited with status {proc.returncode} while starting; "
                                   f"{_tail(log)}\n{_tail(self.root / f'{name}.stdout')}")

    def _run(self, argv: list[str], name: str) -> None:
        out = subprocess.run(argv, capture_output=True, text=True, env=self.env)
        if out.returncode != 0:
            raise ClusterError(f"{name} failed ({out.returncode}): {out.stderr.strip()}")

    # -- stop --------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop the daemons this object started, slurmd first (it may still own job steps)."""
        for name, proc, _ in reversed(self._procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self._procs.clear()

    # -- jobs --------------------------------------------------------------------------------

    def submit_and_wait(self, script: Path, cwd: Path, timeout_s: float = 300.0) -> tuple[str, str]:
        """Submit `script` from `cwd` and wait for it to end. Returns (job id, final state);
        raises ClusterError on a submission failure or a timeout (the job is cancelled then)."""
        job = self.submit(script, cwd)
        return job, self.wait(job, timeout_s)

    def submit(self, script: Path, cwd: Path) -> str:
        """Submit `script` from `cwd`; its job id (ClusterError when sbatch refuses it)."""
        out = subprocess.run([self.tools["sbatch"], "--parsable", str(script)], cwd=cwd, env=self.env,
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise ClusterError(f"sbatch {script} failed ({out.returncode}): {out.stderr.strip()}")
        return out.stdout.strip().split(";")[0]

    def wait(self, job: str, timeout_s: float = 300.0, until=None) -> str:
        """Wait until `until(state)` holds for the job's state (default: the job has ended); that
        state.  A timeout cancels the job and raises ClusterError."""
        until = until or (lambda state: state not in ("", "PENDING", "CONFIGURING", "RUNNING", "COMPLETING"))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = self.job_state(job)
            if until(state):
                return state
            time.sleep(0.5)
        subprocess.run([self.tools["scancel"], job], env=self.env, capture_output=True)
        raise ClusterError(f"job {job} did not get there in {timeout_s:.0f} s (state {self.job_state(job)}); "
                           f"{_tail(self.root / 'slurmd.log')}")

    def signal_batch_shell(self, job: str, name: str) -> None:
        """What SLURM does --signal's seconds before the time limit, now: `name` to the job's
        batch shell only."""
        self._run([self.tools["scancel"], f"--signal={name}", "--batch", job], "scancel --signal")

    def start_now(self, job: str) -> None:
        """Make a pending job eligible at once: slurmctld holds a requeued batch job back for
        two minutes, which an administrator (this cluster's root) may waive."""
        self._run([self.tools["scontrol"], "update", f"JobId={job}", "StartTime=now"], "scontrol update")

    def job_field(self, job: str, name: str) -> str:
        """One field of `scontrol show job` (JobState, ExitCode, ...), or "" when absent."""
        out = subprocess.run([self.tools["scontrol"], "show", "job", "-o", job], env=self.env,
                             capture_output=True, text=True)
        for field in out.stdout.split():
            if field.startswith(name + "="):
                return field.split("=", 1)[1]
        return ""

    def job_state(self, job: str) -> str:
        return self.job_field(job, "JobState")

    def job_exit_code(self, job: str) -> str:
        return self.job_field(job, "ExitCode") or "?"

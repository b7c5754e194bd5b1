"""Run one peer in a child process and return its result dict (the schema of runner.RESULT_KEYS).

The child writes OUT.json itself for every failure it can see. What it cannot report, the launcher
does: an unknown peer name, a timeout, or a process killed before writing (the kernel's OOM killer
sends SIGKILL), so a caller always gets a result with "error" set instead of a missing file.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional, Union

from . import PEERS
from .runner import RESULT_KEYS, empty_result
from .spec import parse_spec


def _failure(system: str, message: str) -> dict:
    result = empty_result(system)
    result["error"] = message
    return result


def _describe_exit(code: int) -> str:
    if code < 0:
        sig = -code
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        hint = " (likely the out-of-memory killer)" if sig == signal.SIGKILL else ""
        return f"killed by {name}{hint}"
    return f"exit status {code}"


def run_peer(system: str, data: Union[str, Path], spec: Union[dict, str, Path],
             out: Optional[Union[str, Path]] = None, timeout_s: Optional[float] = None,
             env: Optional[dict] = None) -> dict:
    """Train with peer `system` ("pyg" or "dgl") in a fresh process and return its result.

    spec: a spec dict (validated here first) or the path of a spec JSON file. out: where the child
    writes its JSON (a temporary file when None). env: extra environment for the child.
    """
    if system not in PEERS:
        return _failure(system, f"unknown peer '{system}' (known: {', '.join(PEERS)})")
    with tempfile.TemporaryDirectory(prefix="morphgen-peer-") as tmp:
        if isinstance(spec, dict):
            parse_spec(spec)                      # a bad spec raises SpecError here, in the caller
            spec_path = Path(tmp) / "spec.json"
            spec_path.write_text(json.dumps(spec))
        else:
            spec_path = Path(spec)
        out_path = Path(out) if out is not None else Path(tmp) / "out.json"
        if out_path.exists():
            out_path.unlink()                     # never read a stale result from an earlier run
        cmd = [sys.executable, "-m", f"morphgen.bench.peers.{system}",
               "--data", str(data), "--spec", str(spec_path), "--out", str(out_path)]
        try:
            proc = subprocess.run(cmd, env={**os.environ, **(env or {})}, capture_output=True,
                                  text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return _failure(system, f"timed out after {timeout_s} s")
        if not out_path.exists():
            tail = (proc.stderr or "").strip().splitlines()[-3:]
            return _failure(system, f"peer process {_describe_exit(proc.returncode)} before writing a result"
                            + (f": {' | '.join(tail)}" if tail else ""))
        result = json.loads(out_path.read_text())
    missing = [k for k in RESULT_KEYS if k not in result]
    if missing:
        return _failure(system, f"peer result lacks keys {missing}")
    return result

"""The process-level driver every peer runner shares: arguments, thread setup, result JSON.

`python -m morphgen.bench.peers.<system> --data D.npz --spec SPEC.json --out OUT.json` calls
`run_main(system, train)`. The driver reads the spec and sets the OpenMP/MKL thread counts in the
environment *before* anything imports torch (torch reads them once, at import), loads the data,
then hands over to the peer's `train(spec, data)`. The peer records "baseline_rss_bytes" once its
libraries are imported and the data sits in its tensors, just before it builds the model, so
peak - baseline is what the model and training add. A spec with a GPU device ("cuda:N") adds
DEVICE_KEYS to the result; a GPU the peer cannot use is an error in the result, never a CPU run.

Whatever happens, OUT.json is written: a missing peer library, a bad spec, an out-of-memory error
or a crash inside the peer ends up in its "error" field with the other fields null; nothing is
estimated. (A process killed outright, e.g. by the kernel's OOM killer, cannot write anything;
`morphgen.bench.peers.launcher.run_peer` reports that case from the outside.)
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import traceback
from pathlib import Path
from typing import Callable, Optional

from morphgen.bench.memory import current_rss_bytes, peak_rss_bytes
from morphgen.errors import UserError

from .dataset import NodeClassificationData, load_node_classification
from .spec import BenchSpec, load_spec

RESULT_KEYS = (
    "system", "config", "epoch_times_s", "epoch_time_s", "first_epoch_loss", "final_loss", "epoch_losses",
    "train_acc", "val_acc", "test_acc", "peak_rss_bytes", "baseline_rss_bytes", "error",
)

# Only in the result of a spec whose device is a GPU, so a CPU run's result keeps its schema.
# peak_device_bytes: torch.cuda.max_memory_allocated over the whole run (data, model, training).
DEVICE_KEYS = ("device", "peak_device_bytes")

THREAD_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


class PeerUnavailable(Exception):
    """The peer's library (torch, torch_geometric, dgl) cannot be imported on this machine."""


TrainFn = Callable[[BenchSpec, NodeClassificationData], dict]


def empty_result(system: str) -> dict:
    return {k: None for k in RESULT_KEYS} | {"system": system, "config": {}, "epoch_times_s": [], "epoch_losses": []}


def set_thread_env(threads: int) -> None:
    """Pin the native thread pools; must run before torch is imported to take effect."""
    for var in THREAD_ENV_VARS:
        os.environ[var] = str(threads)


def check_data_matches_spec(spec: BenchSpec, data: NodeClassificationData) -> None:
    if spec.layers[0] != data.num_features:
        raise UserError(f"spec field 'layers': first width {spec.layers[0]} != number of input features "
                        f"{data.num_features} in the dataset")
    if spec.layers[-1] < data.num_classes:
        raise UserError(f"spec field 'layers': last width {spec.layers[-1]} < number of classes "
                        f"{data.num_classes} in the dataset")
    if spec.model in ("rgcn", "hgt", "rgat") and spec.num_relations != data.num_etypes:
        raise UserError(f"spec field 'num_relations': {spec.num_relations} != number of edge types "
                        f"{data.num_etypes} in the dataset")
    if spec.model == "hgt" and spec.num_node_types != data.num_ntypes:
        raise UserError(f"spec field 'num_node_types': {spec.num_node_types} != number of node types "
                        f"{data.num_ntypes} in the dataset")
    if spec.model not in ("rgcn", "hgt", "rgat") and data.featureless:
        raise UserError(f"spec field 'model': {spec.model} needs input features, and the dataset is featureless "
                        f"(only the relational peers take node ids)")


def _finite_or_none(v):
    return v if isinstance(v, float) and math.isfinite(v) else (None if isinstance(v, float) else v)


def write_result(result: dict, out: Path) -> None:
    keys = RESULT_KEYS + (DEVICE_KEYS if "device" in result else ())
    clean = {k: _finite_or_none(result.get(k)) for k in keys}
    clean["epoch_times_s"] = list(result.get("epoch_times_s") or [])
    clean["epoch_losses"] = [_finite_or_none(float(v)) for v in result.get("epoch_losses") or []]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(clean, indent=2) + "\n")
    os.replace(tmp, out)      # a reader never sees a half-written result


def run_main(system: str, train: TrainFn, argv: Optional[list[str]] = None) -> int:
    """Entry point of one peer process. Exit status: 0 trained, 1 result carries an error."""
    parser = argparse.ArgumentParser(prog=f"python -m morphgen.bench.peers.{system}",
                                     description=f"Full-batch GCN training with {system}; writes a JSON result.")
    parser.add_argument("--data", required=True, help="canonical npz dataset")
    parser.add_argument("--spec", required=True, help="benchmark spec JSON")
    parser.add_argument("--out", required=True, help="where to write the result JSON")
    args = parser.parse_args(argv)
    out = Path(args.out)
    result = empty_result(system)
    try:
        spec = load_spec(args.spec)
        set_thread_env(spec.threads)        # on a GPU too: torch's host side still uses them
        if spec.on_cuda:
            result.update(device=spec.device, peak_device_bytes=None)
        data = load_node_classification(args.data)
        check_data_matches_spec(spec, data)
        result["baseline_rss_bytes"] = current_rss_bytes()
        result.update(train(spec, data))
    except PeerUnavailable as exc:
        result["error"] = f"peer '{system}' is not available: {exc}"
    except MemoryError as exc:
        result["error"] = f"out of memory: {exc or 'allocation failed'}"
    except UserError as exc:
        result["error"] = str(exc)
    except Exception as exc:  # a crash inside the peer library is a result, not a traceback
        if "out of memory" in str(exc).lower() or "can't allocate memory" in str(exc).lower():
            result["error"] = f"out of memory: {exc}"
        else:
            result["error"] = f"{type(exc).__name__}: {exc}"
            traceback.print_exc(file=sys.stderr)
    if result["error"] is not None:
        # A failed run reports nothing measured: no partial timings that could be mistaken for a result.
        keep = {"system", "config", "error", "baseline_rss_bytes", "device"}
        result = {k: (v if k in keep else None) for k, v in result.items()} | {"epoch_times_s": []}
    result["peak_rss_bytes"] = peak_rss_bytes()
    try:
        write_result(result, out)
    except OSError as exc:
        print(f"error: cannot write result to {out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if result["error"] is not None:
        print(f"error: {result['error']}", file=sys.stderr)
        return 1
    return 0

"""Run morphgen and its peers on one graph, each in its own process, and collect their results.

The pieces of one `morphgen bench` run:

* `program_shape` (program_shape.py) reads the .mp program and extracts what a peer needs to
  train the same model: layer kind (GCN, SAGE, GAT), widths, heads, dropout, bias, activation,
  optimizer. A program the peers cannot express is not silently approximated:
  `PeerModel.unsupported` says why, and the peers are reported as such.
* `prepare_dataset` loads the dataset once and writes it as a canonical .npz that *both* morphgen
  and the peers read, so every system trains on byte-identical arrays.
* `run_morphgen` / `run_peer_capped` start one child process each. Every child runs under the same
  address-space cap (RLIMIT_AS, set in the child before exec) so a run that outgrows the machine
  fails alone instead of taking the machine down; such a failure is reported as
  "out of memory (cap X GiB)", never estimated.
* `parity_check` proves the comparison is fair: with dropout 0 and morphgen's own initial weights
  handed to the peers, the losses of the first `PARITY_EPOCHS` epochs must agree, each within its
  tolerance (`parity_tolerances`).

With backend "cuda" morphgen trains with `--backend cuda --device N` and every peer gets the torch
device "cuda:N" in its spec, so both sides run on the same GPU; their device memory is reported as
"peak_device_bytes" (morphgen: the device buffers it allocated, `allocated_bytes` of its report;
a peer: torch.cuda.max_memory_allocated).
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from morphgen.backends.cuda.toolchain import DEVICE_ENV

from .peers.spec import MODEL_FIELDS, PYG_RGCN_CONVS, BenchSpec, parse_spec
from .program_shape import BenchError, PeerModel, program_shape, without_dropout  # noqa: F401 (also harness API)

PARITY_TOLERANCE = 1e-4                 # on each epoch's loss, relative above a loss of 1
# Epochs the parity check trains on both sides: the first loss checks the forward, the second and
# third the gradients and the optimizer (Adam's first step moves each weight by about lr times the
# sign of its gradient, its second weighs two gradients).
PARITY_EPOCHS = 3
# Adam's steps turn rounding into weight changes of about lr wherever a gradient is nearly zero, so
# how far two correct implementations drift apart in a few epochs depends on the model: GIN (batch
# norm) on cora, started from weights changed by 1e-7 of themselves, moves its third loss by up to
# 1e-3 (one draw of the nudge moved it 2e-5, another 1.4e-3).  The check measures this for the
# program at hand, training morphgen again from its weights nudged by PARITY_NUDGE (float32's
# rounding is 6e-8), PARITY_NUDGES times, and lets a peer drift PARITY_DRIFT_FACTOR times as far
# as the larger drift; a wrong gradient or step moves the losses by orders of magnitude more.
PARITY_NUDGE = 1e-7
PARITY_NUDGES = 2
PARITY_DRIFT_FACTOR = 5.0
PROFILE_EPOCHS = 6                        # the separate kernel-timer run of a GPU benchmark (the first left out)
CUDA_DEVICE_ENV = DEVICE_ENV                 # the GPU morphgen's CUDA library opens (train --device)
GiB = 1 << 30
KNOWN_PEERS = ("pyg", "dgl")


# ----------------------------------------------------------------------------- the data
@dataclass
class PreparedData:
    path: Path                 # canonical .npz morphgen reads (it applies the program's preprocessing)
    peer_path: Path            # the same data with that preprocessing already applied, for the peers
    name: str
    num_nodes: int
    num_edges: int
    num_features: int
    num_classes: int
    feature_sparsity: float
    feature_nnz: int
    dataset: object = None     # the loaded morphgen.data.Dataset (kept for the parity check)
    num_relations: int = 1     # edge types (1: untyped)
    num_node_types: int = 1
    featureless: bool = False  # no stored features: the identity input, num_features = num_nodes

    def describe(self) -> dict:
        out = {"name": self.name, "nodes": self.num_nodes, "edges": self.num_edges,
               "features": self.num_features, "classes": self.num_classes,
               "feature_sparsity": self.feature_sparsity, "feature_nnz": self.feature_nnz}
        if self.num_relations > 1 or self.featureless:      # a homogeneous report keeps its keys
            out.update(edge_types=self.num_relations, featureless=self.featureless)
        return out


def dataset_label(spec: str) -> str:
    if spec.startswith("synthetic"):
        return "synthetic"
    return Path(spec).stem or spec


def prepare_dataset(spec: str, data_dir, out_dir, keep: bool = False,
                    feature_normalization: Optional[str] = None, featureless_ok: bool = False) -> PreparedData:
    """Write the dataset once for morphgen and, when the program normalises its input features
    (gnn.normalizeFeatures), once more with morphgen's own normalisation applied for the peers,
    so both sides train on identical numbers without the peers re-implementing it.
    featureless_ok: a featureless dataset (identity input) is accepted: the R-GCN and HGT peers take it
    as node ids, and a run without comparable peers needs no features from them."""
    from morphgen.data import DataError, load_dataset, save_npz
    try:
        ds = load_dataset(spec, data_dir=data_dir)
    except DataError as exc:
        raise BenchError(f"--dataset {spec}: {exc}") from None
    if ds.features is None and not featureless_ok:
        raise BenchError(f"--dataset {spec}: featureless datasets cannot be given to the peers of this model "
                         f"(only the R-GCN and HGT peers take node ids as input)")
    unlabelled = ds.labels < 0
    in_split = ds.train_mask | ds.val_mask | ds.test_mask
    if np.any(unlabelled & in_split):
        raise BenchError(f"--dataset {spec}: node {int(np.flatnonzero(unlabelled & in_split)[0])} has "
                         f"label -1 but lies in a train/val/test split")
    path = Path(out_dir) / f"{dataset_label(spec)}.npz"
    save_npz(ds, path, compressed=False)
    peer_path = path
    peer_ds = ds
    if feature_normalization is not None:
        from morphgen.pipeline import normalize_features
        peer_ds = normalize_features(peer_ds, feature_normalization)
    if unlabelled.any():
        # The peer runners need a class for every node. Unlabelled nodes are in no split, so loss
        # and accuracy never read their label: class 0 changes nothing that is measured.
        import dataclasses
        peer_ds = dataclasses.replace(peer_ds, labels=np.where(unlabelled, 0, ds.labels))
    if peer_ds is not ds:
        peer_path = Path(out_dir) / f"{dataset_label(spec)}_peers.npz"
        save_npz(peer_ds, peer_path, compressed=False)
    return PreparedData(path=path, peer_path=peer_path, name=dataset_label(spec), num_nodes=ds.num_nodes, num_edges=ds.num_edges,
                        num_features=ds.num_features, num_classes=ds.num_classes,
                        feature_sparsity=float(ds.feature_sparsity), feature_nnz=int(ds.feature_nnz),
                        dataset=ds if keep else None,
                        num_relations=int(ds.graph.num_etypes) if ds.graph.etype is not None else 1,
                        num_node_types=int(ds.graph.num_ntypes) if ds.graph.ntype is not None else 1,
                        featureless=ds.features is None)


# ----------------------------------------------------------------------------- child processes
def default_memory_cap_gib() -> float:
    """Three quarters of physical memory: the rest stays for the OS and the harness itself."""
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        return round(0.75 * pages * size / GiB, 1)
    except (ValueError, OSError):
        return 16.0


def _cap_preexec(cap_gib: Optional[float]):
    if not cap_gib:
        return None
    limit = int(cap_gib * GiB)

    def apply():                      # runs in the child between fork and exec
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return apply


_OOM_HINTS = ("out of memory", "memoryerror", "bad_alloc", "cannot allocate memory",
              "can't allocate memory", "failed to allocate", "std::bad_alloc",
              "failed to map segment")          # the dynamic loader hitting RLIMIT_AS


def _looks_like_oom(text: str, returncode: int) -> bool:
    low = text.lower()
    return any(h in low for h in _OOM_HINTS) or returncode in (-signal.SIGKILL, -signal.SIGABRT,
                                                               -signal.SIGSEGV)


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


@dataclass
class ChildRun:
    returncode: int
    stderr: str
    result: Optional[dict]


def run_child(cmd: Sequence[str], out_json: Path, cap_gib: Optional[float], timeout_s: Optional[float],
              env: Optional[dict] = None) -> ChildRun:
    """Run one system in a fresh process under the memory cap; read the JSON it wrote, if any."""
    if out_json.exists():
        out_json.unlink()              # never read a stale result
    try:
        proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout_s,
                              preexec_fn=_cap_preexec(cap_gib), env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired:
        return ChildRun(-1, f"timed out after {timeout_s} s", None)
    result = None
    if out_json.exists():
        try:
            result = json.loads(out_json.read_text())
        except json.JSONDecodeError:
            result = None
    return ChildRun(proc.returncode, proc.stderr or "", result)


def failure_message(run: ChildRun, cap_gib: Optional[float], reported: Optional[str] = None) -> str:
    """One line saying why a run produced no measurement; OOM under the cap is named as such."""
    tail = " | ".join(run.stderr.strip().splitlines()[-3:])
    detail = reported or (f"process {_describe_exit(run.returncode)}" + (f": {tail}" if tail else ""))
    if run.stderr.startswith("timed out"):
        return run.stderr
    if cap_gib and _looks_like_oom(f"{detail} {tail}", run.returncode):
        return f"out of memory (cap {cap_gib:g} GiB): {detail}"
    return detail


def median_after_warmup(times: Sequence[float], warmup: int) -> Optional[float]:
    timed = list(times)[warmup:] or list(times)
    return float(statistics.median(timed)) if timed else None


# What a GPU run adds to a system entry (the peers' runner writes the same keys).
DEVICE_KEYS = ("device", "peak_device_bytes")
SYSTEM_KEYS = ("system", "config", "epoch_time_s", "epoch_times_s", "compile_seconds", "setup_seconds",
               "peak_rss_bytes",
               "baseline_rss_bytes", "first_epoch_loss", "final_loss", "epoch_losses", "train_acc", "val_acc",
               "test_acc", "error")


def faster_run(kept: Optional[dict], entry: dict) -> dict:
    """The run to report of two of one system (or layout): a failure wins (it must be seen), else
    the faster."""
    if kept is None or entry.get("error"):
        return entry
    if kept.get("error") or entry["epoch_time_s"] >= kept["epoch_time_s"]:
        return kept
    return entry


def _empty_system(system: str) -> dict:
    return {k: None for k in SYSTEM_KEYS} | {"system": system, "config": {}, "epoch_times_s": [], "epoch_losses": []}


def morphgen_command(model, data_path, epochs, seed, threads, json_out, profile=True,
                     sparsity_threshold=None, backend: str = "openmp", device: Optional[int] = None,
                     edge_typed_layout: Optional[str] = None) -> list:
    cmd = [sys.executable, "-m", "morphgen", "train", str(model), "--dataset", str(data_path),
           "--epochs", str(epochs), "--seed", str(seed), "--threads", str(threads),
           "--json", str(json_out), "--quiet"]
    if backend != "openmp":               # openmp is train's default: its command stays as it was
        cmd += ["--backend", backend]
    if device is not None:
        cmd += ["--device", str(device)]
    if profile:
        cmd.append("--profile")
    if sparsity_threshold is not None:
        cmd += ["--sparsity-threshold", repr(float(sparsity_threshold))]
    if edge_typed_layout is not None:
        cmd += ["--edge-typed-layout", edge_typed_layout]
    return cmd


def run_morphgen(model, data_path, work_dir, *, epochs: int, warmup: int, seed: int, threads: int,
                 cap_gib: Optional[float], timeout_s: Optional[float], profile: bool = True,
                 sparsity_threshold: Optional[float] = None, tag: str = "morphgen", backend: str = "openmp",
                 device: Optional[int] = None, edge_typed_layout: Optional[str] = None) -> dict:
    """`morphgen train` in its own process; returns a system entry (see SYSTEM_KEYS; a GPU run adds
    DEVICE_KEYS)."""
    out = Path(work_dir) / f"{tag}.json"
    # On a GPU the timers' events would add to the timed epochs: the kernel table comes from a
    # short run of its own (PROFILE_EPOCHS), the epoch times from a run without them.
    separate_profile = profile and backend == "cuda"
    cmd = morphgen_command(model, data_path, epochs, seed, threads, out, profile and not separate_profile,
                           sparsity_threshold, backend, device, edge_typed_layout)
    run = run_child(cmd, out, cap_gib, timeout_s)
    entry = _empty_system("morphgen")
    if backend == "cuda":                 # named even when the run fails
        entry.update(device=device_name(backend, device), peak_device_bytes=None)
    if run.returncode != 0 or run.result is None:
        entry["error"] = failure_message(run, cap_gib)
        return entry
    r = run.result
    times = [float(t) for t in r.get("epoch_times_s", [])]
    history = r.get("history") or []
    entry.update({
        "config": {"backend": r.get("backend"), "feature_path": r.get("feature_path"),
                   "feature_sparsity": r.get("feature_sparsity"),
                   "sparsity_threshold": r.get("sparsity_threshold"), "threads": r.get("threads"),
                   "adjacency": "CSR (generated kernels)", "profiled": bool(profile),
                   "hoisted_aggregations": r.get("hoisted_aggregations"),
                   "edge_typed_layouts": r.get("edge_typed_layouts")},
        "epoch_times_s": times, "epoch_time_s": median_after_warmup(times, warmup),
        "compile_seconds": r.get("compile_seconds"), "setup_seconds": r.get("prepare_seconds"),
        "peak_rss_bytes": r.get("peak_rss_bytes"),
        "baseline_rss_bytes": r.get("baseline_rss_bytes"), "allocated_bytes": r.get("allocated_bytes"),
        "first_epoch_loss": history[0].get("loss") if history else None,
        "final_loss": r.get("final_loss"), "epoch_losses": [row.get("loss") for row in history],
        "train_acc": r.get("train_acc"), "val_acc": r.get("val_acc"), "test_acc": r.get("test_acc"),
    })
    if backend == "cuda":
        entry["config"].update(morphgen_device_config(entry["device"]))
        entry["peak_device_bytes"] = r.get("allocated_bytes")
    if separate_profile:
        profile_out = Path(work_dir) / f"{tag}-profile.json"
        profile_epochs = min(epochs, PROFILE_EPOCHS)
        profiled = run_child(morphgen_command(model, data_path, profile_epochs, seed, threads, profile_out, True,
                                              sparsity_threshold, backend, device, edge_typed_layout),
                             profile_out, cap_gib, timeout_s)
        if profiled.returncode == 0 and profiled.result is not None:
            r = dict(r, profile=profiled.result.get("profile"))
            entry["config"]["profiled"] = f"kernel timers from a separate run of {profile_epochs} epochs"
    if "profile" in r:
        entry["profile"] = r["profile"]
    return entry


def morphgen_device_config(device: str) -> dict:
    """Where morphgen's CUDA run happened; under the SIMT emulation it was the CPU, and the report
    must not pass its times and bytes off as a GPU's."""
    from morphgen.backends.cuda.toolchain import emulated
    return {"device": device,
            "peak_device_memory": "allocated_bytes: the device buffers morphgen allocates (data, parameters, "
                                  "activations, workspace)",
            "cuda_emulation": emulated() or None}


def peer_spec(shape: PeerModel, data: PreparedData, *, epochs: int, warmup: int, threads: int,
              sparse_features: bool, dropout: Optional[float] = None, init_weights=None,
              device: str = "cpu", input_dropout: Optional[float] = None) -> dict:
    """The peers' spec for `shape` on `data`; `dropout` overrides every dropout rate (the parity
    check's 0, attention dropout included), `input_dropout` that of the input features alone."""
    spec = {"model": shape.conv, "aggr": shape.aggr,
            "layers": shape.resolved_layers(data.num_features, data.num_classes),
            "dropout": shape.hidden_dropout if dropout is None else dropout, "lr": shape.lr,
            "weight_decay": shape.weight_decay, "epochs": epochs, "warmup": min(warmup, epochs - 1),
            "input_dropout": next(p for p in (dropout, input_dropout, shape.input_dropout) if p is not None),
            "threads": threads, "bias": shape.bias, "self_loops": shape.self_loops,
            "sparse_features": bool(sparse_features)}
    if shape.activation != "relu":
        spec["activation"] = shape.activation
    if shape.edge_weight:
        spec["edge_weight"] = True
    if shape.conv == "gin":
        spec["norms"] = list(shape.norms)
    for key in ("hops", "teleport", "theta"):       # the propagating models' constants
        if shape.conv in MODEL_FIELDS[key][1]:
            spec[key] = getattr(shape, key)
    if shape.conv in ("gat", "rgat"):
        spec.update(heads=list(shape.heads), negative_slope=shape.negative_slope,
                    attention_dropout=shape.attention_dropout if dropout is None else dropout)
    if shape.conv == "hgt":
        spec.update(heads=list(shape.heads), num_node_types=data.num_node_types)
    if shape.conv in ("rgcn", "hgt", "rgat"):
        spec["num_relations"] = data.num_relations
        if shape.num_bases:
            spec["num_bases"] = shape.num_bases
    if init_weights is not None:
        spec["init_weights"] = str(init_weights)
    if device != "cpu":                   # a CPU spec stays exactly what it was
        spec["device"] = device
    return spec


def device_name(backend: str, device: Optional[int]) -> str:
    """The torch device of the peers, "cuda:N" or "cpu": the GPU morphgen trains on, if any."""
    return f"cuda:{device if device is not None else 0}" if backend == "cuda" else "cpu"


def peer_variants(system: str, shape: PeerModel) -> tuple:
    """The configurations a peer is timed in, as spec overrides with a label: PyG has two R-GCN
    convolutions (RGCNConv, FastRGCNConv), every other case one configuration."""
    if system == "pyg" and shape.conv == "rgcn":
        return tuple((conv, {"pyg_conv": conv}) for conv in PYG_RGCN_CONVS)
    return ((None, {}),)


def run_peer_fastest(system: str, data_path, spec: dict, work_dir, variants: tuple, *,
                     cap_gib: Optional[float], timeout_s: Optional[float], round_tag: str = "") -> dict:
    """run_peer_capped in each configuration of `variants` (peer_variants), one process each; the
    fastest that succeeded is the peer's entry, and "alternatives" lists the others (their time,
    peak RSS and error). With one configuration, just run_peer_capped.  `round_tag` keeps the
    files of repeated rounds apart."""
    if len(variants) == 1:
        label, over = variants[0]
        return run_peer_capped(system, data_path, {**spec, **over}, work_dir, cap_gib=cap_gib, timeout_s=timeout_s,
                               tag=f"{system}{round_tag}")
    runs = [(label, run_peer_capped(system, data_path, {**spec, **over}, work_dir, cap_gib=cap_gib,
                                    timeout_s=timeout_s, tag=f"{system}_{label}{round_tag}"))
            for label, over in variants]
    ok = [(label, e) for label, e in runs if e.get("error") is None and e.get("epoch_time_s") is not None]
    if ok:
        best_label, best = min(ok, key=lambda item: item[1]["epoch_time_s"])
    else:
        best_label, best = runs[0]
        best["error"] = "; ".join(f"{label}: {e['error']}" for label, e in runs)
    best["configuration"] = best_label
    best["alternatives"] = [{"configuration": label, "epoch_time_s": e.get("epoch_time_s"),
                             "peak_rss_bytes": e.get("peak_rss_bytes"), "error": e.get("error")}
                            for label, e in runs if label != best_label]
    return best


def run_peer_capped(system: str, data_path, spec: dict, work_dir, *, cap_gib: Optional[float],
                    timeout_s: Optional[float], tag: Optional[str] = None) -> dict:
    """One peer runner (`python -m morphgen.bench.peers.<system>`) in its own capped process."""
    tag = tag or system
    spec_path = Path(work_dir) / f"{tag}.spec.json"
    spec_path.write_text(json.dumps(spec, indent=2) + "\n")
    out = Path(work_dir) / f"{tag}.json"
    cmd = [sys.executable, "-m", f"morphgen.bench.peers.{system}", "--data", str(data_path),
           "--spec", str(spec_path), "--out", str(out)]
    run = run_child(cmd, out, cap_gib, timeout_s)
    entry = _empty_system(system)
    r = run.result
    if r is None:
        entry["error"] = failure_message(run, cap_gib)
        return entry
    for k in SYSTEM_KEYS + DEVICE_KEYS:
        if k in r:
            entry[k] = r[k]
    if r.get("error"):
        entry["error"] = failure_message(run, cap_gib, reported=r["error"])
        for k in ("epoch_time_s", "first_epoch_loss", "final_loss", "train_acc", "val_acc", "test_acc"):
            entry[k] = None                     # a failed run reports nothing measured
        entry["epoch_times_s"], entry["epoch_losses"] = [], []
    else:
        entry["epoch_time_s"] = median_after_warmup(entry["epoch_times_s"], spec["warmup"])
    return entry


# ----------------------------------------------------------------------------- parity
def morphgen_initial_weights(model_path, dataset, threads: int, seed: int,
                             sparsity_threshold: Optional[float] = None, backend: str = "openmp",
                             device: Optional[int] = None, block_diagonal: Optional[dict] = None,
                             epochs: int = 1, start_from: Optional[dict] = None):
    """Bind the program to the data, read its initial parameters and train it `epochs` epochs.

    Returns (params: name -> flat float32 array, the loss of each epoch). Imported lazily: the backend
    is only needed here. With backend cuda the first epoch runs on GPU `device`, so the parity
    check covers the kernels that were timed. `block_diagonal` (name -> heads): those parameters,
    [..., H, H] matrices, start with their off-diagonal head blocks zeroed (PeerModel.block_diagonal).
    `start_from`: train from these parameters instead of the program's initial ones.
    """
    from morphgen.api import CompiledModel
    with _cuda_device_env(device):        # the library reads it when the data is bound
        model = CompiledModel(model_path, backend=backend, threads=threads, seed=seed,
                              sparsity_threshold=sparsity_threshold).bind(dataset)
    if start_from is not None:
        model.set_params(start_from)
    params = {k: np.array(v, dtype=np.float32, copy=True) for k, v in model.get_params().items()}
    if block_diagonal and start_from is None:
        shapes = {p.name: p.value.shape for p in model.program.params}
        for name, heads in block_diagonal.items():
            width = shapes[name][-1]
            params[name] = zero_off_diagonal_blocks(params[name].reshape(-1, width, width), heads).reshape(-1)
        model.set_params({name: params[name] for name in block_diagonal})
    return params, [float(model.session.train_epoch()) for _ in range(epochs)]


def zero_off_diagonal_blocks(matrices: np.ndarray, heads: int) -> np.ndarray:
    """[R, H, H] with everything outside the `heads` diagonal (H/heads)-square blocks set to 0."""
    d = matrices.shape[-1] // heads
    head_of = np.arange(matrices.shape[-1]) // d
    return np.where(head_of[:, None] == head_of[None, :], matrices, 0).astype(np.float32)


@contextlib.contextmanager
def _cuda_device_env(device: Optional[int]):
    """$MORPHGEN_CUDA_DEVICE set to `device` for the duration (what `train --device` does)."""
    if device is None:
        yield
        return
    old = os.environ.get(CUDA_DEVICE_ENV)
    os.environ[CUDA_DEVICE_ENV] = str(device)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(CUDA_DEVICE_ENV, None)
        else:
            os.environ[CUDA_DEVICE_ENV] = old


def write_init_weights(params: dict, spec: BenchSpec, names: Sequence[dict] = (),
                       block_diagonal: Optional[dict] = None) -> Path:
    """morphgen's flat initial parameters, reshaped, as the peers' layer{i}.<name> arrays at
    spec.init_weights (spec.parameters names them and gives their shapes). `names`: per layer,
    the program's name of each (PeerModel.parameter_names, for programs that declare their own
    weights; a tuple of names: those arrays stacked, row-major); without it morphgen's are
    layer{i}.<name>. morphgen stores every array row-major
    in the shape the program declares, which is the peers' shape: W[etypes][in][out] is [R, in, out],
    and W[etypes][heads][d][d] is [R, heads * d, d]. `block_diagonal` (program name -> heads):
    full [R, H, H] matrices of which the peer keeps the heads' diagonal blocks, so given as
    [R, H, H/heads] (PeerModel.block_diagonal)."""
    arrays = {}
    for i in range(spec.num_layers):
        for name, want in spec.parameters(i).items():
            key = f"layer{i}.{name}"
            source = names[i].get(name) if i < len(names) else key
            if isinstance(source, tuple):  # matrices the peer stacks into one (EdgeConv's Wi over Wd)
                missing = [part for part in source if part not in params]
                a = None if missing else np.concatenate([params[part] for part in source])
                source = " + ".join(missing or source)
            else:
                a = params.get(source) if source else None
            if a is None:
                raise BenchError(f"parity: morphgen has no parameter '{source or key}' (has {sorted(params)})")
            if block_diagonal and source in block_diagonal:
                a = _diagonal_blocks(a, want, block_diagonal[source])
            if a.size != int(np.prod(want)):
                raise BenchError(f"parity: '{source}' has {a.size} values, expected {'x'.join(map(str, want))}")
            arrays[key] = a.reshape(want)
    np.savez(spec.init_weights, **arrays)
    return Path(spec.init_weights)


def _diagonal_blocks(a, want, heads: int):
    """The diagonal blocks of full [R, H, H] matrices, head h's under head h-1's: [R, H, H/heads]."""
    relations, hidden, d = want
    full = a.reshape(relations, hidden, hidden)
    return np.concatenate([full[:, h * d:(h + 1) * d, h * d:(h + 1) * d] for h in range(heads)], axis=1)


def parity_check(model_path, shape: PeerModel, data: PreparedData, peers: Sequence[str], work_dir, *,
                 threads: int, seed: int, sparse_features: bool, cap_gib: Optional[float],
                 timeout_s: Optional[float], sparsity_threshold: Optional[float] = None,
                 backend: str = "openmp", device: Optional[int] = None) -> dict:
    """The losses of parity_epochs(shape) epochs of morphgen and of each peer from identical weights,
    dropout 0: the first checks the forward, the later ones every gradient and the optimizer's
    steps. With backend cuda, morphgen and the peers compute them on GPU `device`."""
    if data.dataset is None:
        raise BenchError("parity: the dataset was not kept in memory")
    work = Path(work_dir)
    plain = without_dropout(model_path, work)
    # Same feature path as the timed run: the threshold it reported is passed on.
    params, m_losses = morphgen_initial_weights(plain, data.dataset, threads, seed, sparsity_threshold,
                                                backend, device, shape.block_diagonal, epochs=parity_epochs(shape))
    # One spec for every peer: the same epochs, no dropout, morphgen's initial weights.
    spec = peer_spec(shape, data, epochs=len(m_losses), warmup=0, threads=threads,
                     sparse_features=sparse_features, dropout=0.0, init_weights=work / "parity_init.npz",
                     device=device_name(backend, device))
    write_init_weights(params, parse_spec(spec), shape.parameter_names, shape.block_diagonal)
    nudged = [morphgen_initial_weights(plain, data.dataset, threads, seed, sparsity_threshold, backend, device,
                                       epochs=len(m_losses), start_from=nudge(params, draw))[1]
              for draw in range(PARITY_NUDGES if len(m_losses) > 1 else 0)]
    tolerances = parity_tolerances(m_losses, nudged)
    report = {"tolerance": PARITY_TOLERANCE, "epochs": len(m_losses), "morphgen_first_epoch_loss": m_losses[0],
              "morphgen_losses": m_losses, "nudged_losses": nudged, "nudge": PARITY_NUDGE,
              "drift_factor": PARITY_DRIFT_FACTOR, "tolerances": tolerances,
              "program": str(plain), "peers": {}}
    for system in peers:
        if system in shape.peer_unsupported:
            report["peers"][system] = {"first_epoch_loss": None, "losses": None, "abs_diff": None,
                                       "passed": None, "error": f"not comparable: {shape.peer_unsupported[system]}"}
            continue
        # every configuration that is timed is checked: "pyg (FastRGCNConv)" beside "pyg (RGCNConv)"
        for label, over in peer_variants(system, shape):
            row_name = system if label is None else f"{system} ({label})"
            r = run_peer_capped(system, data.peer_path, {**spec, **over}, work, cap_gib=cap_gib,
                                timeout_s=timeout_s, tag=f"parity_{system}" + (f"_{label}" if label else ""))
            report["peers"][row_name] = parity_row(m_losses, r, tolerances)
    return report


def parity_epochs(shape: PeerModel) -> int:
    """PARITY_EPOCHS, or only the first where the peer trains a restricted form of the program's
    weights: from block-diagonal relation matrices, morphgen's gradients fill the blocks that the
    peer does not have, so the two agree only until the first step."""
    return 1 if shape.block_diagonal else PARITY_EPOCHS


def nudge(params: dict, seed: int = 0) -> dict:
    """Every parameter changed by PARITY_NUDGE of itself (a normal draw per value): weights one
    rounding away from `params`."""
    rng = np.random.default_rng(seed)
    return {k: (v * (1.0 + PARITY_NUDGE * rng.standard_normal(v.shape))).astype(np.float32)
            for k, v in params.items()}


def parity_tolerances(losses: Sequence[float], nudged: Sequence[Sequence[float]] = ()) -> list:
    """Per epoch, how far a peer's loss may lie from morphgen's: PARITY_TOLERANCE (relative to
    losses above 1), or PARITY_DRIFT_FACTOR times morphgen's largest drift from nudged weights."""
    tolerances = []
    for epoch, loss in enumerate(losses):
        drift = max((abs(run[epoch] - loss) for run in nudged), default=0.0)
        tolerances.append(max(PARITY_TOLERANCE * max(1.0, abs(loss)), PARITY_DRIFT_FACTOR * drift))
    return tolerances


def parity_row(morphgen_losses: Sequence[float], peer: dict, tolerances: Sequence[float]) -> dict:
    """A peer's parity verdict: every epoch's loss within that epoch's tolerance of morphgen's,
    over all the epochs morphgen ran (a peer that reports fewer is reported as failed)."""
    losses = peer.get("epoch_losses") or []
    row = {"first_epoch_loss": peer.get("first_epoch_loss"), "losses": losses, "error": peer.get("error"),
           "abs_diff": None, "passed": None}
    if row["error"] is None and len(losses) != len(morphgen_losses):
        row["error"] = f"it reported {len(losses)} epoch losses, not {len(morphgen_losses)}"
    if row["error"] is None:
        diffs = [abs(float(p) - m) if p is not None else math.inf for p, m in zip(losses, morphgen_losses)]
        row.update(abs_diff=max(diffs), passed=all(d <= t for d, t in zip(diffs, tolerances)))
    return row


def scratch_dir(parent=None) -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(prefix="morphgen-bench-", dir=parent)

"""Saving a partition so that each rank loads only its own part.

Directory layout:
    manifest.json         {"format": ..., "num_parts": K, "num_nodes": N, "files": [...], "meta": {...}}
    part-00000.npz ...    one archive per part (numpy .npz, no pickles)
Halo lists are stored flat: peers, offsets into one index array.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from .errors import PartitionError
from .layout import PartLayout

FORMAT = "morphgen-partition-v1"
_ARRAYS = ("owned", "ghosts", "ghost_owner", "indptr", "indices", "edge_ids")


def part_file(part: int) -> str:
    return f"part-{part:05d}.npz"


def _flatten(lists: dict):
    peers = np.array(sorted(lists), dtype=np.int64)
    sizes = [lists[q].shape[0] for q in peers.tolist()]
    offsets = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    flat = np.concatenate([lists[q] for q in peers.tolist()]) if sizes else np.zeros(0, np.int64)
    return peers, offsets, flat.astype(np.int64)


def _unflatten(peers, offsets, flat) -> dict:
    return {int(q): flat[offsets[i]:offsets[i + 1]] for i, q in enumerate(peers.tolist())}


def save_partition(layouts: list[PartLayout], directory, meta: dict | None = None) -> Path:
    if not layouts:
        raise PartitionError("layouts: nothing to save (no parts)")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for layout in layouts:
        arrays = {name: getattr(layout, name) for name in _ARRAYS}
        arrays["send_peers"], arrays["send_offsets"], arrays["send_index"] = _flatten(layout.send)
        arrays["recv_peers"], arrays["recv_offsets"], arrays["recv_index"] = _flatten(layout.recv)
        arrays["header"] = np.array([layout.part, layout.num_parts, layout.num_global_nodes], np.int64)
        tmp = directory / (part_file(layout.part) + ".tmp.npz")
        np.savez(tmp, **arrays)
        os.replace(tmp, directory / part_file(layout.part))
    for stale in directory.glob("part-*.npz"):     # parts of an earlier, larger partition here
        index = stale.name[len("part-"):-len(".npz")]
        if index.isdigit() and len(index) == 5 and int(index) >= layouts[0].num_parts:
            stale.unlink()
    manifest = {"format": FORMAT, "num_parts": layouts[0].num_parts,
                "num_nodes": layouts[0].num_global_nodes,
                "files": [part_file(l.part) for l in layouts], "meta": meta or {}}
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return directory


def is_partition_folder(directory) -> bool:
    """Whether `directory` holds a partition morphgen saved (its manifest)."""
    try:
        read_manifest(directory)
    except PartitionError:
        return False
    return True


def read_manifest(directory) -> dict:
    path = Path(directory) / "manifest.json"
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise PartitionError(f"{path}: no partition manifest here") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise PartitionError(f"{path}: unreadable manifest ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise PartitionError(f"{path}: format is not {FORMAT}")
    for key in ("num_parts", "num_nodes"):
        if not isinstance(manifest.get(key), int) or manifest[key] < 0:
            raise PartitionError(f"{path}: field {key} missing or not a non-negative integer")
    return manifest


def load_part(directory, part: int) -> PartLayout:
    """Load one rank's part; reads the manifest and that part's file only."""
    manifest = read_manifest(directory)
    k = manifest["num_parts"]
    if isinstance(part, bool) or not isinstance(part, (int, np.integer)) or not 0 <= part < k:
        raise PartitionError(f"part: must be in [0, {k}), got {part!r}")
    path = Path(directory) / part_file(int(part))
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {name: z[name] for name in z.files}
    except FileNotFoundError:
        raise PartitionError(f"{path}: part file missing") from None
    except Exception as exc:  # truncated or foreign file
        raise PartitionError(f"{path}: unreadable part file ({exc})") from None
    needed = _ARRAYS + ("header", "send_peers", "send_offsets", "send_index",
                        "recv_peers", "recv_offsets", "recv_index")
    missing = [name for name in needed if name not in data]
    if missing:
        raise PartitionError(f"{path}: missing arrays {', '.join(missing)}")
    p, num_parts, num_nodes = (int(x) for x in data["header"])
    if (p, num_parts, num_nodes) != (int(part), k, manifest["num_nodes"]):
        raise PartitionError(f"{path}: header (part {p}, {num_parts} parts, {num_nodes} nodes) "
                             f"disagrees with the manifest")
    return PartLayout(p, num_parts, num_nodes, *(data[name].astype(np.int64) for name in _ARRAYS),
                      send=_unflatten(data["send_peers"], data["send_offsets"], data["send_index"]),
                      recv=_unflatten(data["recv_peers"], data["recv_offsets"], data["recv_index"]))


def load_partition(directory) -> list[PartLayout]:
    return [load_part(directory, p) for p in range(read_manifest(directory)["num_parts"])]

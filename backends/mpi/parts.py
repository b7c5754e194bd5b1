"""Per-rank part files: everything one MPI rank trains on, written once and reused.

The launcher partitions the graph (morphgen.partition: owned nodes, ghosts, halo lists), then
writes one file per rank holding that rank's local graph (owned rows first, ghost rows after
them, grouped by owner), its rows of the features, labels and masks (a link predictor's triples
instead, every split, whole: any rank may score any triple), and what makes its numbers
those of one process: global node ids (dropout masks), the global positions of its edges, and
the global degrees of its nodes.  A rank reads only its own file.

A directory of part files is keyed by the dataset's content, the feature preprocessing and
the rank count (``key`` in manifest.json), so a later run on the same data reuses it.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import scipy.sparse as sp

from morphgen.errors import UserError

FORMAT = "morphgen-mpi-parts-1"
# Who decides which rank owns each node: the candidate partition predicted to give the fastest
# epoch (epoch_cost.py, the default), morphgen's edge-load balanced partitioner at its fixed 1.03
# bound, METIS balancing vertex counts (what PyG and DGL use), or a uniform random split.
PARTITIONERS = ("auto", "morphgen", "metis", "random")


class PartFileError(UserError):
    """Part files that are missing, damaged, or belong to another dataset or rank count."""


def dataset_key(dataset, normalization: Optional[str], num_parts: int, partitioner: str, chooser=None) -> str:
    """What the part files depend on: the graph, features, labels, masks, preprocessing, ranks
    (and, for --partitioner auto, what the choice weighed: the program's work, threads per rank)."""
    h = hashlib.sha256()
    g = dataset.graph
    for arr in (g.src, g.dst, g.etype, g.ntype, dataset.labels, *_task_arrays(dataset).values()):
        h.update(b"-" if arr is None else np.ascontiguousarray(arr).tobytes())
    if g.edge_weight is not None:          # (unweighted graphs keep the keys they always had)
        h.update(b"edge_weight" + g.edge_weight.tobytes())
    x = dataset.features
    if x is None:
        h.update(b"featureless")
    elif sp.issparse(x):
        x = x.tocsr()
        for arr in (x.indptr, x.indices, x.data):
            h.update(np.ascontiguousarray(arr).tobytes())
    else:
        h.update(np.ascontiguousarray(x).tobytes())
    h.update(json.dumps([FORMAT, g.num_nodes, g.num_etypes, g.num_ntypes, dataset.num_classes,
                         normalization, num_parts, partitioner]).encode())
    if partitioner == "auto" and chooser is not None:
        h.update(json.dumps(chooser.key()).encode())
    return h.hexdigest()[:24]


def assign_nodes(graph, num_parts: int, partitioner: str, chooser=None, progress=None):
    """(owner of every node, how it was decided) by one of PARTITIONERS; "auto" needs the
    ``chooser`` (an epoch_cost.EpochCostModel) and reports each candidate to ``progress``."""
    from morphgen.partition import partition_graph, vertex_balanced_reference
    if num_parts == 1:
        return np.zeros(graph.num_nodes, np.int64), {"partitioner": partitioner}
    if partitioner == "auto":
        from .epoch_cost import choose_partition
        return choose_partition(graph, num_parts, chooser, progress)
    if partitioner == "morphgen":
        result = partition_graph(graph, num_parts)
        return result.assignment, {"partitioner": partitioner, "phase": result.phase, "reason": result.reason}
    if partitioner == "metis":
        return vertex_balanced_reference(graph, num_parts), {"partitioner": partitioner}
    if partitioner == "random":
        rng = np.random.default_rng(0)
        return rng.permutation(np.arange(graph.num_nodes) % num_parts).astype(np.int64), {"partitioner": partitioner}
    raise UserError(f"morphgen: error: --partitioner must be one of {', '.join(PARTITIONERS)}, got {partitioner!r}")


def _task_arrays(dataset) -> dict:
    """What a node classifier trains on (its masks), or a link predictor (its triples, by split)."""
    if getattr(dataset, "task", "") == "link":
        from morphgen.data.link import SPLITS
        return {f"{split}_triples": getattr(dataset, f"{split}_triples").astype(np.int64) for split in SPLITS}
    return {"train_mask": dataset.train_mask, "val_mask": dataset.val_mask, "test_mask": dataset.test_mask}


def write_parts(dataset, num_parts: int, directory: Path, key: str, partitioner: str = "morphgen",
                progress=None, chooser=None, on_candidate=None) -> dict:
    """Partition ``dataset`` into ``num_parts`` and write one file per rank into ``directory``
    (through a temporary directory renamed into place: an interrupted write leaves nothing)."""
    from morphgen.layout import GraphLayout
    from morphgen.partition import build_layouts
    g = dataset.graph
    assignment, how = assign_nodes(g, num_parts, partitioner, chooser, on_candidate)
    layouts = build_layouts(g, assignment, num_parts)
    position = np.empty(g.num_edges, np.int64)        # original edge id -> destination-sorted position
    position[GraphLayout.from_graph(g).order] = np.arange(g.num_edges, dtype=np.int64)
    in_degree = np.bincount(g.dst, minlength=g.num_nodes).astype(np.int64)
    out_degree = np.bincount(g.src, minlength=g.num_nodes).astype(np.int64)
    directory.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".tmp-{directory.name}-", dir=directory.parent))
    summary = []
    for lay in layouts:
        arrays = _part_arrays(dataset, lay, position, in_degree, out_degree)
        np.savez(work / f"part-{lay.part}.npz", **arrays)
        summary.append({"owned": lay.num_owned, "ghosts": lay.num_ghosts, "edges": int(lay.indices.shape[0]),
                        "halo_rows_sent": int(sum(v.shape[0] for v in lay.send.values()))})
        if progress:
            progress(lay.part)
    manifest = {"format": FORMAT, "key": key, "num_parts": num_parts, "dataset": dataset.name,
                "num_nodes": g.num_nodes, "num_edges": g.num_edges, "parts": summary,
                "partition": how}
    (work / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    try:
        os.rename(work, directory)
    except OSError:        # another launcher wrote the same parts first: theirs are identical
        import shutil
        shutil.rmtree(work, ignore_errors=True)
    return read_manifest(directory, key, num_parts)


def _part_arrays(dataset, lay, position, in_degree, out_degree) -> dict:
    g = dataset.graph
    l2g = lay.local_to_global
    n_own, n_local = lay.num_owned, lay.num_local
    # ghosts have no in-edges here: their CSR rows are empty
    indptr = np.concatenate([lay.indptr, np.full(lay.num_ghosts, lay.indptr[-1], np.int64)])
    peers = sorted(set(lay.send) | set(lay.recv))
    starts = np.searchsorted(lay.ghost_owner, np.asarray(peers + [lay.num_parts], np.int64))
    recv_ptr = (n_own + starts).astype(np.int64)
    recv_ptr[-1] = n_local
    send = [lay.send.get(q, np.zeros(0, np.int64)) for q in peers]
    owned = np.zeros(n_local, bool)
    owned[:n_own] = True
    arrays = {
        "num_owned": np.int64(n_own), "num_parts": np.int64(lay.num_parts), "part": np.int64(lay.part),
        "num_global_nodes": np.int64(g.num_nodes),
        "indptr": indptr, "col": lay.indices, "node_gid": l2g.astype(np.int64),
        "edge_gid": position[lay.edge_ids], "in_degree": in_degree[l2g], "out_degree": out_degree[l2g],
        "peers": np.asarray(peers, np.int64), "recv_ptr": recv_ptr,
        "send_ptr": np.concatenate([[0], np.cumsum([s.shape[0] for s in send])]).astype(np.int64),
        "send_idx": np.concatenate(send + [np.zeros(0, np.int64)]).astype(np.int64),
        "num_etypes": np.int64(g.num_etypes), "num_ntypes": np.int64(g.num_ntypes),
    }
    if dataset.labels is not None:
        arrays.update(labels=dataset.labels[l2g].astype(np.int64), train_mask=dataset.train_mask[l2g] & owned,
                      val_mask=dataset.val_mask[l2g] & owned, test_mask=dataset.test_mask[l2g] & owned)
    else:              # link prediction: every rank scores the triples of the whole graph
        arrays.update(_task_arrays(dataset))
    if g.etype is not None:
        arrays["etype"] = g.etype[lay.edge_ids]
    if g.edge_weight is not None:
        arrays["edge_weight"] = g.edge_weight[lay.edge_ids]
    if g.ntype is not None:
        arrays["ntype"] = g.ntype[l2g]
    x = dataset.features
    if sp.issparse(x):
        rows = x.tocsr()[l2g]
        arrays.update(x_indptr=rows.indptr.astype(np.int64), x_indices=rows.indices.astype(np.int32),
                      x_data=rows.data.astype(np.float32), x_shape=np.asarray(rows.shape, np.int64))
    elif x is not None:
        arrays["x"] = np.ascontiguousarray(x[l2g], dtype=np.float32)
    return arrays


def read_manifest(directory: Path, key: str, num_parts: int, partitioner: Optional[str] = None) -> dict:
    """The manifest of a parts directory, checked against the data and rank count it must match."""
    path = Path(directory) / "manifest.json"
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise PartFileError(f"morphgen: error: {path}: no manifest; the part files are incomplete") from None
    except (OSError, ValueError) as err:
        raise PartFileError(f"morphgen: error: {path}: unreadable ({err})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise PartFileError(f"morphgen: error: {path}: not a morphgen part-file manifest")
    if manifest.get("num_parts") != num_parts:
        raise PartFileError(f"morphgen: error: {path}: the part files are for {manifest.get('num_parts')} ranks, "
                            f"not {num_parts}")
    written_by = (manifest.get("partition") or {}).get("partitioner")
    if manifest.get("key") != key and partitioner is not None and written_by not in (None, partitioner):
        raise PartFileError(f"morphgen: error: {path}: the part files were made by --partitioner {written_by}, "
                            f"not {partitioner}; give another --parts-dir (or that partitioner)")
    if manifest.get("key") != key:
        raise PartFileError(f"morphgen: error: {path}: the part files were written for other data "
                            f"({manifest.get('dataset')}) or another preprocessing; remove the directory or "
                            f"give another --parts-dir")
    return manifest


@dataclass
class LocalPart:
    """One rank's part, as read from its file."""
    arrays: dict

    def __getitem__(self, name):
        return self.arrays[name]

    def get(self, name):
        return self.arrays.get(name)

    @property
    def num_local(self) -> int:
        return int(self.arrays["node_gid"].shape[0])

    def features(self):
        """("dense" | "csr" | "identity", payload), as morphgen.library.Session takes them."""
        a = self.arrays
        if "x" in a:
            return "dense", a["x"]
        if "x_data" in a:
            return "csr", sp.csr_matrix((a["x_data"], a["x_indices"], a["x_indptr"]), shape=tuple(a["x_shape"]))
        return "identity", None


def load_part(directory: Path, rank: int, num_parts: int) -> LocalPart:
    path = Path(directory) / f"part-{rank}.npz"
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except FileNotFoundError:
        raise PartFileError(f"morphgen: error: {path}: missing part file for rank {rank}") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise PartFileError(f"morphgen: error: {path}: damaged part file ({err})") from None
    if int(arrays.get("num_parts", -1)) != num_parts or int(arrays.get("part", -1)) != rank:
        raise PartFileError(f"morphgen: error: {path}: written for rank {arrays.get('part')} of "
                            f"{arrays.get('num_parts')}, not rank {rank} of {num_parts}")
    return LocalPart(arrays)

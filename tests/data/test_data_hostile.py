"""Hostile and damaged inputs: every one is a DataError naming the file and the key or field, never
another exception, a hang or an unbounded allocation (docs/data.md, "Refused before reading")."""
import io
import os
import pickle
import random
import resource
import struct
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from morphgen.data import (DataError, Dataset, guards, load_dataset, load_graph, read_edge_list, read_npz,
                           read_planetoid, save_npz, synthetic_dataset)
from morphgen.data.npz import NpzArchive

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """A small valid dataset (a few hundred nodes) saved in the canonical compressed format."""
    ds = synthetic_dataset(nodes=300, edges=2000, features=16, classes=3, val=50, test=100, seed=1)
    return save_npz(ds, tmp_path_factory.mktemp("good") / "good.npz")


@pytest.fixture
def one_tib(monkeypatch):
    """1 TiB of memory available, whatever the machine has (or when /proc cannot be read)."""
    monkeypatch.setattr(guards, "memory_limit", lambda: 1 << 40)


def _members(path):
    """The archive's members as ``{name: bytes}`` (the uncompressed .npy files), in order."""
    with zipfile.ZipFile(path) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def _write_zip(path, members, compression=zipfile.ZIP_DEFLATED):
    """Write ``members`` (a dict, or a list of pairs to allow duplicate names) as a zip archive."""
    with zipfile.ZipFile(path, "w", compression) as zf:
        for name, data in (members.items() if isinstance(members, dict) else members):
            zf.writestr(name, data)
    return path


def _npy(array) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asarray(array), allow_pickle=True)
    return buf.getvalue()


def _npy_header_only(shape, descr="<i8", extra=b"\0" * 64) -> bytes:
    """A .npy member whose header declares ``shape`` but which holds only ``extra`` after it."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_2_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    return buf.getvalue() + extra


def _expect(path, *words, loader=load_dataset):
    with pytest.raises(DataError) as info:
        loader(path)
    message = str(info.value)
    assert str(path) in message, message
    for word in words:
        assert word in message, message
    return message


def _data_offset(raw: bytes, info: zipfile.ZipInfo) -> int:
    """Where a member's (compressed) data starts: after its local header, name and extra field."""
    name_len, extra_len = struct.unpack_from("<HH", raw, info.header_offset + 26)
    return info.header_offset + 30 + name_len + extra_len


# -- 1. damaged npz archives --------------------------------------------------------------------

def test_empty_file(tmp_path):
    path = tmp_path / "empty.npz"
    path.write_bytes(b"")
    _expect(path, "not a readable .npz archive", "empty")


def test_a_file_that_is_no_zip_or_a_checkpoint(tmp_path):
    """numpy's own message for these advises unpickling the file."""
    text = tmp_path / "text.npz"
    text.write_text("hello")
    message = _expect(text, "not a readable .npz archive (File is not a zip file)")
    assert "pickle" not in message
    checkpoint = tmp_path / "run.npz"
    checkpoint.write_bytes(b"MGCKPT02" + bytes(64))
    _expect(checkpoint, "is a morphgen checkpoint (--checkpoint, --resume), not a dataset")


def test_first_half_of_a_valid_file(tmp_path, good):
    path = tmp_path / "half.npz"
    raw = good.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])
    _expect(path, "not a readable .npz archive")


def test_corrupt_deflate_stream_names_the_key(tmp_path, good):
    raw = bytearray(good.read_bytes())
    with zipfile.ZipFile(good) as zf:
        info = zf.getinfo("y.npy")
    start = _data_offset(raw, info)
    for i in range(start + 2, start + 40):         # zlib: "invalid distance too far back" or similar
        raw[i] ^= 0xFF
    path = tmp_path / "zlib.npz"
    path.write_bytes(bytes(raw))
    _expect(path, "key 'y' is damaged")


def test_crc_mismatch_names_the_key(tmp_path, good):
    raw = good.read_bytes()
    with zipfile.ZipFile(good) as zf:
        crc = zf.getinfo("y.npy").CRC.to_bytes(4, "little")
    assert raw.count(crc) == 2                      # the local header and the central directory
    path = tmp_path / "crc.npz"
    path.write_bytes(raw.replace(crc, bytes(b ^ 1 for b in crc)))
    _expect(path, "key 'y' is damaged", "CRC")


def test_file_cut_short_while_open_is_damaged_not_eoferror(tmp_path, good):
    """zipfile raises a bare EOFError when the file ends inside a member (here: truncated after
    the archive was opened, as when another process rewrites it)."""
    path = tmp_path / "shrinking.npz"
    path.write_bytes(good.read_bytes())
    with zipfile.ZipFile(good) as zf:
        cut = zf.getinfo("x.npy").header_offset + 100
    z = NpzArchive(path)
    try:
        os.truncate(path, cut)
        with pytest.raises(DataError, match=r"shrinking.npz: key 'x' is damaged \(EOFError\)"):
            z["x"]
    finally:
        z.close()


def test_member_that_is_not_an_array(tmp_path, good):
    members = _members(good)
    members["y.npy"] = b"hello, I am a text file\n"
    _expect(_write_zip(tmp_path / "text.npz", members), "key 'y'", "not a .npy array")


def test_header_declaring_1e11_rows_is_refused_before_reading(tmp_path, good):
    members = _members(good)
    members["y.npy"] = _npy_header_only((10 ** 11,))
    message = _expect(_write_zip(tmp_path / "huge.npz", members), "key 'y'", "(100000000000,)",
                      "800000000000 bytes")
    assert "damaged" in message


def test_shape_that_does_not_fit_in_memory(tmp_path, good, monkeypatch):
    """A consistent member whose data exceeds the memory available (here: made tiny)."""
    monkeypatch.setattr(guards, "memory_limit", lambda: 10000)   # meta and num_nodes fit
    _expect(good, "key 'edge_index'", "(2, 2000)", "32000 bytes", "more than the 10000 bytes")


def test_memory_limit_reads_meminfo_and_cgroup(tmp_path, monkeypatch):
    from morphgen import resources
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 100 kB\nMemAvailable: 50 kB\n")
    (tmp_path / "self_cgroup").write_text("0::/job.slice\n")
    group = tmp_path / "cg" / "job.slice"
    group.mkdir(parents=True)
    (group / "memory.max").write_text("max\n")
    (group / "memory.current").write_text("5000\n")
    monkeypatch.setattr(resources, "PROC_MEMINFO", str(meminfo))
    monkeypatch.setattr(resources, "PROC_CGROUP", str(tmp_path / "self_cgroup"))
    monkeypatch.setattr(resources, "CGROUP_ROOT", str(tmp_path / "cg"))
    assert guards.memory_limit() == 50 * 1024
    (group / "memory.max").write_text("25000\n")                 # the job's limit minus its usage
    assert guards.memory_limit() == 20000
    (tmp_path / "self_cgroup").write_text("4:memory:/job.slice\n")  # cgroup v1
    (tmp_path / "cg" / "memory" / "job.slice").mkdir(parents=True)
    (tmp_path / "cg" / "memory" / "job.slice" / "memory.limit_in_bytes").write_text("30000\n")
    (tmp_path / "cg" / "memory" / "job.slice" / "memory.usage_in_bytes").write_text("1000\n")
    assert guards.memory_limit() == 29000
    monkeypatch.setattr(resources, "PROC_MEMINFO", str(tmp_path / "absent"))
    monkeypatch.setattr(resources, "PROC_CGROUP", str(tmp_path / "absent"))
    assert guards.memory_limit() is None


def test_object_member_is_refused(tmp_path, good):
    members = _members(good)
    members["y.npy"] = _npy(np.array([1, "a", None], dtype=object))
    _expect(_write_zip(tmp_path / "obj.npz", members), "key 'y'", "without unpickling")


def test_single_npy_with_a_huge_header_is_not_read(tmp_path):
    path = tmp_path / "single.npz"
    path.write_bytes(_npy_header_only((10 ** 11,)))
    _expect(path, "holds a single array")


# -- 2. edge lists -----------------------------------------------------------------------------

def test_edge_list_id_beyond_int64(tmp_path):
    path = tmp_path / "big.txt"
    path.write_text("0 1\n0 99999999999999999999999\n")
    _expect(path, "big.txt:2:", "99999999999999999999999", "int64", loader=load_graph)


def test_edge_list_id_that_fits_int64_but_not_memory(tmp_path, one_tib):
    path = tmp_path / "sparse_ids.txt"
    path.write_text("0 9000000000000000000\n")
    _expect(path, "num_nodes", "more than the 1099511627776 bytes (1.0 TiB)", loader=load_graph)


# -- 3. paths that are not regular files -------------------------------------------------------

def test_directory_is_not_an_npz(tmp_path):
    with pytest.raises(DataError, match=r"not a regular file \(a directory\)"):
        read_npz(tmp_path)


def _load_in_subprocess(code: str):
    """Run ``code`` in a child process with a timeout and a 4 GiB address-space limit, so a
    regression (opening a FIFO blocks; reading /dev/zero never ends) fails the test instead of
    hanging it or exhausting the machine's memory."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30,
                          cwd=REPO, preexec_fn=limit, env=env)


def _refusal(call: str, path) -> str:
    """What ``morphgen.data.<call>(path)`` says, loaded in a child process."""
    proc = _load_in_subprocess("import morphgen.data as d\n"
                               f"try:\n    d.{call}({str(path)!r})\n"
                               "except d.DataError as e:\n    print(e)\n")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip()


def test_character_device_is_refused():
    assert _refusal("load_graph", "/dev/zero") == "/dev/zero: not a regular file or a directory (a character device)"
    assert _refusal("read_edge_list", "/dev/zero") == "/dev/zero: not a regular file (a character device)"
    assert _refusal("read_npz", "/dev/zero") == "/dev/zero: not a regular file (a character device)"


@pytest.mark.parametrize("call", ["load_dataset", "load_graph", "read_npz", "read_edge_list"])
def test_fifo_is_refused_without_blocking(tmp_path, call):
    fifo = tmp_path / "pipe.npz"
    os.mkfifo(fifo)
    message = _refusal(call, fifo)       # were the FIFO opened, the child would block until killed
    assert message.startswith(f"{fifo}: not a regular file") and message.endswith("(a FIFO)"), message


def test_fifo_inside_a_planetoid_directory(tmp_path):
    for part in ("y", "tx", "ty", "allx", "ally", "graph", "test.index"):
        (tmp_path / f"ind.t.{part}").write_bytes(b"")
    os.mkfifo(tmp_path / "ind.t.x")       # read first
    assert _refusal("read_planetoid", tmp_path) == f"{tmp_path}/ind.t.x: not a regular file (a FIFO)"


# -- 4. declared counts ------------------------------------------------------------------------

def _arrays(good):
    with np.load(good) as z:
        return {k: z[k] for k in z.files}


def test_num_edge_types_far_beyond_the_types_used(tmp_path, good):
    a = _arrays(good)
    e = a["edge_index"].shape[1]
    a["edge_type"] = (np.arange(e) % 90).astype(np.int64)
    a["num_edge_types"] = np.int64(10 ** 8)
    path = tmp_path / "etypes.npz"
    np.savez(path, **a)
    _expect(path, "num_edge_types", "100000000", f"at most {e}")
    # unused trailing types up to the number of edges stay allowed
    a["num_edge_types"] = np.int64(e)
    np.savez(path, **a)
    assert load_dataset(path).graph.num_etypes == e


def test_num_node_types_and_num_classes_beyond_their_nodes(tmp_path, good):
    a = _arrays(good)
    n = int(a["num_nodes"])
    typed = dict(a, node_type=np.zeros(n, np.int64), num_node_types=np.int64(10 ** 9))
    np.savez(tmp_path / "nt.npz", **typed)
    _expect(tmp_path / "nt.npz", "num_node_types", "1000000000", f"at most {n}")
    np.savez(tmp_path / "nc.npz", **dict(a, num_classes=np.int64(10 ** 10)))
    _expect(tmp_path / "nc.npz", "num_classes", "10000000000", f"at most {n}")
    np.savez(tmp_path / "zero.npz", **dict(a, edge_index=np.zeros((2, 0), np.int64),
                                           edge_type=np.zeros(0, np.int64), num_edge_types=np.int64(0)))
    _expect(tmp_path / "zero.npz", "num_edge_types: must be at least 1")


def test_x_shape_columns_beyond_the_stored_values(tmp_path, good):
    a = _arrays(good)
    n = int(a["num_nodes"])
    a.pop("x")
    nnz = 100                                        # one value in column 0 of the first 100 rows
    a.update(x_indptr=np.minimum(np.arange(n + 1), nnz), x_indices=np.zeros(nnz, np.int64),
             x_data=np.ones(nnz, np.float32), x_shape=np.array([n, 10 ** 10]))
    path = tmp_path / "wide.npz"
    np.savez(path, **a)
    _expect(path, "x_shape", "10000000000 columns", f"at most {n}")
    a["x_shape"] = np.array([n, n + 1])
    np.savez(path, **a)
    _expect(path, "x_shape", f"{n + 1} columns")
    a["x_shape"] = np.array([n, n])                  # as wide as a featureless identity input: allowed
    np.savez(path, **a)
    assert load_dataset(path).num_features == n


def test_graph_only_num_nodes_that_cannot_fit(tmp_path, one_tib):
    path = tmp_path / "g.npz"
    np.savez(path, edge_index=np.array([[0], [1]]), num_nodes=np.int64(10 ** 15))
    _expect(path, "num_nodes", "1000000000000000 nodes", "(1.0 TiB) of memory available", loader=load_graph)


@pytest.mark.parametrize("key,value", [("x_shape", np.zeros(0, np.int64)), ("y", np.int64(3))])
def test_row_count_keys_of_the_wrong_shape(tmp_path, good, key, value):
    a = _arrays(good)
    a.pop("num_nodes")           # so the node count is taken from x_shape, or from y (featureless)
    a.pop("x")
    if key == "x_shape":
        a.update(x_indptr=np.zeros(1), x_indices=np.zeros(0), x_data=np.zeros(0, np.float32))
    a[key] = value
    np.savez(tmp_path / "rows.npz", **a)
    _expect(tmp_path / "rows.npz", key)


def _planetoid(directory, test_index, ty=None):
    """A tiny raw Planetoid set: 6 allx rows, 3 test rows, 2 classes, pickled like the originals."""
    onehot = np.eye(2)[[0, 1, 0, 1, 0, 1]]
    parts = {"x": sp.csr_matrix(np.ones((2, 3))), "y": onehot[:2], "allx": sp.csr_matrix(np.ones((6, 3))),
             "ally": onehot, "tx": sp.csr_matrix(np.ones((3, 3))), "ty": onehot[:3] if ty is None else ty,
             "graph": {0: [1], 1: [0]}}
    for part, obj in parts.items():
        (directory / f"ind.t.{part}").write_bytes(pickle.dumps(obj, protocol=2))
    (directory / "ind.t.test.index").write_text("".join(f"{i}\n" for i in test_index))
    return directory


def test_planetoid_test_id_that_pads_beyond_memory(tmp_path, one_tib):
    read_planetoid(_planetoid(tmp_path, [6, 9, 8]))          # a gap at 7 is padded: fine
    _expect(_planetoid(tmp_path, [6, 10 ** 12, 8]), "ind.t.test.index", "test ids span 6..1000000000000",
            "memory available", loader=read_planetoid)


def test_planetoid_sparse_labels_of_a_huge_declared_shape(tmp_path, one_tib):
    _expect(_planetoid(tmp_path, [6, 7, 8], ty=sp.csr_matrix((3, 10 ** 12))), "ind.t.ty",
            "(3, 1000000000000)", "memory available", loader=read_planetoid)


# -- 5. fuzzing --------------------------------------------------------------------------------

_REPLACEMENTS = [
    np.zeros((3, 4), np.float64), np.arange(7, dtype=np.int8), np.ones(300, bool), np.int64(5),
    np.zeros(0, np.int64), np.array(["a", "bc"]), np.full(300, 2 ** 63, np.uint64), np.float32(np.nan),
    np.zeros((2, 2000), np.int32), np.ones((300, 16), np.complex64), np.zeros(300, [("a", "<i4")]),
    np.array("{}"), np.array(10 ** 9, np.int64), np.full((2, 5), -1, np.int64),
]


def _corrupt(raw: bytes, members: dict, rng: random.Random, path: Path) -> str:
    """Write one random corruption of the archive to ``path``; returns what was done."""
    names = list(members)
    kind = rng.choice(["flip", "flip", "truncate", "delete", "duplicate", "random_member", "replace",
                       "header"])
    if kind == "flip":
        data = bytearray(raw)
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(data))
        return kind
    if kind == "truncate":
        path.write_bytes(raw[: rng.randrange(len(raw))])
        return kind
    name = rng.choice(names)
    pairs = list(members.items())
    if kind == "delete":
        pairs = [(k, v) for k, v in pairs if k != name]
    elif kind == "duplicate":
        other = _npy(rng.choice(_REPLACEMENTS)) if rng.random() < 0.5 else members[name]
        pairs.append((name, other))
    elif kind == "random_member":
        pairs = [(k, rng.randbytes(rng.randrange(1, 200)) if k == name else v) for k, v in pairs]
    elif kind == "replace":
        pairs = [(k, _npy(rng.choice(_REPLACEMENTS)) if k == name else v) for k, v in pairs]
    else:   # rewrite the shape in the .npy header (the data stays as it is)
        shape = tuple(rng.choice([0, 1, 2, 299, 300, 301, 10 ** 6, 10 ** 12]) for _ in range(rng.randint(0, 2)))
        descr = rng.choice(["<i8", "<f4", "|b1", "<U10", "|O"])
        header = _npy_header_only(shape, descr, extra=b"")
        data = members[name]
        pairs = [(k, header + data[128:] if k == name else v) for k, v in pairs]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")    # zipfile warns about the duplicate name
        _write_zip(path, pairs, rng.choice([zipfile.ZIP_DEFLATED, zipfile.ZIP_STORED]))
    return f"{kind} {name}"


def test_fuzzed_archives_load_or_raise_data_error(tmp_path, good):
    raw = good.read_bytes()
    members = _members(good)
    rng = random.Random(20240611)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024   # kB on Linux
    outcomes = {"loaded": 0, "refused": 0}
    for i in range(int(os.environ.get("MORPHGEN_FUZZ_CASES", 200))):
        path = tmp_path / f"fuzz{i}.npz"
        what = _corrupt(raw, members, rng, path)
        for loader in (load_dataset, load_graph):
            try:
                result = loader(path)
            except DataError as exc:
                assert str(path) in str(exc), (what, str(exc))
                outcomes["refused"] += 1
            except Exception as exc:      # noqa: BLE001 -- the point: nothing but DataError
                pytest.fail(f"case {i} ({what}), {loader.__name__}: {type(exc).__name__}: {exc}")
            else:
                if loader is load_dataset:
                    assert isinstance(result, Dataset) and result.labels.shape == (result.num_nodes,)
                outcomes["loaded"] += 1
        path.unlink()
    growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    assert growth < 1 << 30, f"peak RSS grew by {growth} bytes"
    # the corruptions must exercise both outcomes, else the test proves nothing
    assert outcomes["refused"] > 100 and outcomes["loaded"] > 0, outcomes


# -- the command line --------------------------------------------------------------------------

def test_cli_reports_a_damaged_key_with_exit_status_2(tmp_path, good):
    raw = bytearray(good.read_bytes())
    with zipfile.ZipFile(good) as zf:
        start = _data_offset(raw, zf.getinfo("train_mask.npy"))
    for i in range(start + 2, start + 30):
        raw[i] ^= 0x55
    path = tmp_path / "corrupt.npz"
    path.write_bytes(bytes(raw))
    proc = subprocess.run([sys.executable, "-m", "morphgen", "train", str(REPO / "examples" / "gcn.mp"),
                           "--dataset", str(path), "--epochs", "1"],
                          capture_output=True, text=True, timeout=300, cwd=REPO,
                          env={k: v for k, v in os.environ.items() if k != "MORPHGEN_DEBUG"})
    text = proc.stdout + proc.stderr
    assert proc.returncode == 2, text[-3000:]
    assert "corrupt.npz" in text and "key 'train_mask'" in text, text[-3000:]
    assert "Traceback" not in text

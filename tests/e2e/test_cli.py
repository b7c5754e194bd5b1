"""The `morphgen` command line as a user meets it: exit codes, located messages, no tracebacks."""
import json
import re
from pathlib import Path

import numpy as np
import pytest

import morphgen
from morphgen.api import TrainingDiverged
from morphgen.errors import UserError

from tests.e2e.support import assert_clean_failure, example, run_cli, small_dataset, typed_dataset

BAD_PROGRAM = """\
function m(Graph g, propNode<float[F]> x, propNode<int[C]> y) {
    gnn.layer(F, 16, activation = "relu");
    gnn.layer(16, C);
    gnn.optimizer("adam", lr = 0.01);
    for (int epoch = 0; epoch < 5; epoch++) {
        for (int l = 0; l < 2; l++) { gnn.forwardPass(l, "GCN", "Sum"); }
        gnn.loss("cross_entropy");
        for (int l = 1; l >= 0; l--) { gnn.backPropagation(l); }
        gnn.optimizerStep(undefined_thing);
    }
}
"""


def _npz(path, n=6, edge_index=None, x=None, **extra):
    """A tiny canonical npz dataset; keyword arguments replace or add keys."""
    arrays = {
        "edge_index": np.array([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]], np.int64) if edge_index is None else edge_index,
        "x": np.ones((n, 4), np.float32) if x is None else x,
        "y": np.array([0, 1, 0, 1, 0, 1], np.int64),
        "train_mask": np.array([1, 1, 0, 0, 0, 0], bool),
        "val_mask": np.array([0, 0, 1, 0, 0, 0], bool),
        "test_mask": np.array([0, 0, 0, 1, 1, 1], bool),
    }
    arrays.update(extra)
    np.savez(path, **arrays)
    return path


def test_version():
    proc = run_cli("--version")
    assert proc.returncode == 0
    assert proc.stdout.startswith("morphgen ") and any(ch.isdigit() for ch in proc.stdout)


def test_check_accepts_a_good_program():
    proc = run_cli("check", example("gcn"))
    assert proc.returncode == 0, proc.stderr
    assert "ok" in proc.stdout and proc.stderr == ""


def test_check_rejects_a_bad_program_with_a_located_message(tmp_path):
    bad = tmp_path / "bad.mp"
    bad.write_text(BAD_PROGRAM)
    proc = run_cli("check", bad)
    assert_clean_failure(proc, 2, f"{bad}:9:", "error:")


def _program_with_an_unused_store(tmp_path):
    """examples/sgc.mp with one more property, assigned after the output and read by nothing."""
    source = example("sgc").read_text()
    head, loop = source.split("for (int epoch", 1)
    body, tail = loop.split("gnn.loss", 1)
    program = tmp_path / "unused.mp"
    program.write_text(head.rstrip() + "\n    propNode<float[C]> unused;\n    for (int epoch" + body
                       + "forall (v in g.nodes()) { v.unused = v.out * 2.0; }\n        gnn.loss" + tail)
    line = program.read_text().splitlines().index("forall (v in g.nodes()) { v.unused = v.out * 2.0; }".join(
        ["        ", ""])) + 1
    return program, line


def test_an_unused_store_is_a_warning_from_check_compile_and_train(tmp_path):
    """A warning is said (located, once) and changes nothing else: check says ok, compile and
    train run, the exit status is 0."""
    program, line = _program_with_an_unused_store(tmp_path)
    checked = run_cli("check", program)
    assert checked.returncode == 0 and "ok" in checked.stdout, checked.stderr
    assert f"{program}:{line}:" in checked.stderr and "warning: 'unused' is assigned here" in checked.stderr
    trained = run_cli("train", program, "--dataset", "synthetic:nodes=120,edges=600,features=17,classes=3",
                      "--epochs", 2, "--threads", 1, "--quiet")
    assert trained.returncode == 0, trained.stderr[-2000:]
    assert trained.stderr.count("warning: 'unused' is assigned here") == 1, trained.stderr
    assert "Traceback" not in trained.stderr


def test_an_unused_store_is_a_python_warning_from_the_api(tmp_path):
    import morphgen
    program, line = _program_with_an_unused_store(tmp_path)
    with pytest.warns(UserWarning, match=f"{program.name}:{line}:.*'unused' is assigned here"):
        morphgen.compile(program)


def test_check_of_a_missing_file(tmp_path):
    proc = run_cli("check", tmp_path / "nowhere.mp")
    assert_clean_failure(proc, 2, "nowhere.mp")


def _gpu_present() -> bool:
    import shutil
    import subprocess
    smi = shutil.which("nvidia-smi")
    return bool(smi) and subprocess.run([smi, "-L"], capture_output=True).returncode == 0


def test_cuda_without_a_gpu_says_so_and_names_the_emulation():
    if _gpu_present():
        pytest.skip("this machine has a GPU: tests/cuda trains on it instead")
    proc = run_cli("train", example("gcn"), "--backend", "cuda", "--epochs", "1", env={"MORPHGEN_CUDA_EMULATION": ""})
    assert_clean_failure(proc, 2, "no usable CUDA GPU", "MORPHGEN_CUDA_EMULATION=1")
    assert "internal error" not in proc.stderr


def test_missing_dataset_name(tmp_path):
    proc = run_cli("train", example("gcn"), "--dataset", "no_such_set", "--data-dir", tmp_path, "--epochs", "1")
    assert_clean_failure(proc, 2, "no_such_set", "not found")


def test_out_of_range_edge_index(tmp_path):
    data = _npz(tmp_path / "bad_edges.npz", edge_index=np.array([[0, 1, 2], [1, 2, 9]], np.int64))
    proc = run_cli("train", example("gcn"), "--dataset", data, "--epochs", "1")
    assert_clean_failure(proc, 2, "bad_edges.npz", "edge_index", "9")


def test_nan_features(tmp_path):
    x = np.ones((6, 4), np.float32)
    x[2, 3] = np.nan
    data = _npz(tmp_path / "nan_x.npz", x=x)
    proc = run_cli("train", example("gcn"), "--dataset", data, "--epochs", "1")
    assert_clean_failure(proc, 2, "nan_x.npz", "features", "row 2", "column 3")


def test_label_out_of_range(tmp_path):
    data = _npz(tmp_path / "bad_y.npz", y=np.array([0, 1, 0, 7, 0, 1], np.int64), num_classes=np.int64(2))
    proc = run_cli("train", example("gcn"), "--dataset", data, "--epochs", "1")
    assert_clean_failure(proc, 2, "bad_y.npz", "y")


@pytest.mark.parametrize("flag,value", [("--epochs", "0"), ("--threads", "0"), ("--threads", "-3")])
def test_non_positive_counts_are_refused_before_compiling(flag, value):
    counts = {"--epochs": "1", "--threads": "2", flag: value}
    proc = run_cli("train", example("gcn"), "--dataset",
                   "synthetic:nodes=120,edges=600,features=17,classes=3,train_per_class=10,val=20,test=30,seed=1",
                   "--sparsity-threshold", "0.9", *[a for kv in counts.items() for a in kv])
    assert_clean_failure(proc, 2, f"{flag} must be positive, got {value}")
    assert "compiling" not in proc.stderr


@pytest.mark.parametrize("threads", [0, -1, 1.5, "2", True])
def test_the_api_refuses_a_thread_count_that_is_not_a_positive_integer(threads):
    with pytest.raises(UserError, match="threads must be a positive integer"):
        morphgen.compile(example("gcn"), threads=threads)


@pytest.mark.parametrize("setting, message", [
    ({"seed": -1}, "seed must be an integer 0 .. 2**63-1"), ({"seed": "a"}, "seed must be an integer"),
    ({"sparsity_threshold": float("nan")}, "sparsity_threshold must be a number in [0, 1]"),
    ({"sparsity_threshold": 5}, "sparsity_threshold must be a number in [0, 1]")])
def test_the_api_refuses_a_bad_seed_or_threshold_when_compiling(setting, message):
    with pytest.raises(UserError, match=re.escape(message)):
        morphgen.compile(example("gcn"), **setting)


def test_the_api_needs_a_bound_model_and_refuses_weights_it_would_ignore_or_hide():
    model = morphgen.compile(example("gcn"), threads=1)
    for method in ("evaluate", "predict", "get_params"):
        with pytest.raises(UserError, match=re.escape(f"{method}() needs a bound model")):
            getattr(model, method)()
    model.fit(small_dataset(), epochs=1)
    weight = model.get_params()["layer0.W"]
    for params, message in (({"layer0.w": weight}, "no weight 'layer0.w'; did you mean 'layer0.W'?"),
                            ([weight], "takes a dict of weights by name, not list"),
                            ({"layer0.W": np.full_like(weight, np.nan)}, "'layer0.W' holds NaN or infinite values"),
                            # [out, in] as another framework stores it: the same size, refused
                            ({"layer0.W": weight.reshape(16, -1)}, "'layer0.W' has shape [17, 16] "
                                                                   "(272 values flat, as get_params() gives it), got [16, 17]"),
                            ({"layer0.W": weight.astype(np.complex64)}, "'layer0.W' must hold real numbers"),
                            ({"layer0.W": "abc"}, "'layer0.W' must hold real numbers")):
        with pytest.raises(UserError, match=re.escape(message)):
            model.set_params(params)
    np.testing.assert_array_equal(model.get_params()["layer0.W"], weight)
    model.set_params({"layer0.W": weight.reshape(17, 16)})      # the declared [in, out] shape
    np.testing.assert_array_equal(model.get_params()["layer0.W"], weight)
    # NaN weights behind a relu leave the loss finite (max(NaN, 0) is 0): fit looks at the weights
    model.session.set_params({"layer0.W": np.full_like(weight, np.nan)})
    with pytest.raises(TrainingDiverged, match=re.escape("weights became NaN or infinite during training (layer0.W")):
        model.fit(epochs=1)


def test_fit_takes_a_dataset_spec_and_continues_on_the_same_one():
    """fit("cora") loads as `morphgen train --dataset cora` does; fit with the same spec again
    continues training (as with the same dataset object) instead of binding afresh."""
    from morphgen.data import load_dataset
    spec = "synthetic:nodes=300,edges=1200,features=16,classes=3,seed=4"
    by_spec = morphgen.compile(example("gcn"), threads=1)
    by_spec.fit(spec, epochs=2)
    by_spec.fit(spec, epochs=2)
    by_object = morphgen.compile(example("gcn"), threads=1)
    by_object.fit(load_dataset(spec), epochs=4)
    for name, value in by_object.get_params().items():
        np.testing.assert_array_equal(by_spec.get_params()[name], value, err_msg=name)
    other = "synthetic:nodes=300,edges=1200,features=16,classes=3,seed=5"
    by_spec.bind(other)                     # a different spec binds afresh
    assert by_spec.dataset.num_nodes == 300 and by_spec._bound_spec == other


@pytest.mark.parametrize("args, message", [
    (({"x": 1},), "fit() takes a dataset from morphgen.data.load_dataset or its name, path or synthetic spec, not dict"),
    (("no-such-dataset",), "no-such-dataset"),
    ((None, 0), "epochs must be a positive integer, got 0"), ((None, 2.5), "epochs must be a positive integer"),
    ((None, 3, None, -1), "eval_every must be an integer >= 0")])
def test_fit_refuses_bad_arguments_before_training(args, message):
    with pytest.raises(UserError, match=re.escape(message)):
        morphgen.compile(example("gcn"), threads=1).fit(*args)


@pytest.mark.parametrize("args, message", [
    (("--seed", "-1"), "argument --seed: -1 is out of range"),
    (("--sparsity-threshold", "nan"), "argument --sparsity-threshold: nan is not in [0, 1]"),
    (("--dataset", "cora", "--data-dir", "/no/such/folder"), "morphgen: error: data_dir /no/such/folder: no such folder"),
    (("--dataset", "synthetic:nodes=1000000000000"), "needs 296000000960000 bytes")])
def test_bad_train_settings_are_refused_with_their_reason(args, message):
    assert_clean_failure(run_cli("train", example("gcn"), "--quiet", *args), 2, message)


def test_rgat_trains_on_a_featureless_dataset(tmp_path):
    """rgat.mp reads the features only through weights (x * W[r], then a dot with a[r]); the
    linear-operator reordering must not turn that into a dot with the identity rows themselves,
    which a featureless dataset cannot provide (aifb and mutag are featureless)."""
    from morphgen.data import save_npz
    data = save_npz(typed_dataset(features=None), tmp_path / "typed.npz")
    proc = run_cli("train", example("rgat"), "--dataset", data, "--epochs", "1", "--threads", "2", "--quiet")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]


@pytest.mark.parametrize("where", ["elementwise", "aggregation"])
def test_a_program_that_reads_raw_features_on_a_featureless_dataset(tmp_path, where):
    """An elementwise function of the features, or their aggregation (GIN sums x before its MLP),
    needs real features: a located user error, not an internal one."""
    from morphgen.data import save_npz
    data = save_npz(typed_dataset(features=None), tmp_path / "typed.npz")
    if where == "elementwise":
        program = tmp_path / "raw.mp"
        program.write_text(RAW_FEATURES)
    else:
        program = example("gin")
    proc = run_cli("train", program, "--dataset", data, "--epochs", "1", "--quiet")
    assert_clean_failure(proc, 2, f"{program}:", "reads the input features directly")
    last = proc.stderr.strip().splitlines()[-1]       # after the "compiling ..." line
    assert last.startswith(f"{program}:") and last.count("error:") == 1, proc.stderr


def test_a_program_that_reads_edge_weights_on_an_unweighted_dataset_is_a_located_error():
    program = example("gcn_weighted")
    proc = run_cli("train", program, "--dataset", "synthetic:nodes=200,edges=1000", "--epochs", "1", "--quiet")
    line = next(i for i, text in enumerate(program.read_text().splitlines(), 1) if "e.edge_weight)" in text)
    assert_clean_failure(proc, 2, f"{program}:{line}:", "e.edge_weight: the dataset has no edge weights",
                         "'edge_weight', float [E]")


def test_a_weighted_dataset_trains_the_weighted_example_from_the_command_line(tmp_path):
    proc = run_cli("train", example("gcn_weighted"), "--dataset", "synthetic:nodes=200,edges=1000,weighted=1",
                   "--epochs", "3", "--json", tmp_path / "run.json", "--quiet")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(json.loads((tmp_path / "run.json").read_text())["history"]) == 3
    assert "carry weights, which this program does not read" not in proc.stderr
    unread = run_cli("train", example("gcn"), "--dataset", "synthetic:nodes=200,edges=1000,weighted=1",
                     "--epochs", "1", "--quiet")
    assert unread.returncode == 0, unread.stderr[-3000:]
    assert "note: the edges of synthetic carry weights, which this program does not read" in unread.stderr


RAW_FEATURES = """\
function m(Graph g, propNode<float[F]> x, propNode<int[C]> y) {
    weight<float[F][C]> W = glorot;
    propNode<float[C]> out;
    gnn.optimizer("adam", lr = 0.01);
    for (int epoch = 0; epoch < 2; epoch++) {
        forall (v in g.nodes()) { v.out = (v.x + sigmoid(v.x)) * W; }
        gnn.loss(out, "cross_entropy");
        gnn.backPropagation();
        gnn.optimizerStep();
    }
}
"""


def test_compile_emit_ir_prints_forward_and_backward():
    proc = run_cli("compile", example("gcn"), "--emit", "ir")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "forward:" in out and "backward:" in out
    assert out.index("forward:") < out.index("backward:")
    assert "aggregate(" in out and "cross_entropy_grad(" in out
    assert "grad layer0.W" in out


def test_compile_writes_sources_ir_and_library(tmp_path):
    out = tmp_path / "out"
    proc = run_cli("compile", example("gcn"), "-o", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "model.cpp").is_file() and "mg_train_epoch" in (out / "model.cpp").read_text()
    assert "backward:" in (out / "program.ir").read_text()
    libs = list(out.glob("*.so"))
    assert len(libs) == 1 and libs[0].stat().st_size > 10_000
    assert libs[0].read_bytes()[:4] == b"\x7fELF"


def test_compile_of_a_bad_program(tmp_path):
    bad = tmp_path / "bad.mp"
    bad.write_text(BAD_PROGRAM)
    proc = run_cli("compile", bad, "--emit", "ir")
    assert_clean_failure(proc, 2, f"{bad}:9:")


def test_a_pass_that_breaks_the_ir_is_an_internal_error_not_a_program_diagnostic(monkeypatch, capsys):
    """The user's program is valid: a compiler bug must not come back as FILE:LINE:COL: error,
    which tells them to edit it; it is an internal error (exit 3) naming where compiling broke."""
    from morphgen import cli, passes
    real = passes.remove_dead_forward

    def misorders_the_forward(program):         # a planted pass bug: reads before definitions
        removed = real(program)
        program.forward[0], program.forward[1] = program.forward[1], program.forward[0]
        return removed
    monkeypatch.setattr(passes, "remove_dead_forward", misorders_the_forward)
    monkeypatch.delenv("MORPHGEN_DEBUG", raising=False)
    assert cli.main(["compile", str(example("gcn")), "--emit", "ir"]) == 3
    err = capsys.readouterr().err
    assert err.startswith(f"morphgen: internal error: while compiling {example('gcn')}:"), err
    assert "before it is defined" in err and "(a bug in morphgen, not in the program)" in err
    assert ": error:" not in err


def test_train_hoists_the_first_aggregation_unless_told_not_to(tmp_path):
    """Dense features: the first layer's aggregation is computed once (reported), same losses."""
    data = "synthetic:nodes=200,edges=1200,features=24,classes=3,val=40,test=60,seed=2"
    runs = {}
    for flag in ([], ["--no-hoist"]):
        out = tmp_path / f"run{len(runs)}.json"
        proc = run_cli("train", example("gcn3"), "--dataset", data, "--epochs", "3", "--threads", "2",
                       "--sparsity-threshold", "1", "--json", out, "--quiet", *flag)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[tuple(flag)] = (proc.stderr, json.loads(out.read_text()))
    (hoisted_err, hoisted), (plain_err, plain) = runs[()], runs[("--no-hoist",)]
    assert hoisted["hoisted_aggregations"] == 1 and plain["hoisted_aggregations"] == 0
    assert "computed once instead of every epoch" in hoisted_err
    assert "computed once" not in plain_err
    assert hoisted["prepare_seconds"] >= 0
    np.testing.assert_allclose([r["loss"] for r in hoisted["history"]],
                               [r["loss"] for r in plain["history"]], rtol=1e-5)


def test_profile_ops_times_each_ir_op(tmp_path):
    """--profile-ops: a timer per IR op, named by its kernel family, value id and opcode (as
    `compile --emit plan` lists the ops); the optimizer keeps its family's timer.  The same
    training: the timers change only what the library counts."""
    data = "synthetic:nodes=200,edges=1200,features=24,classes=3,val=40,test=60,seed=2"
    out = tmp_path / "ops.json"
    proc = run_cli("train", example("gcn"), "--dataset", data, "--epochs", "3", "--threads", "1", "--json", out,
                   "--quiet", "--profile-ops", env={"MORPHGEN_OPT_LEVEL": "0"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {r["kernel"]: r for r in json.loads(out.read_text())["profile"]}
    per_op = [name for name, r in rows.items() if r["calls"] and ": %" in name]
    assert any(name.startswith("aggregate: %") and name.endswith(" aggregate") for name in per_op), per_op
    assert any(name.startswith("aggregate_backward: %") for name in per_op), per_op
    assert rows["optimizer"]["calls"] > 0 and rows["aggregate"]["calls"] == 0
    assert "aggregate: %" in proc.stdout and "kernel timers" in proc.stdout
    refused = run_cli("train", example("gcn"), "--dataset", data, "--backend", "mpi", "--profile-ops", "--quiet")
    assert_clean_failure(refused, 2, "--profile-ops times the ops of one process")


@pytest.mark.parametrize("flag", ["--json", "--checkpoint"])
def test_an_unwritable_output_is_refused_before_training(tmp_path, flag):
    proc = run_cli("train", example("gcn"), "--epochs", "1", "--quiet", flag, tmp_path / "missing" / "out")
    assert_clean_failure(proc, 2, flag, "does not exist or is not writable")
    assert "compiling" not in proc.stderr          # refused before any work
    proc = run_cli("train", example("gcn"), "--epochs", "1", "--quiet", flag, tmp_path)
    assert_clean_failure(proc, 2, "is a directory")
    # a folder where nothing can be created, whatever os.access says to root
    proc = run_cli("train", example("gcn"), "--epochs", "1", "--quiet", flag, "/proc/morphgen-out")
    assert_clean_failure(proc, 2, flag, "does not exist or is not writable")
    assert "compiling" not in proc.stderr


def test_json_report_is_written_atomically(tmp_path):
    report = tmp_path / "run.json"
    report.write_text('{"written_by": "morphgen 0.1.0", "epochs": 7}')     # an earlier run's report
    proc = run_cli("train", example("gcn"), "--epochs", "1", "--quiet", "--json", report)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(report.read_text())["epochs"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]


SIZE_CONFLICTS = {
    # body line, what the message says; each passes `check` (F and C are unknown there)
    "linear_rows": ("v.out = (v.x * W100) * W2;", "linear: input width 4 does not match weight rows 100"),
    "loss_width": ("v.out = v.x * W16;", "the loss needs one logit per class (2), but the output has width 16"),
    "dot_widths": ("v.out = (v.x * W16) * W2 * dot(v.x * W16, v.x);", "dot: widths 16 and 4 differ"),
    "declared_width": ("v.out = (v.x * W16) * W2;", "property 'out' is declared with width 5, but the value has width C = 2"),
}


@pytest.mark.parametrize("case", sorted(SIZE_CONFLICTS))
def test_a_shape_only_the_dataset_reveals_is_a_located_error(tmp_path, case):
    body, message = SIZE_CONFLICTS[case]
    out_width = {"loss_width": "16", "declared_width": "5"}.get(case, "C")
    program = tmp_path / "sizes.mp"
    program.write_text(f"""\
function m(Graph g, propNode<float[F]> x, propNode<int[C]> y) {{
    weight<float[100][C]> W100 = glorot;
    weight<float[F][16]> W16 = glorot;
    weight<float[16][C]> W2 = glorot;
    propNode<float[{out_width}]> out;
    gnn.optimizer("adam", lr = 0.01);
    for (int epoch = 0; epoch < 2; epoch++) {{
        forall (v in g.nodes()) {{ {body} }}
        gnn.loss(out, "cross_entropy");
        gnn.backPropagation();
        gnn.optimizerStep();
    }}
}}
""")
    if case == "linear_rows":
        program.write_text(program.read_text().replace("[100][C]", "[100][16]"))
    assert run_cli("check", program).returncode == 0
    proc = run_cli("train", program, "--dataset", _npz(tmp_path / "d.npz"), "--epochs", "1", "--quiet")
    line = 9 if case == "loss_width" else 8
    assert_clean_failure(proc, 2, f"{program}:{line}:", f"error: {message}", "with the dataset's sizes")


def test_a_run_that_cannot_fit_in_memory_is_refused_before_it_allocates(tmp_path):
    """A 200000 x 200000 weight with Adam needs about 600 GiB: say so, before compiling."""
    program = tmp_path / "huge.mp"
    program.write_text("""\
function huge(Graph g, propNode<float[F]> x, propNode<int[C]> y) {
    weight<float[F][200000]> W1 = glorot;
    weight<float[200000][200000]> W2 = glorot;
    weight<float[200000][C]> W3 = glorot;
    propNode<float[C]> out;
    gnn.optimizer("adam", lr = 0.01);
    for (int epoch = 0; epoch < 2; epoch++) {
        forall (v in g.nodes()) { v.out = relu(relu(v.x * W1) * W2) * W3; }
        gnn.loss(out, "cross_entropy");
        gnn.backPropagation();
        gnn.optimizerStep();
    }
}
""")
    proc = run_cli("train", program, "--dataset", _npz(tmp_path / "d.npz"), "--epochs", "1", "--quiet",
                   timeout=120)
    assert_clean_failure(proc, 2, "needs about", "parameters and optimizer state", "of memory is available")


def test_the_memory_estimate_counts_what_a_run_holds(monkeypatch):
    """The refusal is driven by the estimate against what the system says is free."""
    import morphgen
    from morphgen import resources
    from morphgen.errors import UserError
    from tests.e2e.support import small_dataset
    data = small_dataset()
    monkeypatch.setattr(resources, "available_memory", lambda: 64 * 1024)
    with pytest.raises(UserError, match=r"needs about .*, but only 0\.1 MiB of memory is available"):
        morphgen.compile(example("gcn"), threads=2).bind(data)
    monkeypatch.setattr(resources, "available_memory", lambda: 1 << 40)
    morphgen.compile(example("gcn"), threads=2).bind(data)


def test_the_memory_estimate_does_not_count_features_the_kernels_never_copy():
    """Wide sparse features with a dropout (examples/gcn.mp): the sparse path applies the mask
    inside its kernels and holds the features once, as CSR.  The estimate must not charge an
    N x F dense copy for the input or for its dropout (a NELL-shaped run was refused for
    "30 GiB" of activations that never exist)."""
    import morphgen
    from morphgen.pipeline import run_memory_estimate
    from morphgen.data import synthetic_dataset
    data = synthetic_dataset(nodes=2000, edges=8000, features=20000, sparsity=0.995, classes=5, seed=1)
    model = morphgen.compile(example("gcn"), threads=1, sparsity_threshold=0.5).build(data)
    assert model.feature_path[0] == "sparse"
    kept = set(model._emitter.feature_like)
    assert kept, "the dropout of the features stays in their sparse format"
    dense_copy = data.graph.num_nodes * data.num_features * 4
    estimate = run_memory_estimate(model.program, data, "sparse", kept)
    assert estimate["activations and gradients"] < dense_copy / 10, estimate
    naive = run_memory_estimate(model.program, data, "sparse")
    assert naive["activations and gradients"] >= dense_copy      # the dropout's buffer, were it dense


def test_the_memory_estimate_does_not_count_gathers_read_in_place():
    """examples/gat.mp: 8 heads of 8 features, so every gathered message would be an E x 64
    array; the OpenMP lowering reads them in place (plan_edge_traversals), and the estimate
    that decides whether a run fits must not charge for them."""
    import morphgen
    from morphgen.pipeline import run_memory_estimate
    from morphgen.data import synthetic_dataset
    data = synthetic_dataset(nodes=3000, edges=60000, features=16, classes=4, seed=2)
    model = morphgen.compile(example("gat"), threads=1).build(data)
    unstored = model._emitter.unstored_values()
    edge_copy = (data.graph.num_edges + data.graph.num_nodes) * 64 * 4     # one gathered message
    estimate = run_memory_estimate(model.program, data, model.feature_path[0], unstored)
    naive = run_memory_estimate(model.program, data, model.feature_path[0])
    assert naive["activations and gradients"] - estimate["activations and gradients"] >= edge_copy, (naive, estimate)


def test_the_memory_estimate_counts_the_typed_linear_edge_rows():
    """examples/hgt.mp reads its keys and messages through product-row layouts
    (runtime/edge_rows.h) whose gradient scratch is M floats per row: the estimate charges it,
    less in the compact layout (one row per (source, edge type) pair) than in the edge layout."""
    from morphgen import pipeline
    from morphgen.data import synthetic_dataset
    data = synthetic_dataset(nodes=500, edges=20000, features=16, classes=4, etypes=3, val=100, test=100, seed=2)
    graph = data.graph
    parts = {layout: pipeline.run_memory_estimate(
                 pipeline.lower(example("hgt"), pipeline.sizes_of(data), False, False, False, layout, graph),
                 data, "dense")
             for layout in ("compact", "edge")}
    pairs = pipeline.edge_type_pairs(graph)["src"]
    compact, edge = (parts[k]["typed-linear edge rows"] for k in ("compact", "edge"))
    assert pairs < graph.num_edges / 5                      # many edges per (source, type) pair
    assert 4 * pairs * 64 <= compact < edge and edge >= 4 * graph.num_edges * 64, (compact, edge)
    gcn = pipeline.run_memory_estimate(pipeline.lower(example("gcn"), pipeline.sizes_of(data)), data, "dense")
    assert "typed-linear edge rows" not in gcn


def test_compile_reads_typed_linears_at_edge_ends_in_place_as_train_does():
    """Without a dataset `compile` lays the typed linears of HGT's keys and messages out compact
    (train's auto without a graph to weigh); --edge-typed-layout gathered copies the rows first."""
    fused = run_cli("compile", example("hgt"), "--emit", "plan")
    assert fused.returncode == 0, fused.stderr
    assert fused.stdout.count("= edge_typed_linear ") == 2
    assert fused.stdout.count("mg::op::edge_typed_linear x2 blocks") == 2        # HGTConv's per-head blocks
    gathered = run_cli("compile", example("hgt"), "--emit", "plan", "--edge-typed-layout", "gathered")
    assert gathered.returncode == 0, gathered.stderr
    assert "edge_typed_linear" not in gathered.stdout and gathered.stdout.count("= typed_linear ") >= 6
    assert gathered.stdout.count("mg::op::typed_linear x2 blocks") == 2


def test_compile_emit_plan_shows_each_ops_kernel_fusion_and_buffer():
    from morphgen import pipeline
    proc = run_cli("compile", example("gcn"), "--emit", "plan")
    assert proc.returncode == 0, proc.stderr
    rows = proc.stdout.splitlines()
    program = pipeline.lower(example("gcn"))
    ops = program.invariant + program.forward + program.backward
    assert len(rows) == 1 + len(ops) + 1          # header, one row per IR op, the optimizer
    by_value = {row.split()[1]: row for row in rows[1:-1]}
    assert "mg::op::linear_features" in by_value["%4"]          # the input features' own kernel
    assert "written as %8" in by_value["%5"]                     # the aggregation writes relu's result
    assert "(in its kernel)" in by_value["%8"] and "%5 aggregate" in by_value["%8"]
    assert "buffer b" in by_value["%8"]
    assert rows[-1].startswith("optimizer adam step on 4 parameters")


def test_compile_for_a_dataset_shows_the_plan_train_builds():
    """The width-dependent rewrites need sizes: with --dataset, SAGE's first aggregation runs after
    the product, on its 64 columns, not on the 300 features; without, on the features' width."""
    wide = "synthetic:nodes=200,edges=900,features=300,classes=3,train_per_class=10,val=20,test=30,sparsity=0.0,seed=1"
    bound = run_cli("compile", example("sage"), "--emit", "plan", "--dataset", wide)
    assert bound.returncode == 0, bound.stderr
    assert "feature path dense" in bound.stderr
    aggregations = [row for row in bound.stdout.splitlines() if row.startswith("forward") and "= aggregate " in row]
    assert aggregations and "node[64]" in aggregations[0]
    unbound = run_cli("compile", example("sage"), "--emit", "plan")
    assert unbound.returncode == 0, unbound.stderr
    assert "node[F]" in next(row for row in unbound.stdout.splitlines() if "= aggregate " in row)
    refused = run_cli("compile", example("sage"), "--dataset", wide)      # --emit lib: train builds that
    assert refused.returncode == 2 and "--dataset is for --emit ir, plan or cpp" in refused.stderr


def test_the_plan_shows_what_is_computed_once_at_load_time():
    """gcn3's first aggregation of dense features is hoisted; weighted, with its own read of the weights."""
    data = "synthetic:nodes=200,edges=900,features=40,classes=3,train_per_class=10,val=20,test=30,sparsity=0.0,seed=1"
    for program, kernels in (("gcn3", ["mg::op::aggregate_features_once"]),
                             ("bench/gcn3_weighted", ["mg::op::edge_weight", "mg::op::aggregate_features_once"])):
        proc = run_cli("compile", example(program), "--emit", "plan", "--dataset",
                       data + (",weighted=1" if "weighted" in program else ""))
        assert proc.returncode == 0, proc.stderr
        rows = [row for row in proc.stdout.splitlines() if row.startswith("invariant")]
        assert [row.split()[4] for row in rows] == kernels, proc.stdout
        assert all("computed once at load time" in row for row in rows)


def test_train_reports_its_edge_typed_layouts_and_every_layout_trains_alike(tmp_path):
    """R-GAT's projections of rows read at edge ends, in each layout: the same losses, the
    chosen layouts said on stderr and in the JSON (gathered: the unfused form, none listed)."""
    from morphgen.data import save_npz
    data = save_npz(typed_dataset(features=7), tmp_path / "typed.npz")
    runs = {}
    for layout in ("gathered", "edge", "compact", "auto"):
        out = tmp_path / f"{layout}.json"
        proc = run_cli("train", example("rgat"), "--dataset", data, "--epochs", "3", "--threads", "2",
                       "--edge-typed-layout", layout, "--json", out, "--quiet",
                       env={"MORPHGEN_OPT_LEVEL": "0"})     # four builds: numbers, not speed
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[layout] = (proc.stderr, json.loads(out.read_text()))
    assert runs["gathered"][1]["edge_typed_layouts"] == []
    assert "rows read at edge ends" not in runs["gathered"][0]
    for layout in ("edge", "compact"):
        err, report = runs[layout]
        assert report["edge_typed_layouts"] and all(t.endswith(layout) for t in report["edge_typed_layouts"])
        assert f"src 7->16 {layout}" in err
    assert {t.rsplit(" ", 1)[1] for t in runs["auto"][1]["edge_typed_layouts"]} <= {"edge", "compact"}
    reference = [r["loss"] for r in runs["gathered"][1]["history"]]
    for layout in ("edge", "compact", "auto"):
        np.testing.assert_allclose([r["loss"] for r in runs[layout][1]["history"]], reference, rtol=1e-5)


def test_the_edge_typed_layout_choices_are_the_apis():
    from morphgen.api import EDGE_TYPED_LAYOUTS
    proc = run_cli("train", "--help")
    assert "{" + ",".join(EDGE_TYPED_LAYOUTS) + "}" in proc.stdout.replace("\n", "").replace(" ", "")


def test_a_layer_output_declared_narrower_than_the_classes_is_a_located_error(tmp_path):
    """`check` cannot know C; binding the dataset's sizes settles the declared width."""
    from morphgen.grammar.diagnostics import CompileError
    from morphgen.pipeline import lower
    program = tmp_path / "outw.mp"
    program.write_text(example("gcn").read_text().replace(
        "gnn.optimizer(", "propNode<float[5]> z;\n    gnn.optimizer(").replace(
        'gnn.forwardPass(l, "GCN", "Sum");', 'if (l == 0) { gnn.forwardPass(0, "GCN", "Sum"); } '
                                            'else { gnn.forwardPass(1, "GCN", "Sum", output = z); }').replace(
        'gnn.loss("cross_entropy")', 'gnn.loss(z, "cross_entropy")'))
    assert run_cli("check", program).returncode == 0
    lower(program, sizes={"F": 4, "C": 5, "N": 6, "etypes": 1, "ntypes": 1})      # 5 classes: it fits
    with pytest.raises(CompileError, match=re.escape("property 'z' (layer 1's output) is declared with width 5, "
                                                     "but the value has width C = 7")):
        lower(program, sizes={"F": 4, "C": 7, "N": 6, "etypes": 1, "ntypes": 1})


def test_labels_edited_after_binding_do_not_reach_the_library():
    """The model holds its own copy of the labels, as of the masks: an edit after bind() (here
    a label far out of range, which the kernels would index with) changes nothing until the
    dataset is bound again, where it is checked."""
    from morphgen.data import load_dataset
    spec = "synthetic:nodes=300,edges=1200,features=16,classes=3,seed=4"
    edited, untouched = load_dataset(spec), load_dataset(spec)
    model = morphgen.compile(example("gcn"), threads=1)
    model.fit(edited, epochs=2)
    edited.labels[:] = 10 ** 8
    model.fit(edited, epochs=2)
    reference = morphgen.compile(example("gcn"), threads=1)
    reference.fit(untouched, epochs=4)
    for name, value in reference.get_params().items():
        np.testing.assert_array_equal(model.get_params()[name], value, err_msg=name)


def test_the_api_saves_checkpoints_only_over_earlier_checkpoints(tmp_path):
    """model.save_checkpoint / fit(checkpoint=...) refuse what `train --checkpoint` refuses,
    and fit says so before it trains."""
    spec = "synthetic:nodes=300,edges=1200,features=16,classes=3,seed=4"
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    model = morphgen.compile(example("gcn"), threads=1)
    with pytest.raises(UserError, match="exists and is not a morphgen checkpoint"):
        model.fit(spec, epochs=1, checkpoint=notes)
    assert model.session.epoch() == 0 and notes.read_text() == "my notes"
    with pytest.raises(UserError, match="is the program; writing there would destroy it"):
        model.save_checkpoint(example("gcn"))
    with pytest.raises(UserError, match="saved to a file name"):
        model.save_checkpoint(None)
    model.fit(spec, epochs=1, checkpoint=tmp_path / "run.ck")
    model.fit(spec, epochs=1, checkpoint=tmp_path / "run.ck")     # an earlier checkpoint: replaced
    assert model.session.epoch() == 2


def test_a_diverged_run_exits_1_not_as_bad_input(tmp_path):
    """Exit statuses (slurm/README.md): 1 a run that failed on the way, 2 bad input."""
    program = tmp_path / "hot.mp"
    program.write_text(Path(example("gcn")).read_text().replace("lr = 0.01", "lr = 1e30"))
    proc = run_cli("train", program, "--dataset", "synthetic:nodes=300,edges=1200,features=16,classes=3",
                   "--epochs", 5, "--threads", 1)
    assert_clean_failure(proc, 1, "morphgen: error:")
    assert "the loss became" in proc.stderr or "weights became NaN" in proc.stderr, proc.stderr


def test_fit_on_the_mpi_backend_says_how_to_run_it():
    model = morphgen.compile(example("gcn"), backend="mpi", threads=1)
    with pytest.raises(UserError, match=re.escape("run `morphgen train MODEL.mp --backend mpi --ranks N`")):
        model.fit("synthetic:nodes=100,edges=300,features=4,classes=2", epochs=1)


def test_fit_on_another_dataset_after_training_warns_that_it_starts_afresh():
    model = morphgen.compile(example("gcn"), threads=1)
    model.fit("synthetic:nodes=100,edges=300,features=4,classes=2", epochs=1)
    with pytest.warns(UserWarning, match="starts from its initial weights"):
        model.fit("synthetic:nodes=100,edges=300,features=4,classes=2,seed=1", epochs=1)
    assert model.session.epoch() == 1


def test_a_dataset_without_validation_nodes_is_noted(tmp_path):
    """aifb has none: its val_acc of 0 is no measurement, and train says so."""
    from morphgen.data import save_npz
    from morphgen.data.synthetic import synthetic_dataset
    data = save_npz(synthetic_dataset(nodes=120, edges=600, features=8, classes=3, train_per_class=10,
                                      val=0, test=30, seed=1), tmp_path / "noval.npz")
    proc = run_cli("train", example("gcn"), "--dataset", data, "--epochs", 1, "--quiet", "--threads", 1)
    assert proc.returncode == 0, proc.stderr
    assert "has no validation nodes; val_acc below reads 0" in proc.stderr
    with_val = save_npz(small_dataset(), tmp_path / "small.npz")
    proc = run_cli("train", example("gcn"), "--dataset", with_val, "--epochs", 1, "--quiet", "--threads", 1)
    assert proc.returncode == 0 and "validation nodes" not in proc.stderr, proc.stderr

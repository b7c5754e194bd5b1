"""The calibration cache: keyed by CPU, threads, method and the kernel sources; stale entries go."""
import json

from morphgen import calibrate as cal


def _fake(rho):
    return cal.Calibration(rho=rho, tau=1 - rho, sparse_gflops=1.0, dense_gflops=2.0, triad_gbs=3.0,
                           threads=2, source="measured")


def test_new_kernels_remeasure_and_replace_their_stale_entry(tmp_path, monkeypatch):
    cache = tmp_path / "calibration.json"
    monkeypatch.setattr(cal, "_cache_file", lambda: cache)
    measured = []

    def measure(threads=None):
        measured.append(threads)
        return _fake(0.3 + 0.1 * len(measured))
    monkeypatch.setattr(cal, "measure", measure)
    monkeypatch.setattr(cal, "_kernels_digest", lambda: "aaaa")
    prefix = cal._machine_prefix(2)
    cache.write_text(json.dumps({prefix + "v1-old": {"rho": 0.9}, "othercpu-t2-v2": {"rho": 0.5}}))

    first = cal.calibrate(2)
    assert first.source == "measured" and first.rho == 0.4
    assert cal.calibrate(2).source == "cache" and len(measured) == 1      # same kernels: from the cache

    monkeypatch.setattr(cal, "_kernels_digest", lambda: "bbbb")          # the kernels changed
    again = cal.calibrate(2)
    assert again.source == "measured" and again.rho == 0.5
    table = json.loads(cache.read_text())
    assert list(k for k in table if k.startswith(prefix)) == [cal._machine_key(2)]
    assert table[cal._machine_key(2)]["rho"] == 0.5
    assert "othercpu-t2-v2" in table                                      # other machines are kept


def test_the_kernel_digest_follows_the_sources(tmp_path, monkeypatch):
    for name, text in (("a.h", "int a;"), ("b.h", "int b;")):
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(cal, "kernel_include_dir", lambda: tmp_path)
    before = cal._kernels_digest()
    (tmp_path / "b.h").write_text("int b2;")
    assert cal._kernels_digest() != before


def test_a_disturbed_crossover_run_is_outvoted():
    """Runs disturbed by other work land at the grid's floor (sparse never faster) or far from
    the rest: the median of three credible runs is kept, the floor runs are made again."""
    results = iter([(0.002, 0.1, 50.0), (0.40, 35.0, 88.0), (0.002, 0.1, 50.0), (0.05, 4.0, 80.0),
                    (0.41, 36.0, 88.0)])
    assert cal.median_crossover(lambda: next(results)) == (0.40, 35.0, 88.0)


def test_a_crossover_above_the_credible_ceiling_is_outvoted():
    """A dense timing slowed by other work puts the crossover near density 1 (sparse faster with
    92% of the values present): the credible runs among those made decide."""
    results = iter([(0.92, 30.0, 5.5), (0.44, 33.0, 72.0), (0.95, 31.0, 4.0)])
    assert cal.median_crossover(lambda: next(results)) == (0.44, 33.0, 72.0)


def test_a_crossover_at_the_floor_every_time_is_kept_after_the_last_try():
    calls = []

    def floor():
        calls.append(1)
        return (0.002, 0.1, 50.0)
    assert cal.median_crossover(floor) == (0.002, 0.1, 50.0) and len(calls) == cal.CROSSOVER_MAX_RUNS


def test_the_calibrate_command_measures_again_and_replaces_the_cached_figures(tmp_path, monkeypatch, capsys):
    from morphgen.cli import main
    path = tmp_path / "calibration.json"
    monkeypatch.setattr(cal, "_cache_file", lambda: path)
    key = cal._machine_key(1)
    stale = {"rho": 0.92, "tau": 0.08, "sparse_gflops": 30.0, "dense_gflops": 5.5, "triad_gbs": 9.0, "threads": 1,
             "spmm_gbs": 10.0}
    path.write_text(json.dumps({key: stale}))
    fresh = cal.Calibration(rho=0.45, tau=0.55, sparse_gflops=33.0, dense_gflops=72.0, triad_gbs=9.5, threads=1,
                            source="measured", spmm_gbs=12.0)
    monkeypatch.setattr(cal, "measure", lambda threads=None: fresh)     # the kernels are timed elsewhere
    assert cal.calibrate(1).dense_gflops == 5.5                          # train reads the cache ...
    assert main(["calibrate", "--threads", "1"]) == 0                    # ... calibrate replaces it
    assert json.loads(path.read_text())[key]["dense_gflops"] == 72.0
    assert "rho 0.450, tau 0.550" in capsys.readouterr().out

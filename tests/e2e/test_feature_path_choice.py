"""The feature path's threshold counts what only the dense path does: the aggregation of the
features it computes once (hoisting) instead of every epoch.  Lowering only; nothing is compiled."""
from __future__ import annotations

import dataclasses

import pytest

from morphgen.calibrate import Calibration
from morphgen.data.synthetic import synthetic_dataset
from morphgen.pipeline import choose_feature_path, dense_path_threshold, lower
from tests.e2e.support import example

CAL = Calibration(rho=0.7, tau=0.3, sparse_gflops=56.0, dense_gflops=80.0, triad_gbs=30.0, threads=2,
                  source="test", spmm_gbs=30.0)


def _data(features=128, sparsity=0.5):
    return synthetic_dataset(nodes=2000, edges=20000, features=features, classes=16, sparsity=sparsity, seed=0)


def _dense(model, data):
    return lower(example(model), {"F": data.features.shape[1], "C": data.num_classes}, False, True)


def test_the_threshold_adds_the_aggregation_hoisting_saves():
    """gcn3's first layer, (A x) W on the dense path: one aggregation at its width forward and
    backward per epoch saved, one at F paid once over the program's epochs."""
    data = _data()
    program = _dense("gcn3", data)
    (hoisted,) = program.invariant
    layer = next(op for op in program.forward if op.opcode == "linear" and op.inputs[0].id == hoisted.output.id)
    m, f, n, e = layer.output.shape[0], 128, 2000, 20000
    products = 4.0 * n * f * m / 80e9
    saved = (2 * 4.0 * (n + e) * m - 4.0 * (n + e) * f / program.epochs) / 30e9
    tau, why = dense_path_threshold(program, data, CAL)
    assert tau == pytest.approx(1 - 0.7 * (1 - saved / products), rel=1e-12)
    assert CAL.tau < tau < 1 and "once" in why


def test_nothing_hoisted_keeps_the_calibrated_threshold():
    data = _data()
    assert dense_path_threshold(_dense("gcn", data), data, CAL) is None      # dropout on the input
    assert dense_path_threshold(_dense("gcn3", data), data, dataclasses.replace(CAL, spmm_gbs=float("nan"))) is None


def test_between_the_two_thresholds_the_dense_path_is_taken(monkeypatch):
    data = _data(sparsity=0.45)
    monkeypatch.setattr("morphgen.calibrate.calibrate", lambda threads=None: CAL)
    plain = choose_feature_path(data, None, True, 2)
    counted = choose_feature_path(data, None, True, 2, dense_program=lambda: _dense("gcn3", data))
    assert plain[0] == "sparse" and counted[0] == "dense"
    assert counted[2] > 0.45 and "raised to" in counted[3]
    forced = choose_feature_path(data, 0.2, True, 2, dense_program=lambda: _dense("gcn3", data))
    assert forced[0] == "sparse" and forced[2] == 0.2       # --sparsity-threshold is the user's word

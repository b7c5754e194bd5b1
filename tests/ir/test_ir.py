"""Program.bind and Program.validate."""
import pytest

from morphgen.autodiff import differentiate
from morphgen.ir import IRBug, IRError, Param, Program, dim_add, dim_sub
from morphgen.ir_ops import Builder

from . import models


def test_bind_resolves_every_dim():
    prog = models.rgat()
    differentiate(prog)
    assert prog.symbols() == {"F", "C", "etypes"}
    prog.bind({"F": 5, "C": 3, "g.etypes": 4})
    assert prog.symbols() == set()
    assert prog.param("W").value.shape == (4, 5, 8)
    assert prog.param("O_cat").value.shape == (13, 3)
    assert prog.grads["W"].shape == (4, 5, 8)          # backward values are bound too
    slices = [op for op in prog.backward if op.opcode == "slice"]
    assert all(isinstance(op.attrs["stop"], int) for op in slices)


def test_unbound_symbol_is_named():
    prog = models.rgcn()
    with pytest.raises(IRError, match="'etypes'"):
        prog.bind({"N": 10, "C": 3})


def test_bind_rejects_bad_sizes():
    with pytest.raises(IRError, match="size 'F'"):
        models.gcn().bind({"F": 0, "C": 3})
    with pytest.raises(IRError, match="size 'C'"):
        models.gcn().bind({"F": 4, "C": "three"})
    prog = models.gcn().bind({"F": 4, "C": 3})
    with pytest.raises(IRError, match="already bound to 4"):
        prog.bind({"F": 5})
    prog.bind({"F": 4})                                  # rebinding the same value is fine


def test_bind_detects_a_mismatch():
    prog = Program("mismatch")
    x = prog.new_value("node", ("F",), name="x")
    w = prog.new_value("param", (7, 2), name="W")
    prog.params.append(Param("W", w))
    prog.inputs = {"features": x}
    Builder(prog).emit("linear", x, w)
    with pytest.raises(IRError, match="input width 5 does not match weight rows 7"):
        prog.bind({"F": 5})


def test_validate_catches_use_before_definition():
    prog = models.gcn()
    prog.forward[0], prog.forward[1] = prog.forward[1], prog.forward[0]
    with pytest.raises(IRBug, match="before it is defined"):
        prog.validate()


def test_validate_catches_a_wrong_recorded_shape():
    prog = models.gcn().bind({"F": 4, "C": 3})
    differentiate(prog)
    prog.backward[1].output.shape = (99,)
    with pytest.raises(IRBug, match="backward op 1"):
        prog.validate()


def test_validate_checks_gradient_shapes():
    prog = models.gcn().bind({"F": 4, "C": 3})
    differentiate(prog)
    prog.grads["layer0.b"] = prog.grads["layer0.W"]
    with pytest.raises(IRBug, match="gradient of 'layer0.b'"):
        prog.validate()


def test_ir_errors_carry_the_location():
    prog = models.gcn()
    x = prog.inputs["features"]
    with pytest.raises(IRError) as err:
        Builder(prog).emit("gather", x, loc=("model.mp", 3, 14), end="middle")
    assert err.value.loc == ("model.mp", 3, 14)
    with pytest.raises(IRError, match="unknown IR opcode 'sparkle'"):
        Builder(prog).emit("sparkle", x)
    with pytest.raises(IRError, match="operand 0"):
        Builder(prog).emit("relu", 3.0)


def test_aggregate_rule_rejections():
    prog = models.gcn()
    x = prog.inputs["features"]
    b = Builder(prog)
    with pytest.raises(IRError, match="norm=gcn needs reduce=sum"):
        b.emit("aggregate", x, reduce="mean", norm="gcn")
    with pytest.raises(IRError, match="only runs over in-edges"):
        b.emit("aggregate", x, reduce="max", direction="out")


def test_differentiate_skips_unneeded_gradients():
    prog = models.rgcn().bind({"N": 8, "C": 3, "etypes": 2})
    differentiate(prog)
    assert set(prog.grads) == {p.name for p in prog.params}
    # no backward value is the gradient of a constant: every backward op lies on a path to
    # some parameter gradient (dead code removed), and none has the identity's width N = 8
    needed = {g.id for g in prog.grads.values()}
    for op in reversed(prog.backward):
        assert op.output.id in needed, op
        needed |= {v.id for v in op.inputs}
        assert op.output.assoc == "param" or op.output.width != 8, op
    # the gradient of S1 = I^T g is computed straight from the features (a row scatter)
    s1 = next(op for op in prog.backward if op.output is prog.grads["S1"])
    assert s1.opcode == "matmul_tn" and s1.inputs[0] is prog.inputs["features"]


def test_loss_must_be_cross_entropy():
    prog = models.gcn()
    prog.loss = prog.logits
    with pytest.raises(IRError, match="cross_entropy"):
        differentiate(prog)


def test_dim_arithmetic():
    assert dim_add("F", 16) == "F+16"
    assert dim_sub("F+16", "F") == 16
    assert dim_add(3, 4) == 7
    assert dim_sub("g.etypes+2", "etypes") == 2

"""The backend-neutral intermediate representation.

An IR program is a straight-line list of SSA operations over *associated tensors*:

* ``node``  tensors have one row per node:  shape ``[N, *feature]``
* ``edge``  tensors have one row per edge:  shape ``[E, *feature]``
* ``param`` tensors are trainable weights (``shape`` is the whole shape; a weight with a
  type dimension carries ``domain`` = ``"etype"`` or ``"ntype"`` and its first axis counts types)
* ``scalar`` values are single numbers (the loss)

The IR is *layout free*: it never says CSR or CSC, tile widths or dense vs sparse features.
Those are decisions of the backend lowering (see docs/ir.md).  It also never knows model
names: ``gnn.forwardPass(l, "GCN", "Sum")`` has already been expanded into the ops below.

Feature widths may be symbolic (``"F"``, ``"C"``) until bound to a dataset; see
:func:`Program.bind`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Union

from .errors import UserError

Dim = Union[int, str]          # a concrete width or a size symbol bound at load time

ASSOCIATIONS = ("node", "edge", "param", "scalar")
TYPE_DOMAINS = ("etype", "ntype")


class IRError(UserError):
    """An inconsistency in an IR program; ``loc`` points into the .mp source when known."""

    def __init__(self, message: str, loc: Any = None):
        super().__init__(message)
        self.message = message
        self.loc = loc


@dataclass(eq=False)
class Value:
    """An SSA value.  ``shape`` excludes the row axis for node/edge values."""
    id: int
    assoc: str
    shape: tuple
    dtype: str = "f32"            # f32 | i64 | bool
    name: str = ""                # readable hint, sanitised before reaching any code
    domain: Optional[str] = None  # for params: "etype" / "ntype" type dimension

    @property
    def width(self) -> Dim:
        """Last feature dimension (1 for a scalar-per-row value)."""
        return self.shape[-1] if self.shape else 1

    def __repr__(self) -> str:
        return f"%{self.id}"

    def describe(self) -> str:
        dims = ",".join(str(d) for d in self.shape)
        dom = f"@{self.domain}" if self.domain else ""
        return f"{self.assoc}[{dims}]{dom}"


@dataclass(eq=False)
class Op:
    opcode: str
    inputs: list
    output: Optional[Value]
    attrs: dict = field(default_factory=dict)
    loc: Any = None               # morphgen.frontend Coord of the .mp construct that produced it

    def __repr__(self) -> str:
        args = ", ".join(repr(v) for v in self.inputs)
        attrs = "".join(f", {k}={v!r}" for k, v in sorted(self.attrs.items()))
        lhs = f"{self.output!r}: {self.output.describe()} = " if self.output is not None else ""
        return f"{lhs}{self.opcode}({args}{attrs})"


@dataclass
class Param:
    """A trainable weight.  ``value`` is the IR value that names it in ops."""
    name: str
    value: Value
    init: str = "glorot"          # glorot | zeros | ones | normal | uniform
    weight_decay: bool = True     # whether the optimizer's decay applies to it


@dataclass
class Optimizer:
    kind: str = "adam"            # adam | adamw | sgd
    lr: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0
    momentum: float = 0.0


@dataclass
class Program:
    """One lowered training program: inputs, params, forward, loss, backward, optimizer."""
    name: str
    inputs: dict = field(default_factory=dict)      # role -> Value: features, labels
    params: list = field(default_factory=list)      # [Param]
    forward: list = field(default_factory=list)     # [Op]  (ends with the loss)
    loss: Optional[Value] = None
    logits: Optional[Value] = None                  # what evaluate() takes argmax of
    backward: list = field(default_factory=list)    # [Op]  filled by morphgen.autodiff
    grads: dict = field(default_factory=dict)       # param name -> gradient Value
    optimizer: Optimizer = field(default_factory=Optimizer)
    epochs: int = 200
    seed: int = 0
    sizes: dict = field(default_factory=dict)       # size symbol -> int once bound
    featureless: bool = False                       # the features input is the identity
    _next_id: int = 0

    # -- construction -------------------------------------------------------------------
    def new_value(self, assoc: str, shape: tuple, dtype: str = "f32", name: str = "",
                  domain: Optional[str] = None) -> Value:
        assert assoc in ASSOCIATIONS, assoc
        v = Value(self._next_id, assoc, tuple(shape), dtype, name, domain)
        self._next_id += 1
        return v

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def dump(self) -> str:
        """Readable text of the whole program (``morphgen compile --emit ir``)."""
        out = [f"program {self.name}"]
        for role, v in self.inputs.items():
            ident = " (identity: featureless)" if role == "features" and self.featureless else ""
            out.append(f"  input {role} {v!r}: {v.describe()}{ident}")
        for p in self.params:
            wd = "" if p.weight_decay else " no-decay"
            out.append(f"  param {p.name} {p.value!r}: {p.value.describe()} init={p.init}{wd}")
        out.append("forward:")
        out += [f"  {op!r}" for op in self.forward]
        out.append(f"  loss = {self.loss!r}")
        if self.backward:
            out.append("backward:")
            out += [f"  {op!r}" for op in self.backward]
            for name, g in self.grads.items():
                out.append(f"  grad {name} = {g!r}")
        o = self.optimizer
        out.append(f"optimizer {o.kind} lr={o.lr} weight_decay={o.weight_decay} "
                   f"betas=({o.beta1}, {o.beta2}) eps={o.eps} momentum={o.momentum}")
        out.append(f"epochs {self.epochs}")
        return "\n".join(out)

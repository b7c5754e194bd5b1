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
from typing import Optional

from .ir_core import (ASSOCIATIONS, SIZE_ATTRS, TYPE_DOMAINS, Dim, IRBug, IRError, Op,  # noqa: F401
                      Optimizer, Param, Value, _canonical_symbol, _resolve, _shapes_agree, _symbol_terms, dim_add,
                      dim_sub, format_dim, parse_dim)
from .ir_ops import infer_full


@dataclass
class Program:
    """One lowered training program: inputs, params, forward, loss, backward, optimizer."""
    name: str
    inputs: dict = field(default_factory=dict)      # role -> Value: features, labels
    params: list = field(default_factory=list)      # [Param]
    invariant: list = field(default_factory=list)   # [Op]  of the inputs and the graph only: run once at load
    forward: list = field(default_factory=list)     # [Op]  (ends with the loss)
    loss: Optional[Value] = None
    logits: Optional[Value] = None                  # what evaluate() takes argmax of (link task: the embeddings)
    task: str = "node"                              # "node" classification | "link" prediction (link_loss)
    negatives: int = 1                              # link task: corrupted triples per positive, each epoch
    early_stopping: Optional[int] = None            # gnn.earlyStopping's patience (epochs), if declared
    backward: list = field(default_factory=list)    # [Op]  filled by morphgen.autodiff
    grads: dict = field(default_factory=dict)       # param name -> gradient Value
    optimizer: Optimizer = field(default_factory=Optimizer)
    epochs: int = 200
    seed: int = 0
    sizes: dict = field(default_factory=dict)       # size symbol -> int once bound
    featureless: bool = False                       # the features input is the identity
    feature_normalization: Optional[str] = None     # "row": features scaled to unit row sums at load
    self_loops: bool = False                        # gnn.addSelfLoops: a loop added at every node at load
    fusion: list = field(default_factory=list)      # [FusionGroup] from morphgen.passes.fusion
    fingerprint: str = ""                           # of the program as written (source_fingerprint)
    # Widths the program declares that only the dataset's sizes can confirm (a property declared
    # 5 wide holding a C-wide value): [(the value's width, the declared one, what, loc)], checked
    # by bind().
    width_claims: list = field(default_factory=list)
    warnings: list = field(default_factory=list)    # the front end's warnings (Diagnostic)
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

    # -- inspection ---------------------------------------------------------------------
    def all_ops(self) -> list:
        """Invariant, forward then backward ops: the order in which the first training step runs them."""
        return list(self.invariant) + list(self.forward) + list(self.backward)

    def all_values(self) -> list:
        """Every distinct value the program mentions (inputs, params, op operands, grads)."""
        seen, out = set(), []

        def visit(v):
            if v is not None and id(v) not in seen:
                seen.add(id(v))
                out.append(v)
        for v in self.inputs.values():
            visit(v)
        for p in self.params:
            visit(p.value)
        for op in self.all_ops():
            for v in op.inputs:
                visit(v)
            visit(op.output)
        for v in self.grads.values():
            visit(v)
        visit(self.loss)
        visit(self.logits)
        return out

    def uses(self, ops=None) -> dict:
        """value id -> list of ops (in order) that read it."""
        table: dict = {}
        for op in (self.all_ops() if ops is None else ops):
            for v in op.inputs:
                table.setdefault(v.id, []).append(op)
        return table

    def producer(self, ops=None) -> dict:
        """value id -> the op that defines it."""
        return {op.output.id: op for op in (self.all_ops() if ops is None else ops)
                if op.output is not None}

    def needed_value_ids(self) -> set:
        """Ids of the values the loss, the output and the backward depend on, through forward
        ops (which are pure: the others' results are dead)."""
        needed = {v.id for v in (self.loss, self.logits) if v is not None}
        needed |= {v.id for op in self.backward for v in op.inputs}
        for op in reversed(self.forward):
            if op.output is not None and op.output.id in needed:
                needed |= {v.id for v in op.inputs}
        return needed

    def symbols(self) -> set:
        """Size symbols still unbound anywhere in the program."""
        found = set()
        for v in self.all_values():
            for d in v.shape:
                if isinstance(d, str):
                    found |= set(_symbol_terms(d))
        for op in self.all_ops():
            for key in SIZE_ATTRS:
                if isinstance(op.attrs.get(key), str):
                    found |= set(_symbol_terms(op.attrs[key]))
        return found

    # -- binding and validation -----------------------------------------------------------
    def bind(self, sizes: dict) -> "Program":
        """Resolve symbolic dims (``"F"``, ``"C"``, ``"etypes"``, ``"ntypes"``, sums like
        ``"F+16"``) to the integers in ``sizes``, everywhere, then :meth:`validate`.

        ``g.etypes`` / ``g.ntypes`` are accepted as spellings of ``etypes`` / ``ntypes``.
        Raises :class:`IRError` naming the symbol if one stays unbound, if a size is not a
        positive integer, or if a bound size contradicts an earlier binding or a shape rule.
        """
        table = dict(self.sizes)
        for key, val in sizes.items():
            name = _canonical_symbol(str(key))
            if isinstance(val, bool) or not isinstance(val, (int,)) and not hasattr(val, "__index__"):
                raise IRError(f"size '{key}': expected a positive integer, got {val!r}")
            val = int(val)
            if val <= 0:
                raise IRError(f"size '{key}': expected a positive integer, got {val}")
            if name in table and table[name] != val:
                raise IRError(f"size '{key}': already bound to {table[name]}, cannot rebind to {val}")
            table[name] = val
        missing = sorted(s for s in self.symbols() if _canonical_symbol(s) not in table)
        if missing:
            raise IRError(f"unbound size symbol(s) {', '.join(repr(m) for m in missing)} in program "
                          f"'{self.name}'; pass them to Program.bind (have: {sorted(table)})")
        for v in self.all_values():
            v.shape = tuple(_resolve(d, table) for d in v.shape)
        for op in self.all_ops():
            for key in SIZE_ATTRS:
                if isinstance(op.attrs.get(key), str):
                    op.attrs[key] = _resolve(op.attrs[key], table)
        self.sizes = table
        for width, declared, what, loc in self.width_claims:
            actual, wanted = _resolve(width, table), _resolve(declared, table)
            if actual != wanted:
                raise IRError(f"{what} is declared with width {declared}"
                              f"{'' if declared == wanted else f' = {wanted}'}, but the value has width "
                              f"{width}{'' if width == actual else f' = {actual}'}", loc)
        self.validate()
        return self

    def validate(self) -> None:
        """Re-run shape inference over invariant, forward and backward; check SSA order and grads.

        Raises :class:`IRError` (with the op's ``loc``) where a shape rule fails, which bound sizes
        can reveal in a valid-looking program, and :class:`IRBug` where the IR contradicts itself
        (reads before definitions, recorded shapes, gradients): a pass or autodiff went wrong.
        """
        defined = {v.id for v in self.inputs.values()} | {p.value.id for p in self.params}
        for section, ops in (("invariant", self.invariant), ("forward", self.forward), ("backward", self.backward)):
            for i, op in enumerate(ops):
                for v in op.inputs:
                    if v.id not in defined:
                        raise IRBug(f"{section} op {i} ({op.opcode}) reads {v!r} before it is "
                                      f"defined", op.loc)
                assoc, shape, dtype, domain = infer_full(op.opcode, list(op.inputs), op.attrs, op.loc)
                out = op.output
                if out is None:
                    continue
                if (out.assoc != assoc or not _shapes_agree(out.shape, tuple(shape))
                        or (out.assoc == "param" and out.domain != domain)):
                    raise IRBug(f"{section} op {i} ({op.opcode}): result recorded as "
                                  f"{out.describe()} but its inputs give {assoc}"
                                  f"[{','.join(map(str, shape))}]", op.loc)
                if out.id in defined:
                    raise IRBug(f"{section} op {i} ({op.opcode}) redefines {out!r}", op.loc)
                defined.add(out.id)
        for name, g in self.grads.items():
            p = self.param(name)
            if g.id not in defined:
                raise IRBug(f"gradient of '{name}' ({g!r}) is never computed")
            if g.assoc != "param" or not _shapes_agree(g.shape, p.value.shape):
                raise IRBug(f"gradient of '{name}' is {g.describe()}, parameter is "
                              f"{p.value.describe()}")

    def source_fingerprint(self) -> str:
        """A hash of the parameters and forward operations, taken before any pass runs: the
        same for every backend and every dataset, different for a program that computes
        something else (checkpoints carry it)."""
        import hashlib
        text = "\n".join([f"{p.name} {p.value.describe()} {p.init}" for p in self.params]
                         + [repr(op) for op in self.forward])
        return hashlib.sha256(text.encode()).hexdigest()

    def dump(self) -> str:
        """Readable text of the whole program (``morphgen compile --emit ir``)."""
        out = [f"program {self.name}"]
        for role, v in self.inputs.items():
            ident = " (identity: featureless)" if role == "features" and self.featureless else ""
            out.append(f"  input {role} {v!r}: {v.describe()}{ident}")
        for p in self.params:
            wd = "" if p.decay(self.optimizer) == self.optimizer.weight_decay else f" decay={p.decay(self.optimizer)}"
            out.append(f"  param {p.name} {p.value!r}: {p.value.describe()} init={p.init}{wd}")
        if self.invariant:
            out.append("invariant (computed once, when the data is bound):")
            out += [f"  {op!r}" for op in self.invariant]
        out.append("forward:")
        out += [f"  {op!r}" for op in self.forward]
        out.append(f"  loss = {self.loss!r}")
        if self.backward:
            out.append("backward:")
            out += [f"  {op!r}" for op in self.backward]
            for name, g in self.grads.items():
                out.append(f"  grad {name} = {g!r}")
        if self.fusion:
            out.append("fusion:")
            out += [f"  {group!r}" for group in self.fusion]
        o = self.optimizer
        out.append(f"optimizer {o.kind} lr={o.lr} weight_decay={o.weight_decay} "
                   f"betas=({o.beta1}, {o.beta2}) eps={o.eps} momentum={o.momentum}")
        if self.feature_normalization:
            out.append(f"features normalised: {self.feature_normalization}")
        if self.self_loops:
            out.append("graph: self loops added")
        out.append(f"epochs {self.epochs}")
        return "\n".join(out)

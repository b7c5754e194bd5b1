"""The semantic model of the .mp language: symbols and scopes, identifier rules, the catalogue
of directives / built-ins / choices, and argument validation.

Checking happens while ``lower.py`` walks the (statically unrolled) program: each statement is
checked and lowered in one step, an error aborts only that statement, and a failed definition
is marked *poisoned* so that later uses of it stay silent instead of cascading.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from ..grammar.diagnostics import show, suggest
from ..ir_core import dim_mul

# -- errors ------------------------------------------------------------------------------


class SemanticError(Exception):
    """A located error in one statement; lowering reports it and moves to the next statement."""

    def __init__(self, coord, message: str):
        super().__init__(message)
        self.coord = coord
        self.message = message


class Poisoned(Exception):
    """The statement uses something whose definition already failed; nothing new to report."""


# -- identifiers -------------------------------------------------------------------------

CPP_KEYWORDS = frozenset("""
alignas alignof and and_eq asm atomic_cancel atomic_commit atomic_noexcept auto bitand bitor
bool break case catch char char8_t char16_t char32_t class compl concept const consteval
constexpr constinit const_cast continue co_await co_return co_yield decltype default delete do
double dynamic_cast else enum explicit export extern false float for friend goto if inline int
long mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected
public reflexpr register reinterpret_cast requires return short signed sizeof static
static_assert static_cast struct switch synchronized template this thread_local throw true try
typedef typeid typename union unsigned using virtual void volatile wchar_t while xor xor_eq
final override import module restrict NULL main std size_t int64_t int32_t float32_t
""".split())

MAX_NAME_LENGTH = 64
_SAFE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")


def identifier_problem(name: str) -> Optional[str]:
    """Why ``name`` may not name a declared entity (it could reach generated code), or None."""
    if name in CPP_KEYWORDS:
        return f"'{name}' is a reserved word of the generated C++; choose another name"
    if "__" in name or name.startswith("_"):
        return f"'{name}': names may not start with '_' or contain '__' (reserved in C++)"
    if len(name) > MAX_NAME_LENGTH:
        return f"name '{name[:20]}...' is {len(name)} characters long; the limit is {MAX_NAME_LENGTH}"
    if not _SAFE_NAME.match(name):
        return f"{show(name)} is not a valid name"
    return None


# -- symbols -----------------------------------------------------------------------------


@dataclass(eq=False)
class Symbol:
    name: str
    coord: Any


@dataclass(eq=False)
class ConstSym(Symbol):
    """A compile-time scalar (int/float/bool local, loop counter); ``value`` None: declared
    without a value and not assigned yet."""
    type: str = "int"
    value: Any = 0
    dynamic: bool = False          # the epoch counter: declared, but not a compile-time value


@dataclass(eq=False)
class SizeSym(Symbol):
    """A width bound from the data at load time (``F`` in ``propNode<float[F]> x``)."""
    ir_name: str = "F"


@dataclass(eq=False)
class GraphSym(Symbol):
    pass


@dataclass(eq=False)
class PropSym(Symbol):
    """A node or edge property; ``value`` is its current SSA value (None: not yet assigned)."""
    assoc: str = "node"            # node | edge
    width: Any = 1
    dtype: str = "f32"
    value: Any = None
    poisoned: bool = False


@dataclass(eq=False)
class WeightSym(Symbol):
    value: Any = None              # the IR param Value


@dataclass(eq=False)
class LocalSym(Symbol):
    """A per-row temporary inside ``forall`` (its value is an IR Value)."""
    value: Any = None


@dataclass(eq=False)
class PoisonSym(Symbol):
    """A name whose declaration failed: uses are silent so that one error is reported once."""


@dataclass(eq=False)
class ElemSym(Symbol):
    """A ``forall`` / reduction variable; ``end`` says where the element sits relative to the
    current evaluation rows: ``self`` (the rows themselves), ``src`` or ``dst`` of an edge."""
    kind: str = "node"             # node | edge
    end: str = "self"


class Scope:
    def __init__(self, parent: Optional["Scope"] = None):
        self.parent = parent
        self.names: dict = {}

    def lookup(self, name: str) -> Optional[Symbol]:
        s = self
        while s is not None:
            if name in s.names:
                return s.names[name]
            s = s.parent
        return None

    def visible(self) -> set:
        out, s = set(), self
        while s is not None:
            out |= set(s.names)
            s = s.parent
        return out

    def declare(self, sym: Symbol) -> None:
        old = self.lookup(sym.name)
        if old is not None and not isinstance(old, ConstSym) or sym.name in self.names:
            where = f" (first declared at line {old.coord.line})" if getattr(old, "coord", None) else ""
            raise SemanticError(sym.coord, f"'{sym.name}' is already declared{where}")
        problem = declared_name_problem(sym.name)
        if problem:
            raise SemanticError(sym.coord, problem)
        self.names[sym.name] = sym


# "Did you mean" suggestions drawn from the names in scope stop after this many errors: each
# compares the name with every name in scope, which over a file of thousands of errors is
# quadratic (and only the first errors are printed).
SUGGESTION_LIMIT = 100


def undeclared(coord, name: str, candidates) -> SemanticError:
    return SemanticError(coord, f"undeclared name '{name}'" + suggest(name, candidates))


def unassigned(coord, name: str) -> SemanticError:
    return SemanticError(coord, f"'{name}' is read before it is assigned (it was declared without a value)")


# -- the catalogue -----------------------------------------------------------------------

LAYER_KINDS = ("GCN", "SAGE", "GIN", "GAT")
AGGREGATORS = {"Sum": "sum", "Mean": "mean", "Max": "max"}
OPTIMIZERS = ("adam", "adamw", "sgd")
LOSSES = ("cross_entropy",)
LINK_DECODERS = ("distmult",)
ACTIVATIONS = ("relu", "elu", "leaky_relu", "sigmoid", "tanh", "none")
INITS = ("glorot", "zeros", "ones", "normal", "uniform")
REDUCTIONS = AGGREGATORS

# name -> (positional parameter names, {keyword: kind}); kinds: int, float, bool, str
DIRECTIVES = {
    "layer": (("in_width", "out_width"),
              {"activation": "str", "dropout": "float", "bias": "bool", "init": "str",
               "weight_decay": "bool or float", "heads": "int", "concat": "bool", "attention_dropout": "float",
               "norm": "str", "edge_weight": "bool"}),
    "forwardPass": (("layer", "kind", "aggregator"), {"input": "property", "output": "property"}),
    "loss": (("kind",), {}),                                   # or (property, kind)
    "linkLoss": (("embeddings", "relations", "decoder"), {"regularization": "float", "negatives": "int"}),
    "backPropagation": ((), {}),                               # or (layer)
    "optimizer": (("kind",), {"lr": "float", "weight_decay": "float", "beta1": "float",
                              "beta2": "float", "eps": "float", "momentum": "float", "decay_biases": "bool"}),
    "weightDecay": (("weight", "value"), {}),
    "optimizerStep": ((), {}),
    "normalizeFeatures": (("kind",), {}),
    "addSelfLoops": ((), {}),
    "earlyStopping": ((), {"patience": "int"}),
}
FEATURE_NORMALIZATIONS = ("row",)

# built-in functions: name -> (min args, max args)
BUILTINS = {
    "relu": (1, 1), "elu": (1, 2), "leaky_relu": (1, 2), "sigmoid": (1, 1), "tanh": (1, 1),
    "exp": (1, 1), "dot": (2, 2), "concat": (2, 64), "edge_softmax": (1, 1), "dropout": (2, 2),
    "sqrt": (1, 1), "rsqrt": (1, 1), "log": (1, 1), "abs": (1, 1), "pow": (2, 2), "gelu": (1, 1),
    "softplus": (1, 1), "softmax": (1, 1), "log_softmax": (1, 1),
    "scale_heads": (2, 2), "mean_heads": (1, 1), "layer_norm": (1, 1), "batch_norm": (1, 1),
}
# The keyword arguments a builtin takes, all compile-time numbers: "count" a positive integer,
# else the check_number limits of a number; and those it requires.
_POSITIVE, _FRACTION = dict(lo=0.0, lo_open=True), dict(lo=0.0, hi=1.0)
BUILTIN_KEYWORDS = {"dot": {"heads": "count"}, "mean_heads": {"heads": "count"}, "layer_norm": {"eps": _POSITIVE},
                    "batch_norm": {"eps": _POSITIVE, "momentum": _FRACTION}}
REQUIRED_KEYWORDS = {"mean_heads": ("heads",)}
NORMS = ("batch", "layer", "none")

NODE_BUILTIN_ATTRS = {"in_degree": "in_degree", "out_degree": "out_degree"}
EDGE_BUILTIN_ATTRS = {"rel_degree": "rel_degree", "edge_weight": "edge_weight"}
NODE_METHODS = ("incoming_edges", "outgoing_edges")
GRAPH_METHODS = ("nodes", "edges", "neighbors")
GRAPH_ATTRS = {"etypes": "etype", "ntypes": "ntype"}


# Names the language itself resolves, whatever is declared: v.in_degree always reads the
# graph's in-degree and relu(x) always calls the builtin, so a property, weight, local,
# parameter or size symbol with one of these names would be silently ignored where it is used.
# Declaring one is an error instead.
BUILTIN_NAMES = {
    **{n: "a builtin node property" for n in (*NODE_BUILTIN_ATTRS, "ntype")},
    **{n: "a builtin edge property" for n in (*EDGE_BUILTIN_ATTRS, "etype", "src", "dst")},
    **{n: "a builtin node method" for n in NODE_METHODS},
    **{n: "a builtin graph method" for n in GRAPH_METHODS},
    **{n: "a builtin graph attribute" for n in GRAPH_ATTRS},
    **{n: "a builtin function" for n in BUILTINS},
    **{n: "a builtin reduction" for n in AGGREGATORS},
    "gnn": "the namespace of the gnn.* directives",
}


def declared_name_problem(name: str) -> Optional[str]:
    """Why ``name`` may not be declared in a program (reserved or owned by a builtin), or None."""
    problem = identifier_problem(name)
    if problem is None and name in BUILTIN_NAMES:
        problem = f"'{name}' is {BUILTIN_NAMES[name]}; choose another name"
    return problem


def check_choice(coord, what: str, value: str, choices) -> str:
    if value not in choices:
        raise SemanticError(coord, f"unknown {what} {show(value)}" + suggest(value, choices))
    return value


FLOAT32_TINY = 1.1754943508222875e-38     # the smallest normal float32 (smaller ones flush to 0)
FLOAT32_MAX = 3.4028234663852886e38


def check_number(coord, what: str, value, *, lo=None, hi=None, lo_open=False, hi_open=False,
                 integer=False) -> float:
    """Validate a numeric argument; the message names the argument and the allowed range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SemanticError(coord, f"{what} must be a number, got {describe(value)}")
    if integer and not isinstance(value, int):
        raise SemanticError(coord, f"{what} must be an integer, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise SemanticError(coord, f"{what} must be finite, got {value!r}")
    if not integer and value != 0 and not FLOAT32_TINY <= abs(value) <= FLOAT32_MAX:
        # the generated code holds it as a float32: 1e-50 would become 0, 1e39 infinity
        raise SemanticError(coord, f"{what} = {value!r} is outside the range of a float32 "
                                   f"({FLOAT32_TINY:.3g} to {FLOAT32_MAX:.4g} in magnitude), which training computes in")
    bad = ((lo is not None and (value < lo or (lo_open and value == lo)))
           or (hi is not None and (value > hi or (hi_open and value == hi))))
    if bad:
        left = "(" if lo_open else "["
        right = ")" if hi_open or hi is None else "]"
        lo_s = "-inf" if lo is None else repr(lo)
        hi_s = "inf" if hi is None else repr(hi)
        raise SemanticError(coord, f"{what} must be in {left}{lo_s}, {hi_s}{right}, got {value!r}")
    return value


def describe(value) -> str:
    """A short phrase for what a lowered expression is (used in type errors)."""
    from ..ir import Value
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Value):
        if value.assoc == "param":
            return f"weight '{value.name}'"
        article = "an" if value.assoc[0] in "aeiou" else "a"
        return f"{article} {value.assoc} value of width {value.width}"
    return getattr(value, "phrase", "an unsupported value")


def same_width(a, b) -> bool:
    """Equal widths, or at least one is only known at load time (checked again at bind)."""
    return a == b or isinstance(a, str) or isinstance(b, str)


@dataclass
class LayerSpec:
    index: int
    in_width: Any
    out_width: Any
    coord: Any
    activation: Optional[str] = None     # None: default by position and kind
    dropout: float = 0.0
    bias: bool = True
    init: Optional[str] = None           # None: the kind's default (directives.INIT_DEFAULT)
    weight_decay: Any = True             # True: the optimizer's; False: none; a number: its own
    heads: int = 1                       # GAT: attention heads
    concat: bool = True                  # GAT: heads concatenated (True) or averaged (False)
    attention_dropout: float = 0.0       # GAT: dropout on the attention coefficients
    norm: str = "none"                   # batch | layer | none: before the activation
    edge_weight: bool = False            # GCN (Sum): the messages weighed by e.edge_weight
    extra: dict = field(default_factory=dict)

    @property
    def output_width(self):
        """The width the next layer reads: concatenated heads widen the output."""
        return dim_mul(self.out_width, self.heads) if self.concat else self.out_width

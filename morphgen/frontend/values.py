"""What an expression evaluates to during lowering, besides Python constants and IR Values.

Each class has a ``phrase`` used in error messages ("expected an edge value, got <phrase>").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class SizeRef:
    """A load-time width such as ``F``; ``ir_name`` is its canonical IR symbol."""
    name: str
    ir_name: str

    @property
    def phrase(self):
        return f"the size symbol '{self.name}'"


@dataclass
class TypeCount:
    """``g.etypes`` / ``g.ntypes``: the number of edge / node types (a weight's type axis)."""
    domain: str                    # etype | ntype

    @property
    def phrase(self):
        return f"g.{self.domain}s"


@dataclass
class TypeIndex:
    """``e.etype`` / ``v.ntype``: the type of the current element, usable only as a slice."""
    domain: str
    text: str
    rows_are_current: bool         # the element is the current row (not e.src inside an edge)

    @property
    def phrase(self):
        return f"'{self.text}'"


@dataclass
class TypedSlice:
    """``W[e.etype]``: a typed weight selected per row."""
    weight: Any                    # IR param Value with a type domain
    domain: str

    @property
    def phrase(self):
        return f"weight '{self.weight.name}' sliced by type"


@dataclass
class ElemRef:
    """A forall / reduction variable; ``end`` locates it relative to the current rows."""
    name: str
    kind: str                      # node | edge
    end: str                       # self | src | dst

    @property
    def phrase(self):
        return f"the {self.kind} '{self.name}'"


@dataclass
class GraphRef:
    name: str
    phrase: str = "the graph"


@dataclass
class Iteration:
    """A set to iterate over: ``g.nodes()``, ``g.edges()``, ``v.incoming_edges()``,
    ``v.outgoing_edges()`` or ``g.neighbors(v)``."""
    what: str                      # nodes | edges | incoming | outgoing | neighbors
    anchor: Any = None             # the ElemRef whose edges / neighbours these are

    @property
    def phrase(self):
        return {"nodes": "g.nodes()", "edges": "g.edges()"}.get(self.what, f"a set of {self.what}")

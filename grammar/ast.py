"""The abstract syntax tree of a .mp program.

Every node carries a :class:`Coord` (file, line, column; both 1-based) so that every later
error can point at the construct that caused it.  Nodes are plain dataclasses; the parser in
``morphgen.grammar.parser`` builds them and ``morphgen.frontend.lower`` walks them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass(frozen=True)
class Coord:
    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


@dataclass(eq=False)
class Node:
    coord: Coord


# -- types -------------------------------------------------------------------------------
@dataclass(eq=False)
class TypeSpec(Node):
    """``Graph``, ``int``/``float``/``bool``, or ``propNode|propEdge|weight<elem[d0][d1]...>``."""
    kind: str                     # Graph | int | float | bool | propNode | propEdge | weight
    elem: Optional[str] = None    # element type of a property or weight
    dims: list = field(default_factory=list)   # [Expr]


# -- expressions -------------------------------------------------------------------------
@dataclass(eq=False)
class Num(Node):
    value: Any                    # int or float


@dataclass(eq=False)
class Str(Node):
    value: str


@dataclass(eq=False)
class Bool(Node):
    value: bool


@dataclass(eq=False)
class Name(Node):
    name: str


@dataclass(eq=False)
class Attr(Node):
    """``obj.name`` (property access, ``e.src``, ``g.etypes``)."""
    obj: Node
    name: str


@dataclass(eq=False)
class Index(Node):
    """``obj[index]`` (a typed weight sliced by ``e.etype`` / ``v.ntype``)."""
    obj: Node
    index: Node


@dataclass(eq=False)
class Keyword(Node):
    name: str
    value: Node


@dataclass(eq=False)
class Call(Node):
    """``f(args)`` or ``obj.method(args)``; ``func`` is a Name or an Attr."""
    func: Node
    args: list                    # [Expr]
    kwargs: list                  # [Keyword]


@dataclass(eq=False)
class Reduce(Node):
    """``Sum(e in v.incoming_edges(): body)``."""
    kind: str
    var: str
    var_coord: Coord
    domain: Node
    body: Node


@dataclass(eq=False)
class BinOp(Node):
    op: str
    left: Node
    right: Node


@dataclass(eq=False)
class UnaryOp(Node):
    op: str                       # '-' or '!'
    operand: Node


# -- statements --------------------------------------------------------------------------
@dataclass(eq=False)
class Declarator(Node):
    name: str
    init: Optional[Node] = None


@dataclass(eq=False)
class Decl(Node):
    type: TypeSpec
    declarators: list             # [Declarator]


@dataclass(eq=False)
class Assign(Node):
    """``target op value``; op is '=', '+=', '-=', '*=', '/=', '++' or '--' (value None)."""
    target: Node
    op: str
    value: Optional[Node]


@dataclass(eq=False)
class ExprStmt(Node):
    expr: Node


@dataclass(eq=False)
class Block(Node):
    stmts: list


@dataclass(eq=False)
class For(Node):
    init: Node                    # Decl or Assign
    cond: Node
    step: Node                    # Assign
    body: Node


@dataclass(eq=False)
class Forall(Node):
    var: str
    var_coord: Coord
    domain: Node
    body: Node


@dataclass(eq=False)
class If(Node):
    cond: Node
    then: Node
    orelse: Optional[Node]


@dataclass(eq=False)
class While(Node):
    cond: Node
    body: Node


@dataclass(eq=False)
class Param(Node):
    type: TypeSpec
    name: str


@dataclass(eq=False)
class Function(Node):
    name: str
    params: list                  # [Param]
    body: Block


@dataclass(eq=False)
class Module(Node):
    functions: list               # [Function]


def walk(node):
    """Yield ``node`` and every AST node below it (depth first, source order)."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, list):
            stack.extend(reversed(n))
            continue
        if not isinstance(n, Node):
            continue
        yield n
        children = [getattr(n, f) for f in n.__dataclass_fields__ if f != "coord"]
        stack.extend(reversed(children))


# Each of these opens a level of nesting: lowering recurses a few Python frames per level.
# The braces of a body (``if (c) { ... }``) are part of their statement; only a block written
# as a statement of its own is a level.
NESTING = (Block, For, Forall, If, While, BinOp, UnaryOp, Call, Index, Attr, Reduce)
_WITH_BODY = (Function, For, Forall, If, While)


def too_deep(node, limit: int):
    """The first node (depth first) nested more than ``limit`` levels deep, or None.

    Measured with an explicit stack, never recursion, so any input can be measured; the
    caller refuses to lower a tree that has one, which bounds the lowering's recursion."""
    stack = [(node, 0)]
    while stack:
        n, depth = stack.pop()
        if isinstance(n, list):
            stack.extend((c, depth) for c in reversed(n))
            continue
        if not isinstance(n, Node):
            continue
        if isinstance(n, NESTING):
            depth += 1
            if depth > limit:
                return n
        children = [getattr(n, f) for f in n.__dataclass_fields__ if f != "coord"]
        if isinstance(n, _WITH_BODY):
            children = [c.stmts if isinstance(c, Block) else c for c in children]
        stack.extend((c, depth) for c in reversed(children))
    return None

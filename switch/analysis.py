"""Analyses of the typed IR (:mod:`switch.tir`) that the code generator (:mod:`switch.codegen`) bases its
choices on, kept apart from the code it prints: def-use facts about variables (is a variable's initial value
ever read?), whether a body holds a ``return`` or ``exit``, the shape of a parser's state graph (loop-free? how
many state copies would one straight-line function need?) and which storage the program never reads
(:func:`dead_storage`).  Each is a pure function of the IR.
"""
from __future__ import annotations

from dataclasses import fields
from typing import Iterator

from . import ir
from . import tir as T
from .ir import Bits, Sym

#: fields of IR nodes that are not child nodes
_LEAVES = frozenset({"loc", "type", "sym", "target", "instance", "tvars", "digest", "values", "value", "member",
                     "name", "op", "kind", "on_value", "default", "state", "hi", "lo"})


def children(node) -> Iterator:
    """The IR nodes directly inside ``node`` (expressions, statements, cases), in source order."""
    for f in fields(node):
        if f.name in _LEAVES:
            continue
        v = getattr(node, f.name)
        if isinstance(v, tuple):
            yield from (x for x in v if x is not None)
        elif v is not None:
            yield v


def is_lookahead(e) -> bool:
    """Whether ``e`` is a call of ``packet_in.lookahead``."""
    return isinstance(e, T.Call) and e.kind == "method" and e.target == ("packet_in", "lookahead")


def refers(node, sym: Sym) -> bool:
    """Whether the IR ``node`` (or a tuple of nodes) names ``sym``."""
    if isinstance(node, tuple):
        return any(refers(x, sym) for x in node)
    if isinstance(node, T.Var):
        return node.sym is sym
    if isinstance(node, T.VarDecl) and node.sym is sym:
        return True
    return any(refers(x, sym) for x in children(node))


def overwrites(st, sym: Sym) -> bool:
    """Whether statement ``st`` always sets the scalar variable ``sym`` without reading it first: an
    assignment to it, or a register read or hash() into it."""
    if not isinstance(sym.type, (Bits, ir.BoolT)):
        return False
    if isinstance(st, T.Assign):
        return isinstance(st.lhs, T.Var) and st.lhs.sym is sym and not refers(st.rhs, sym)
    if isinstance(st, T.CallStmt):
        c = st.call
        k = c.kind
        out = c.args[0] if c.args else None
        if not (isinstance(out, T.Var) and out.sym is sym) or refers(c.args[1:], sym):
            return False
        return (k == "method" and c.target == ("register", "read")) or (k == "efunc" and c.target == "hash")
    return False


def set_before_use(rest, sym: Sym) -> bool:
    """Whether a scalar variable declared just before the statements ``rest`` (its whole scope) is set
    by the first of them that names it, or named by none: its initial value is then never read."""
    if not isinstance(sym.type, (Bits, ir.BoolT)):
        return False
    for st in rest:
        if refers(st, sym):
            return overwrites(st, sym)
    return True


def contains(st, kind: type) -> bool:
    """Whether a statement holds a statement of class ``kind`` (``T.Return``, ``T.Exit``) in its blocks,
    branches, loops and switch cases (actions called from it are separate bodies)."""
    if isinstance(st, kind):
        return True
    if isinstance(st, T.Block):
        return any(contains(x, kind) for x in st.stmts)
    if isinstance(st, T.If):
        return contains(st.then, kind) or (st.other is not None and contains(st.other, kind))
    if isinstance(st, T.Switch):
        return any(c.body is not None and contains(c.body, kind) for c in st.cases)
    if isinstance(st, T.For):
        return contains(st.body, kind)
    return False


def parser_is_dag(states) -> bool:
    """True when no state of ``states`` (a parser's :class:`~switch.tir.State` list) can be reached again
    (no loops, so no ParserTimeout possible) and no state uses 'exit': such a parser compiles to one
    straight-line function per state."""
    succ = {}
    for st in states:
        succ[st.name] = st.transition.targets()
        for x in st.stmts:
            if contains(x, T.Exit):
                return False
    colour: dict[str, int] = {}

    def visit(n: str) -> bool:
        if n in ("accept", "reject") or n not in succ:
            return True
        c = colour.get(n)
        if c == 1:
            return False
        if c == 2:
            return True
        colour[n] = 1
        ok = all(visit(m) for m in succ[n])
        colour[n] = 2
        return ok
    return visit("start")


def flat_state_copies(states) -> int:
    """How many state copies the flat (one-function) parser of ``states`` needs."""
    byname = {st.name: st for st in states}
    memo: dict[str, int] = {}

    def copies(name: str) -> int:
        if name not in byname:
            return 0
        if name not in memo:
            memo[name] = 1 + sum(copies(m) for m in byname[name].transition.targets())
        return memo[name]
    return copies("start")

"""Analyses of the checked syntax tree that the code generator (:mod:`switch.codegen`) bases its choices on,
kept apart from the code it prints: def-use facts about variables (is a variable's initial value ever read?),
whether a body holds a ``return`` or ``exit``, and the shape of a parser's state graph (loop-free? how many
state copies would one straight-line function need?).  Each is a pure function of the tree.
"""
from __future__ import annotations

from . import ir
from . import p4ast as A
from .ir import Bits, Sym


def is_lookahead(e) -> bool:
    """Whether ``e`` is a call of ``packet_in.lookahead``."""
    return isinstance(e, A.Call) and e.kind == "method" and e.target == ("packet_in", "lookahead")


def refers(node, sym: Sym) -> bool:
    """Whether the syntax tree ``node`` names ``sym``."""
    if isinstance(node, A.Name):
        return node.ref is sym
    if isinstance(node, list):
        return any(refers(x, sym) for x in node)
    if isinstance(node, A.Node):
        return any(refers(v, sym) for k, v in vars(node).items() if k not in ("ref", "type", "loc"))
    return False


def overwrites(st, sym: Sym) -> bool:
    """Whether statement ``st`` always sets the scalar variable ``sym`` without reading it first: an
    assignment to it, or a register read or hash() into it."""
    if not isinstance(sym.type, (Bits, ir.BoolT)):
        return False
    if isinstance(st, A.Assign):
        return isinstance(st.lhs, A.Name) and st.lhs.ref is sym and not refers(st.rhs, sym)
    if isinstance(st, A.CallStmt):
        c = st.call
        k = c.kind
        out = c.args[0] if c.args else None
        if not (isinstance(out, A.Name) and out.ref is sym) or refers(c.args[1:], sym):
            return False
        return (k == "method" and c.target == ("register", "read")) or (k == "efunc" and c.target == "hash")
    return False


def set_before_use(rest: list, sym: Sym) -> bool:
    """Whether a scalar variable declared just before the statements ``rest`` (its whole scope) is set
    by the first of them that names it, or named by none: its initial value is then never read."""
    if not isinstance(sym.type, (Bits, ir.BoolT)):
        return False
    for st in rest:
        if refers(st, sym):
            return overwrites(st, sym)
    return True


def contains(st, kind: type) -> bool:
    """Whether a statement holds a statement of class ``kind`` (``A.Return``, ``A.Exit``) in its blocks,
    branches and switch cases (actions called from it are separate bodies)."""
    if isinstance(st, kind):
        return True
    if isinstance(st, A.Block):
        return any(contains(x, kind) for x in st.stmts)
    if isinstance(st, A.If):
        return contains(st.then, kind) or (st.other is not None and contains(st.other, kind))
    if isinstance(st, A.Switch):
        return any(c.body is not None and contains(c.body, kind) for c in st.cases)
    if isinstance(st, A.For):
        return contains(st.body, kind)
    return False


def parser_is_dag(d) -> bool:
    """True when no state can be reached again (no loops, so no ParserTimeout possible) and no
    state uses 'exit': such a parser compiles to one straight-line function per state."""
    succ = {}
    for st in d.states:
        tr = st.transition
        succ[st.name] = [tr.state] if tr.state is not None else [c.state for c in tr.cases]
        for x in st.stmts:
            if contains(x, A.Exit):
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


def flat_state_copies(d) -> int:
    """How many state copies the flat (one-function) parser of ``d`` needs."""
    byname = {st.name: st for st in d.states}
    memo: dict[str, int] = {}

    def copies(name: str) -> int:
        if name not in byname:
            return 0
        if name not in memo:
            tr = byname[name].transition
            succ = [tr.state] if tr.state is not None else [c.state for c in tr.cases]
            memo[name] = 1 + sum(copies(m) for m in succ)
        return memo[name]
    return copies("start")

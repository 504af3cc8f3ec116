"""The checker's last step: a checked syntax-tree node -> its typed IR (:mod:`switch.midend.tir`).

:mod:`switch.frontend.check` resolves names and types on the syntax tree, recording what it decides in the fields the
syntax tree declares for it (:func:`switch.frontend.p4ast.checked`); these functions read those decisions once and build
the frozen typed IR that the analyses and the code generator consume.  Each is a pure function of a node the
checker has finished with (the checker calls them as it completes an action body, a table key, a block).
Constants become :class:`~switch.midend.tir.Const` (named constants, enum and error members included), so no
later stage resolves a name.
"""
from __future__ import annotations

from ..errors import unsupported
from ..midend import ir
from ..midend import tir as T
from ..midend.ir import Sym
from . import p4ast as A


def expr(e: A.Expr) -> T.Expr:
    """The typed IR of a checked expression."""
    t = e.type
    loc = e.loc
    if isinstance(e, (A.Lit, A.BoolLit, A.StrLit)):
        return T.Const(loc=loc, type=t, value=e.value)
    if isinstance(e, A.Default):
        return T.DontCare(loc=loc, type=t if t is not None else ir.DONTCARE)
    if isinstance(e, A.Name):
        s = e.ref
        if isinstance(s, Sym) and s.kind == "const":
            return T.Const(loc=loc, type=t, value=s.value)
        return T.Var(loc=loc, type=t, sym=s)
    if isinstance(e, A.Member):
        b = e.expr
        if isinstance(b, A.Name) and isinstance(b.ref, Sym) and b.ref.kind == "type":    # Enum.member, error.x
            return T.Const(loc=loc, type=t, value=b.type.members[e.name], member=e.name)
        return T.Member(loc=loc, type=t, expr=expr(b), name=e.name)
    if isinstance(e, A.Index):
        return T.Index(loc=loc, type=t, expr=expr(e.expr), index=expr(e.index))
    if isinstance(e, A.Slice):
        return T.Slice(loc=loc, type=t, expr=expr(e.expr), hi=e.hi_v, lo=e.lo_v)
    if isinstance(e, A.Unary):
        return T.Unary(loc=loc, type=t, op=e.op, expr=expr(e.expr))
    if isinstance(e, A.Binary):
        return T.Binary(loc=loc, type=t, op=e.op, left=expr(e.left), right=expr(e.right))
    if isinstance(e, A.Ternary):
        return T.Ternary(loc=loc, type=t, cond=expr(e.cond), then=expr(e.then), other=expr(e.other))
    if isinstance(e, A.Cast):
        return T.Cast(loc=loc, type=t, expr=expr(e.expr))
    if isinstance(e, A.ListExpr):
        return T.List(loc=loc, type=t, items=tuple(expr(x) for x in e.items))
    if isinstance(e, A.Call):
        return call(e)
    raise unsupported(type(e).__name__, loc)


def call(e: A.Call) -> T.Call:
    recv = inst = None
    if isinstance(e.func, A.Member) and e.kind in ("hdr", "union", "stack", "method"):
        recv = expr(e.func.expr)
        r = e.func.expr.ref if isinstance(e.func.expr, A.Name) else None
        if e.kind == "method" and isinstance(r, Sym) and r.kind == "instance":
            inst = r.decl
    return T.Call(loc=e.loc, type=e.type if e.type is not None else ir.VOID, kind=e.kind, target=e.target,
                  args=tuple(expr(a) for a in e.args), recv=recv, instance=inst, tvars=e.tvars, digest=e.digest)


def stmts(xs: list[A.Stmt]) -> tuple[T.Stmt, ...]:
    """Statements of a block; constant declarations are gone (their uses are constants)."""
    return tuple(stmt(x) for x in xs if not isinstance(x, A.ConstDecl))


def block(b: A.Block) -> T.Block:
    return T.Block(loc=b.loc, stmts=stmts(b.stmts))


def stmt(s: A.Stmt) -> T.Stmt:
    """The typed IR of a checked statement."""
    loc = s.loc
    if isinstance(s, A.Block):
        return block(s)
    if isinstance(s, A.Assign):
        return T.Assign(loc=loc, lhs=expr(s.lhs), rhs=expr(s.rhs))
    if isinstance(s, A.CallStmt):
        return T.CallStmt(loc=loc, call=call(s.call))
    if isinstance(s, A.If):
        return T.If(loc=loc, cond=expr(s.cond), then=stmt(s.then),
                    other=stmt(s.other) if s.other is not None else None)
    if isinstance(s, A.Switch):
        cases = []
        for c in s.cases:
            labels = [x for x in c.labels if not isinstance(x, A.Default)]
            vals = tuple(x.value_v if s.on_value else x.ref.index for x in labels)
            cases.append(T.SwitchCase(loc=c.loc, values=vals, default=len(labels) < len(c.labels),
                                      body=block(c.body) if c.body is not None else None))
        # a switch on action_run switches on the table apply call (s.expr is its .action_run member)
        x = expr(s.expr) if s.on_value else expr(s.expr.expr)
        return T.Switch(loc=loc, expr=x, cases=tuple(cases), on_value=s.on_value)
    if isinstance(s, A.VarDecl):
        return T.VarDecl(loc=loc, sym=s.sym, init=expr(s.init) if s.init is not None else None)
    if isinstance(s, A.ConstDecl):
        return T.Empty(loc=loc)
    if isinstance(s, A.For):
        return T.For(loc=loc, init=stmts(s.init), cond=expr(s.cond) if s.cond is not None else None,
                     update=stmts(s.update), body=stmt(s.body))
    if isinstance(s, A.Break):
        return T.Break(loc=loc)
    if isinstance(s, A.Continue):
        return T.Continue(loc=loc)
    if isinstance(s, A.Exit):
        return T.Exit(loc=loc)
    if isinstance(s, A.Return):
        return T.Return(loc=loc)
    if isinstance(s, A.Empty):
        return T.Empty(loc=loc)
    raise unsupported(type(s).__name__, loc)


def state(st: A.State) -> T.State:
    tr = st.transition
    cases = tuple(T.SelectCase(loc=c.loc, values=tuple(c.values), state=c.state) for c in tr.cases)
    t = T.Transition(loc=tr.loc, state=tr.state, select=tuple(expr(x) for x in tr.select or ()), cases=cases)
    return T.State(loc=st.loc, name=st.name, stmts=stmts(st.stmts), transition=t)


def annotations(annots: list[A.Annotation]) -> tuple[T.Annotation, ...]:
    """Annotations for the typed IR: literal arguments kept as values, anything else as None."""
    def arg(x):
        if isinstance(x, A.StrLit):
            return x.value
        if isinstance(x, A.Lit):
            return x.value
        return None
    return tuple(T.Annotation(loc=a.loc, name=a.name, args=tuple(arg(x) for x in a.args)) for a in annots)

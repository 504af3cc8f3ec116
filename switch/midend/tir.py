"""Typed IR of the bodies of a checked program: expressions, statements and parser states.

The compiler's pipeline is::

    preprocess -> parse (switch.frontend.parser: syntax tree, switch.frontend.p4ast)
               -> inline (switch.frontend.inline: functions, sub-parsers, sub-controls; still the syntax tree)
               -> check (switch.frontend.check: names and types; its last step, switch.frontend.lower,
                         builds this IR)
               -> analysis (switch.midend.analysis: facts about this IR)
               -> codegen (switch.backend.codegen: Python source, from this IR and switch.midend.ir only)

:mod:`switch.midend.ir` holds the program's declarations (types, symbols, actions, tables, extern instances, the
V1Switch blocks); this module holds what runs: every node is a frozen dataclass with its source position
(``loc``, for located errors) and, for expressions, its resolved :mod:`switch.midend.ir` type.  Nothing here
refers to the syntax tree, and nothing is added to a node after it is built: the code generator reads what the checker
decided (a call's kind and callee, a slice's bounds, a switch label's value, a select case's keyset values)
from these fields, never from annotations.

Where inlining sits (a choice): functions, sub-parsers and sub-controls are inlined on the syntax tree, before
checking (:mod:`switch.frontend.inline`), so that every inlined copy is checked in the context it lands in
(constructor parameters replaced by their constant arguments, locals renamed for P4Info) and its errors point at its own
source.  Actions are not inlined in the IR: a table chooses its action per packet, so the code generator inlines
action bodies into the generated code where it can (fused mode) and calls them otherwise.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import Loc
from .ir import Type


# ---- expressions ---------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False, kw_only=True)
class Expr:
    loc: Loc | None
    type: Type


@dataclass(frozen=True, eq=False, kw_only=True)
class Const(Expr):
    """A compile-time value: a literal, a named constant, an enum or error member (``member`` is then its
    name, e.g. ``crc16`` of ``HashAlgorithm.crc16``) or a string (log_msg's format).  ``value`` is as written;
    the code generator wraps it to ``type``."""
    value: Any
    member: str = ""


@dataclass(frozen=True, eq=False, kw_only=True)
class Var(Expr):
    """A variable, a block or action parameter (``sym.kind`` var / param / aparam)."""
    sym: Any                      # switch.midend.ir.Sym


@dataclass(frozen=True, eq=False, kw_only=True)
class Member(Expr):
    """``expr.name``: a header or struct field, a stack's next/last/size/lastIndex, an apply result's
    hit/miss/action_run, or a field of ``lookahead<H>()``."""
    expr: Expr
    name: str


@dataclass(frozen=True, eq=False, kw_only=True)
class Index(Expr):
    expr: Expr
    index: Expr


@dataclass(frozen=True, eq=False, kw_only=True)
class Slice(Expr):
    expr: Expr
    hi: int
    lo: int


@dataclass(frozen=True, eq=False, kw_only=True)
class Unary(Expr):
    op: str
    expr: Expr


@dataclass(frozen=True, eq=False, kw_only=True)
class Binary(Expr):
    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True, eq=False, kw_only=True)
class Ternary(Expr):
    cond: Expr
    then: Expr
    other: Expr


@dataclass(frozen=True, eq=False, kw_only=True)
class Cast(Expr):
    """``(type) expr``; the target type is ``type``."""
    expr: Expr


@dataclass(frozen=True, eq=False, kw_only=True)
class List(Expr):
    """A list or structure expression (``{a, b}``, ``{f = v}``), items in the target's field order."""
    items: tuple[Expr, ...]


@dataclass(frozen=True, eq=False, kw_only=True)
class DontCare(Expr):
    """``_`` passed to an ``out`` parameter: the value is dropped."""


@dataclass(frozen=True, eq=False, kw_only=True)
class Call(Expr):
    """A call, as the checker resolved it.  ``kind`` and ``target``:

    * ``efunc``: an extern function, ``target`` its name (``hash``, ``mark_to_drop``, ...)
    * ``action``: ``target`` the :class:`switch.midend.ir.ActionIR`
    * ``table``: ``target`` the :class:`switch.midend.ir.TableIR` (``t.apply()``)
    * ``hdr``: ``target`` isValid / setValid / setInvalid of the header ``recv``
    * ``union``: ``target`` isValid of the header union ``recv``
    * ``stack``: ``target`` (push_front | pop_front, count) of the stack ``recv``
    * ``method``: ``target`` (extern type name, method name); ``instance`` the
      :class:`switch.midend.ir.InstanceIR` called (None for packet_in / packet_out)

    ``tvars``: the type variables the call bound (``lookahead<T>``'s T); ``digest``: digest()'s
    :class:`switch.midend.ir.DigestIR`."""
    kind: str
    target: Any
    args: tuple[Expr, ...]
    recv: Expr | None = None
    instance: Any = None
    tvars: Any = None
    digest: Any = None


# ---- statements ----------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False, kw_only=True)
class Stmt:
    loc: Loc | None


@dataclass(frozen=True, eq=False, kw_only=True)
class Assign(Stmt):
    lhs: Expr
    rhs: Expr


@dataclass(frozen=True, eq=False, kw_only=True)
class CallStmt(Stmt):
    call: Call


@dataclass(frozen=True, eq=False, kw_only=True)
class Block(Stmt):
    stmts: tuple[Stmt, ...]


@dataclass(frozen=True, eq=False, kw_only=True)
class If(Stmt):
    cond: Expr
    then: Stmt
    other: Stmt | None


@dataclass(frozen=True, eq=False, kw_only=True)
class SwitchCase:
    """One case: ``values`` are action indexes (a switch on ``action_run``) or label values (a switch on a
    value); ``default`` marks the default case; ``body`` None falls through to the next case."""
    loc: Loc | None
    values: tuple[int, ...]
    default: bool
    body: Block | None


@dataclass(frozen=True, eq=False, kw_only=True)
class Switch(Stmt):
    """``switch (t.apply().action_run)`` (``on_value`` False, ``expr`` the table apply call) or a switch on
    a value (``on_value`` True, ``expr`` the value)."""
    expr: Expr
    cases: tuple[SwitchCase, ...]
    on_value: bool


@dataclass(frozen=True, eq=False, kw_only=True)
class VarDecl(Stmt):
    """A local variable (``sym``, a :class:`switch.midend.ir.Sym` of kind var) with its initial value, if any."""
    sym: Any
    init: Expr | None


@dataclass(frozen=True, eq=False, kw_only=True)
class For(Stmt):
    init: tuple[Stmt, ...]
    cond: Expr | None
    update: tuple[Stmt, ...]
    body: Stmt


@dataclass(frozen=True, eq=False, kw_only=True)
class Break(Stmt):
    pass


@dataclass(frozen=True, eq=False, kw_only=True)
class Continue(Stmt):
    pass


@dataclass(frozen=True, eq=False, kw_only=True)
class Exit(Stmt):
    pass


@dataclass(frozen=True, eq=False, kw_only=True)
class Return(Stmt):
    pass


@dataclass(frozen=True, eq=False, kw_only=True)
class Empty(Stmt):
    pass


# ---- parsers -------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False, kw_only=True)
class SelectCase:
    """A select case: per select key, its keyset value (``("exact", v)``, ``("ternary", v, mask)``,
    ``("range", lo, hi)``, ``("vset", ValueSetIR)``) or None (don't care)."""
    loc: Loc | None
    values: tuple[Any, ...]
    state: str


@dataclass(frozen=True, eq=False, kw_only=True)
class Transition:
    """``transition state`` (``state`` set) or ``transition select (keys) { cases }``."""
    loc: Loc | None
    state: str | None
    select: tuple[Expr, ...] = ()
    cases: tuple[SelectCase, ...] = ()

    def targets(self) -> list[str]:
        """The states this transition can go to, in order."""
        return [self.state] if self.state is not None else [c.state for c in self.cases]


@dataclass(frozen=True, eq=False, kw_only=True)
class State:
    loc: Loc | None
    name: str
    stmts: tuple[Stmt, ...]
    transition: Transition


# ---- annotations ---------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False, kw_only=True)
class Annotation:
    """``@name(args)`` on a declaration the back end describes (P4Info): each argument an ``int`` (an integer
    literal), a ``str`` (a string literal) or None (any other expression or unstructured token text)."""
    loc: Loc | None
    name: str
    args: tuple[int | str | None, ...]


def annotation(annots, name: str) -> Annotation | None:
    """The first annotation called ``name`` in ``annots``."""
    for a in annots:
        if a.name == name:
            return a
    return None

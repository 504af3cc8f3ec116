"""Syntax tree of the supported P4-16 subset, produced by :mod:`switch.frontend.parser`.

Nodes are plain dataclasses carrying a :class:`~switch.errors.Loc`.  The checker (:mod:`switch.frontend.check`) fills
in the fields declared with :func:`checked` -- an expression's resolved type and declaration, a call's kind and
target, constant values it folded -- and nothing else, as its working notes: :mod:`switch.frontend.lower` reads them
once
to build the typed IR (:mod:`switch.midend.tir`), and no later stage sees this tree.  Those fields are not constructor
arguments, take no part in equality or ``repr``, and are None (or False) until the checker has run.  A few such
fields are set earlier, by the inliner (:mod:`switch.frontend.inline`), for the checker to enforce and report: an
expression's ``readonly`` (it stands for an inlined ``in`` or directionless parameter), a constant's ``arg_for``
and a variable's ``arg_for`` (they hold the argument of a function's directionless parameter) a block's ``site`` (the sub-control apply
whose body it is) and a control's ``inlined_actions`` (for P4Info).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import Loc


@dataclass
class Node:
    loc: Loc


def checked(default: Any = None) -> Any:
    """A field the checker fills in (see the module docstring)."""
    return field(default=default, init=False, repr=False, compare=False)


@dataclass
class Annotation(Node):
    name: str
    args: list[Any] = field(default_factory=list)   # expressions or raw token text


def annot(annots: list[Annotation], name: str) -> Annotation | None:
    for a in annots:
        if a.name == name:
            return a
    return None


# ---- types -------------------------------------------------------------------------------------
@dataclass
class TypeRef(Node):
    """kind: bit, int, varbit, bool, error, void, string, name, stack, tuple, dontcare, match_kind."""
    kind: str
    width: Any = None                 # expression for bit/int/varbit
    name: str = ""
    args: list["TypeRef"] = field(default_factory=list)
    size: Any = None                  # stack size expression


# ---- expressions -------------------------------------------------------------------------------
@dataclass
class Expr(Node):
    type: Any = checked()             # the resolved type (a switch.midend.ir type)
    ref: Any = checked()              # what a name refers to (a switch.midend.ir.Sym, or the overloads of a name)
    value_v: Any = checked()          # a switch case label's constant value (switch on a value)
    readonly: Any = checked()         # set by the inliner: a ReadOnlyParam when this stands for an in/directionless
                                      # parameter of an inlined function, sub-control or sub-parser


@dataclass
class Lit(Expr):
    value: int
    width: int | None = None
    signed: bool = False


@dataclass
class BoolLit(Expr):
    value: bool


@dataclass
class StrLit(Expr):
    value: str


@dataclass
class Name(Expr):
    name: str


@dataclass
class Member(Expr):
    expr: Expr
    name: str
    name_loc: Loc | None = checked()  # where the member's name is (set by the parser; errors point at it)


@dataclass
class Index(Expr):
    expr: Expr
    index: Expr


@dataclass
class Slice(Expr):
    expr: Expr
    hi: Expr
    lo: Expr
    hi_v: Any = checked()             # the bounds' constant values
    lo_v: Any = checked()


@dataclass
class Call(Expr):
    func: Expr
    type_args: list[TypeRef]
    args: list[Expr]
    kind: Any = checked()             # efunc, action, union, hdr, stack, table, method (check.Checker.call)
    target: Any = checked()           # what is called: the extern function's name, an ActionIR, a TableIR, ...
    tvars: Any = checked()            # type variables bound by the call (name -> type)
    digest: Any = checked()           # digest(): its switch.midend.ir.DigestIR


@dataclass
class Unary(Expr):
    op: str
    expr: Expr


@dataclass
class Binary(Expr):
    op: str
    left: Expr
    right: Expr


@dataclass
class Ternary(Expr):
    cond: Expr
    then: Expr
    other: Expr


@dataclass
class Cast(Expr):
    to: TypeRef
    expr: Expr


@dataclass
class ListExpr(Expr):
    items: list[Expr]


@dataclass
class NamedArg(Expr):
    """``name = value`` in an argument list (P4-16 6.8.1); :func:`resolve_args` puts it in place."""
    name: str
    value: Expr


@dataclass
class StructExpr(ListExpr):
    """``{f = v, ...}`` (P4-16 8.13): a list expression whose items carry field names; the checker puts them
    in the target type's field order when it assigns one."""
    names: list[str] = field(default_factory=list)


@dataclass
class Mask(Expr):
    value: Expr
    mask: Expr


@dataclass
class Range(Expr):
    lo: Expr
    hi: Expr


@dataclass
class Default(Expr):
    """``default`` or ``_`` in a keyset."""
    dontcare: bool = False


# ---- statements --------------------------------------------------------------------------------
@dataclass
class Stmt(Node):
    pass


@dataclass
class Assign(Stmt):
    lhs: Expr
    rhs: Expr


@dataclass
class CallStmt(Stmt):
    call: Call


@dataclass
class If(Stmt):
    cond: Expr
    then: Stmt
    other: Stmt | None


@dataclass
class Block(Stmt):
    stmts: list[Stmt]
    site: Any = checked()             # set by the inliner: where the sub-control apply this block inlines is


@dataclass
class SwitchCase(Node):
    labels: list[Any]      # Name(action) / Default / expression
    body: Block | None     # None = fall through


@dataclass
class Switch(Stmt):
    expr: Expr
    cases: list[SwitchCase]
    on_value: bool = checked(False)   # a switch on a value (not on a table's action_run)


@dataclass
class Exit(Stmt):
    pass


@dataclass
class For(Stmt):
    """P4-16 1.2.4 ``for (init; cond; update) body``; ``for (T x in lo .. hi)`` is parsed into this form with
    ``in_range`` set, so that the checker can type its parts and then refuse it for BMv2 (:mod:`.bmv2_rules`)."""
    init: list[Stmt]
    cond: Expr | None
    update: list[Stmt]
    body: Stmt
    in_range: bool = False


@dataclass
class Break(Stmt):
    pass


@dataclass
class Continue(Stmt):
    pass


@dataclass
class Return(Stmt):
    expr: Expr | None


@dataclass
class Empty(Stmt):
    pass


@dataclass
class VarDecl(Stmt):
    type: TypeRef
    name: str
    init: Expr | None
    annots: list[Annotation] = field(default_factory=list)
    sym: Any = checked()              # the variable's switch.midend.ir.Sym
    arg_for: Any = checked()          # set by the inliner: the ReadOnlyParam whose (list) argument this holds


@dataclass
class ConstDecl(Stmt):
    type: TypeRef
    name: str
    init: Expr
    annots: list[Annotation] = field(default_factory=list)
    arg_for: Any = checked()          # set by the inliner: the ReadOnlyParam whose argument this constant holds


@dataclass
class ReadOnlyParam:
    """An ``in`` or directionless parameter of an inlined function, sub-control or sub-parser: the inliner marks
    every use of it in the inlined body so the checker refuses writes as p4c does (P4-16 6.8: only ``out`` and
    ``inout`` parameters are l-values) and names the parameter, not the inliner's copy."""

    name: str
    direction: str         # "in" or "" (directionless)
    owner: str             # "function f", "control C", "parser P", "action a"
    at: Loc | None = None  # the use in the body (an argument put in its place has the call's location)

    def describe(self) -> str:
        what = "an 'in' parameter" if self.direction == "in" else "a parameter without direction"
        return f"'{self.name}', {what} of {self.owner} (only out and inout parameters are writable)"


@dataclass
class Instance(Stmt):
    type: TypeRef
    args: list[Expr]
    name: str
    annots: list[Annotation] = field(default_factory=list)


# ---- declarations ------------------------------------------------------------------------------
@dataclass
class Param(Node):
    direction: str         # "", in, out, inout
    type: TypeRef
    name: str
    annots: list[Annotation] = field(default_factory=list)
    default: Expr | None = None     # default value (P4-16 6.8.2)


@dataclass
class FieldDecl(Node):
    type: TypeRef
    name: str
    annots: list[Annotation] = field(default_factory=list)


@dataclass
class Decl(Node):
    name: str
    annots: list[Annotation] = field(default_factory=list)


@dataclass
class HeaderDecl(Decl):
    fields: list[FieldDecl] = field(default_factory=list)
    is_struct: bool = False
    is_union: bool = False        # header_union (P4-16 8.20)


@dataclass
class EnumDecl(Decl):
    underlying: TypeRef | None = None
    members: list[tuple[str, Expr | None, Loc]] = field(default_factory=list)


@dataclass
class ErrorDecl(Decl):
    members: list[tuple[str, Loc]] = field(default_factory=list)


@dataclass
class MatchKindDecl(Decl):
    members: list[tuple[str, Loc]] = field(default_factory=list)


@dataclass
class TypedefDecl(Decl):
    type: TypeRef | None = None


@dataclass
class MethodProto(Node):
    ret: TypeRef | None          # None for constructors
    name: str
    type_params: list[str]
    params: list[Param]
    annots: list[Annotation] = field(default_factory=list)


@dataclass
class ExternDecl(Decl):
    type_params: list[str] = field(default_factory=list)
    methods: list[MethodProto] = field(default_factory=list)


@dataclass
class ExternFuncDecl(Decl):
    proto: MethodProto | None = None


@dataclass
class BlockTypeDecl(Decl):
    """A parser/control prototype or a package declaration."""
    kind: str = ""               # parser, control, package
    type_params: list[str] = field(default_factory=list)
    params: list[Param] = field(default_factory=list)


@dataclass
class ActionDecl(Decl):
    params: list[Param] = field(default_factory=list)
    body: Block | None = None
    localized: bool = False           # a control's copy of a top-level action (switch.frontend.inline.Inliner.localize)
    copy_of: str = ""                 # a table's copy of this action, bound otherwise (Inliner.table_copy)


@dataclass
class ValueSetDecl(Decl):
    """``value_set<T>(size) name;`` in a parser (P4-16 13.6): select keysets the control plane fills."""
    type: TypeRef | None = None
    size: Expr | None = None


@dataclass
class FunctionDecl(Decl):
    """A top-level ``function`` declaration (P4-16 10.2); the inliner (:mod:`switch.frontend.inline`) inlines every
    call."""
    ret: TypeRef | None = None
    params: list[Param] = field(default_factory=list)
    body: Block | None = None


@dataclass
class KeyElement(Node):
    expr: Expr
    match_kind: str
    annots: list[Annotation] = field(default_factory=list)


@dataclass
class ActionRef(Node):
    name: str
    args: list[Expr] | None
    annots: list[Annotation] = field(default_factory=list)


@dataclass
class EntryDecl(Node):
    keys: list[Expr]
    action: ActionRef
    priority: Expr | None = None
    annots: list[Annotation] = field(default_factory=list)


@dataclass
class TableDecl(Decl):
    keys: list[KeyElement] = field(default_factory=list)
    actions: list[ActionRef] = field(default_factory=list)
    default_action: ActionRef | None = None
    const_default: bool = False
    size: Expr | None = None
    entries: list[EntryDecl] | None = None
    const_entries: bool = False
    implementation: Expr | None = None
    counters: Expr | None = None
    meters: Expr | None = None
    props: dict[str, Any] = field(default_factory=dict)
    has_key: bool = False
    has_actions: bool = False         # an 'actions' property, maybe empty (p4c requires one)


@dataclass
class SelectCase(Node):
    keyset: Expr
    state: str
    values: Any = checked()           # the keyset's values, one per select key (switch.frontend.check select_keyset)


@dataclass
class Transition(Node):
    state: str | None             # direct transition
    select: list[Expr] | None = None
    cases: list[SelectCase] = field(default_factory=list)


@dataclass
class State(Decl):
    stmts: list[Stmt] = field(default_factory=list)
    transition: Transition | None = None


@dataclass
class ParserDecl(Decl):
    params: list[Param] = field(default_factory=list)
    ctor_params: list[Param] = field(default_factory=list)
    locals: list[Any] = field(default_factory=list)
    states: list[State] = field(default_factory=list)


@dataclass
class ControlDecl(Decl):
    params: list[Param] = field(default_factory=list)
    ctor_params: list[Param] = field(default_factory=list)
    locals: list[Any] = field(default_factory=list)
    apply: Block | None = None
    inlined_actions: Any = checked()  # set by the inliner: (ActionDecl, top-level?) of each action with out/inout
                                      # parameters the apply body calls, inlined there (P4Info still lists it)


@dataclass
class Program(Node):
    decls: list[Any]


def resolve_args(args: list[Expr], params: list[Param], loc, what: str) -> list[Expr]:
    """The arguments of a call in parameter order: named arguments (all or none, P4-16 6.8.1) put in place and
    omitted ones filled with a copy of the parameter's default value (6.8.2).  Raises a located P4Error for an
    unknown, repeated or missing argument."""
    import copy

    from ..errors import P4Error
    named = [a for a in args if isinstance(a, NamedArg)]
    if not named and len(args) >= len(params):
        return args
    if named and len(named) != len(args):
        raise P4Error(loc, f"{what}: either every argument is named or none is")
    out: list[Expr | None] = [None] * len(params)
    if named:
        idx = {p.name: i for i, p in enumerate(params)}
        for a in named:
            if a.name not in idx:
                raise P4Error(a.loc, f"{what} has no parameter named '{a.name}'")
            if out[idx[a.name]] is not None:
                raise P4Error(a.loc, f"argument '{a.name}' given twice")
            out[idx[a.name]] = a.value
    else:
        out[:len(args)] = args
    for i, (p, a) in enumerate(zip(params, out)):
        if a is None:
            if p.default is None:
                raise P4Error(loc, f"{what} expects {len(params)} argument(s): '{p.name}' is missing")
            out[i] = copy.deepcopy(p.default)
    return out      # type: ignore[return-value]

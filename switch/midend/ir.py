"""Declarations of a checked program: types, resolved symbols, actions, tables, extern instances and the
V1Switch blocks.

The checker (:mod:`switch.frontend.check`) produces these objects; the bodies they hold (an action's statements, a
control's apply block, a parser's states, a table's key expressions) are typed IR (:mod:`switch.midend.tir`).  The
code generator (:mod:`switch.backend.codegen`) reads only these two modules, never the syntax tree; the ``decl``
fields below point into the syntax tree for the checker's own use and no later stage reads them.

Storage layout: every value is flattened into consecutive *slots* of a per-packet Python list.
``Type.slots`` is the number of slots a value of the type occupies: 1 for scalars; a header has
a validity slot followed by its fields; a struct concatenates its fields; a header stack has a
``nextIndex`` slot followed by its elements.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from ..errors import Loc


class Type:
    slots = 1
    name = "?"

    def __str__(self) -> str:
        return self.name


class Bits(Type):
    """bit<W> (signed=False) or int<W> (signed=True)."""

    def __init__(self, width: int, signed: bool = False):
        self.width = width
        self.signed = signed
        self.name = f"{'int' if signed else 'bit'}<{width}>"
        self.mask = (1 << width) - 1

    def __eq__(self, o):
        return isinstance(o, Bits) and o.width == self.width and o.signed == self.signed

    def __hash__(self):
        return hash((self.width, self.signed))


class VarbitT(Type):
    """varbit<MAX>: one slot holding the tuple (current width in bits, value)."""

    def __init__(self, max_width: int):
        self.max_width = max_width
        self.width = max_width          # static size (sizeInBits of a header uses the maximum)
        self.name = f"varbit<{max_width}>"

    def __eq__(self, o):
        return isinstance(o, VarbitT) and o.max_width == self.max_width

    def __hash__(self):
        return hash(("varbit", self.max_width))


class IntLit(Type):
    """The type of an arbitrary-precision integer literal ('int')."""
    name = "int"


class BoolT(Type):
    name = "bool"
    width = 1


class StrT(Type):
    name = "string"


class VoidT(Type):
    name = "void"


class DontCareT(Type):
    name = "_"


class ErrorT(Type):
    name = "error"

    def __init__(self):
        self.members: dict[str, int] = {}


class MatchKindT(Type):
    name = "match_kind"

    def __init__(self):
        self.members: dict[str, int] = {}


class EnumT(Type):
    """A plain enum (underlying None, values are member indexes) or a serializable enum."""

    def __init__(self, name: str, underlying: Bits | None):
        self.name = name
        self.underlying = underlying
        self.members: dict[str, int] = {}

    @property
    def width(self) -> int:
        return self.underlying.width if self.underlying else 32


class HeaderT(Type):
    def __init__(self, name: str, fields: list[tuple[str, Type]]):
        self.name = name
        self.fields = fields
        self.index = {n: i for i, (n, _) in enumerate(fields)}
        self.slots = 1 + len(fields)
        self.width = sum(t.width for _, t in fields)
        vb = [i for i, (_, t) in enumerate(fields) if isinstance(t, VarbitT)]
        self.varbit: int | None = vb[0] if vb else None      # index of the varbit field, if any
        self.fixed_width = sum(t.width for _, t in fields if not isinstance(t, VarbitT))

    def offset(self, fname: str) -> int:
        return 1 + self.index[fname]

    def ftype(self, fname: str) -> Type:
        return self.fields[self.index[fname]][1]


class StructT(Type):
    def __init__(self, name: str, fields: list[tuple[str, Type]]):
        self.name = name
        self.fields = fields
        self.index = {n: i for i, (n, _) in enumerate(fields)}
        self.offsets = {}
        o = 0
        for n, t in fields:
            self.offsets[n] = o
            o += t.slots
        self.slots = o

    def offset(self, fname: str) -> int:
        return self.offsets[fname]

    def ftype(self, fname: str) -> Type:
        return self.fields[self.index[fname]][1]


class HeaderUnionT(StructT):
    """header_union: laid out as a struct of its member headers; at most one member is valid (the code
    generator invalidates the others whenever one becomes valid)."""

    def members_valid(self, base: int) -> list[tuple[str, int]]:
        """(member name, validity slot) of every member for a union stored at slot ``base``."""
        return [(n, base + self.offsets[n]) for n, _ in self.fields]


class StackT(Type):
    def __init__(self, elem: HeaderT, size: int):
        self.elem = elem
        self.size = size
        self.name = f"{elem.name}[{size}]"
        self.slots = 1 + size * elem.slots


class TupleT(Type):
    def __init__(self, elems: list[Type]):
        self.elems = elems
        self.name = "tuple<" + ", ".join(map(str, elems)) + ">"
        self.slots = sum(e.slots for e in elems)


class TypeVar(Type):
    def __init__(self, name: str):
        self.name = name


class ExternT(Type):
    """An extern object type (packet_in, register<bit<32>>, ...)."""

    def __init__(self, decl: Any, args: list[Type]):
        self.decl = decl
        self.args = args
        self.name = decl.name + (("<" + ", ".join(map(str, args)) + ">") if args else "")


class TableT(Type):
    def __init__(self, table: "TableIR"):
        self.table = table
        self.name = f"table {table.name}"


class ApplyResultT(Type):
    def __init__(self, table: "TableIR"):
        self.table = table
        self.name = f"apply result of {table.name}"


class ActionEnumT(Type):
    def __init__(self, table: "TableIR"):
        self.table = table
        self.name = f"action_list({table.name})"


class BlockT(Type):
    """A parser/control/package type or declaration."""

    def __init__(self, decl: Any):
        self.decl = decl
        self.name = decl.name


BOOL = BoolT()
INTLIT = IntLit()
VOID = VoidT()
STR = StrT()
DONTCARE = DontCareT()


def is_scalar(t: Type) -> bool:
    return isinstance(t, (Bits, BoolT, EnumT, ErrorT, IntLit))


def bit_width(t: Type) -> int:
    """Width in bits when serialised (headers, lists, checksums, hashes)."""
    if isinstance(t, (Bits, BoolT, EnumT)):
        return t.width
    if isinstance(t, HeaderT):
        return t.width
    if isinstance(t, StructT):
        return sum(bit_width(ft) for _, ft in t.fields)
    if isinstance(t, ErrorT):
        return 32
    raise TypeError(t)


# ---- symbols and declarations ------------------------------------------------------------------
@dataclass(eq=False)
class Sym:
    """A resolved name. kind: type, const, var, param, aparam, action, table, instance, efunc,
    state, block, package."""

    kind: str
    name: str
    type: Type | None
    loc: Loc
    decl: Any = None
    value: Any = None            # constants
    direction: str = ""          # params
    owner: str = ""              # action parameters: the action ("action set"), for errors


@dataclass(eq=False)
class ActionIR:
    name: str
    fqname: str
    params: list[Sym]
    decl: Any
    annots: tuple                # switch.midend.tir.Annotation
    index: int = 0               # position in ProgramIR.actions
    in_params: list[Sym] = field(default_factory=list)   # directional ('in') parameters, given by direct calls
    body: Any = None             # switch.midend.tir.Block, set once the checker has checked the body


@dataclass(eq=False)
class KeyIR:
    expr: Any                    # switch.midend.tir.Expr
    match_kind: str
    name: str
    width: int
    annots: tuple                # switch.midend.tir.Annotation


@dataclass(eq=False)
class EntryIR:
    keys: list[Any]              # per key: ("exact", v) ("lpm", v, plen) ("ternary", v, m) ("range", lo, hi) ("optional", v|None) or None (don't care)
    action: ActionIR
    args: list[int]
    priority: int | None
    loc: Loc


@dataclass(eq=False)
class TableIR:
    name: str
    fqname: str
    keys: list[KeyIR]
    selector_keys: list[KeyIR]
    actions: list[ActionIR]
    action_scopes: dict[str, str]             # action fqname -> TABLE_AND_DEFAULT/TABLE_ONLY/DEFAULT_ONLY
    default_action: ActionIR
    default_args: list[int]
    const_default: bool
    size: int
    entries: list[EntryIR] | None
    const_entries: bool
    implementation: "InstanceIR | None"
    direct_counter: "InstanceIR | None"
    direct_meter: "InstanceIR | None"
    annots: tuple                # switch.midend.tir.Annotation
    loc: Loc
    index: int = 0

    def runnable_actions(self, program_actions: Iterable["ActionIR"]) -> list["ActionIR"]:
        """The actions a lookup of this table can hand back, in a fixed order: its action list and its default
        action; with an action profile or selector (``implementation``), any action of the program, since the
        profile's members are written by the controller. Analysis and code generation both walk this list."""
        if self.implementation is not None:
            return list(program_actions)
        acts = list(self.actions)
        if self.default_action is not None and self.default_action not in acts:
            acts.append(self.default_action)
        return acts


@dataclass(eq=False)
class InstanceIR:
    """An extern instance (counter, register, action_selector, ...) with constant ctor args."""

    name: str
    fqname: str
    extern: str
    type_args: list[Type]
    args: list[Any]
    annots: tuple                # switch.midend.tir.Annotation
    loc: Loc
    index: int = 0
    tables: list[TableIR] = field(default_factory=list)


@dataclass(eq=False)
class BlockIR:
    """A parser or control with its checked contents."""

    kind: str                    # parser / control
    name: str
    decl: Any
    params: list[Sym]
    locals: list[Sym] = field(default_factory=list)
    actions: list[ActionIR] = field(default_factory=list)
    tables: list[TableIR] = field(default_factory=list)
    instances: list[InstanceIR] = field(default_factory=list)
    inits: tuple = ()            # switch.midend.tir.VarDecl of the block's local variables, in order
    apply: Any = None            # a control's apply body (switch.midend.tir.Block)
    inlined_actions: list = field(default_factory=list)   # (ActionIR, top-level?) of the actions with out/inout
                                 # parameters the apply body calls: inlined by the inliner, listed in P4Info only
    states: tuple = ()           # a parser's states (switch.midend.tir.State), in declaration order


@dataclass(eq=False)
class ValueSetIR:
    """A parser value_set of ``bit<width>`` values (P4Runtime ValueSetEntry: exact members)."""

    name: str
    fqname: str
    width: int
    size: int
    annots: tuple                # switch.midend.tir.Annotation
    loc: Loc
    index: int = 0


@dataclass(eq=False)
class DigestIR:
    name: str
    type: Type
    index: int = 0


@dataclass(eq=False)
class ProgramIR:
    """Everything the code generator, the runtime and P4Info need."""

    path: str
    headers_type: Type
    meta_type: Type
    sm_type: StructT
    blocks: dict[str, BlockIR]               # role (parser, verify, ingress, egress, compute, deparser) -> block
    actions: list[ActionIR]
    tables: list[TableIR]
    instances: list[InstanceIR]
    digests: list[DigestIR]
    errors: ErrorT
    header_types: dict[str, Type]
    controller_headers: list[tuple[str, HeaderT, tuple]]   # (name, type, switch.midend.tir.Annotation)
    type_syms: dict[str, Sym] = field(default_factory=dict)
    value_sets: list[ValueSetIR] = field(default_factory=list)
    field_lists: dict[int, list[str]] = field(default_factory=dict)    # v1model @field_list -> meta fields

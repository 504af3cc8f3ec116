"""Code generator: typed IR -> Python source, compiled once with ``compile``/``exec``.

It reads only the typed IR -- declarations in :mod:`switch.midend.ir`, bodies in :mod:`switch.midend.tir` -- and
the facts :mod:`switch.midend.analysis` finds on it (the pipeline is described in :mod:`switch.midend.tir`), in one
run per program.

Each parser/control becomes one Python function over ``s``, the per-packet slot list (see
:mod:`switch.midend.ir` for the layout); every action becomes a function ``A<i>(s, args)`` whose action
data come as one tuple.  Exact P4 bit semantics are spelled out in the generated expressions (masks
for wrap-around, two's complement re-wrapping for int<W>, shifts by >= width giving 0, saturating ops
clamped), so no per-packet tree walking or type dispatch is left at run time.

Fast paths (``Gen(prog, fast=True)``, the default; docs/switch-target.md): headers parsed and emitted
with one ``struct`` call each (:mod:`switch.backend.layout`), csum16 checksums folded over small integers,
counters and registers indexed inline, a loop-free parser as one function, simple and
direct-counted tables applied inline from a per-table cache.  On top of them the *fused* mode
(``fuse=True``, the default): the whole pipeline as two functions, ``F_ingress`` and ``F_egress``,
over local variables instead of the slot list, with actions inlined, the switch's glue and the
traffic manager's enqueue included, only the slots egress needs carried through the queue, and
headers nothing but extract writes re-emitted (and checksummed) from the received bytes
(:meth:`Gen.generate_fused`); programs it cannot express raise :class:`NotFusable` and get the list
shape.  ``fast=False`` generates the plain reference code; tests/switch/test_fastpath.py runs all
three and requires identical behaviour.
"""
from __future__ import annotations

import re
from typing import Any

from ..errors import Loc, P4Error, unsupported
from ..midend import ir
from ..midend import tir as T
from ..midend.analysis import (ROLES, StorageFacts, contains, flat_state_copies, is_lookahead, parser_is_dag,
                               set_before_use, storage_facts, storage_roots)
from ..midend.ir import Bits, Sym
from . import layout

QDEPTH_MAX = (1 << 19) - 1     # enq_qdepth / deq_qdepth are bit<19> in v1model


#: the packet's hidden slots for v1model requests (Gen.v1) and the externs that set them
V1_SLOTS = ("clone_i2e", "clone_i2e_fl", "clone_e2e", "clone_e2e_fl", "resubmit", "recirculate", "truncate",
            "passes")
V1_EXTERNS = {"clone", "clone3", "clone_preserving_field_list", "resubmit", "resubmit_preserving_field_list",
              "recirculate", "recirculate_preserving_field_list", "truncate"}
NO_FIELD_LIST = 1 << 16           # a request that preserves no metadata (field list indexes are bit<8>)


class NotFusable(Exception):
    """The program needs the slot list (a slot address computed per packet, or a table applied in
    a conditionally evaluated operand): generate it in list mode instead (``Gen(fuse=False)``)."""


class Gen:
    """The code generator of one program: ``Gen(prog, fast, fuse).generate()`` returns the Python source.
    Expressions become code strings (:meth:`expr`), statements lines (:meth:`stmt`, :meth:`emit`); storage is
    addressed by slot (:meth:`addr`, :meth:`slot_plus`) and read or written through :meth:`slot_ref`."""

    def __init__(self, prog: ir.ProgramIR, fast: bool = True, fuse: bool = True):
        self.prog = prog
        # fast=False generates the plain reference code (big-integer header parse/emit, checksum and
        # extern calls through switch.backend.runtime, one function per parser state, uncached table
        # lookups); the tests run both and compare (tests/switch/test_fastpath.py)
        self.fast = fast
        # fused (fast only): the whole pipeline as two functions over local variables, F_ingress and
        # F_egress (see generate_fused); raises NotFusable when the program needs the slot list
        self.fused = fast and fuse
        # fused mode bookkeeping: slots the code generated so far reads and writes; headers extracted
        # with one struct call (base slot -> the slot of the local holding the offset they were extracted
        # at); what the program reads and how (switch.midend.analysis.storage_facts, found on the IR before
        # generating: what nothing reads is not computed)
        self.reads: set[int] = set()
        self.writes: set[int] = set()
        self.off_slot: dict[int, int] = {}
        self.facts: StorageFacts | None = None
        self.owners: list[tuple] = []         # per slot: its storage key (StorageFacts), e.g. ("H", 3)
        self.slot_of: dict[Sym, int] = {}     # first slot of each variable and parameter (the IR is not written)
        self.pnames: dict[int, str] = {}      # id(action parameter Sym) -> local name of an inlined copy
        self.cur_ind: int | None = None       # where a table apply in an expression can be placed
        self.no_hoist = 0                     # > 0: inside an operand evaluated conditionally
        self.carried: list[int] = []          # slots F_ingress hands to F_egress through the queue
        self.nslots = 0
        self.init: list[Any] = []
        self.lines: list[str] = []
        self.fresh_count = 0
        # crc16_custom / crc32_custom call sites, in the order first generated: (location, width); HC<i> in
        # the generated code is the i-th (see hash_fn)
        self.custom_crcs: list[tuple[Loc, int]] = []
        self._custom_index: dict[tuple[str, int, int], int] = {}
        self.structs: dict[str, str] = {}     # struct format -> name of its Struct in the generated code
        self.loops: list[str] = []            # break flags of the enclosing for loops
        self.headers_base = self.alloc(prog.headers_type, "H")
        self.meta_base = self.alloc(prog.meta_type, "M")
        self.sm_base = self.alloc(prog.sm_type, "SM")
        self.sm = {n: self.sm_base + prog.sm_type.offset(n) for n, _ in prog.sm_type.fields}
        # v1model requests the target acts on after ingress/egress (0: none): clone session + 1 and field
        # list + 1 for each direction, resubmit/recirculate field list + 1, truncate length
        self.v1 = {n: self.alloc(Bits(32), "v1." + n) for n in V1_SLOTS}
        self.uses_v1 = False          # the program calls clone/resubmit/recirculate/truncate
        self.field_lists: dict[int, list[int]] = {}
        mt = prog.meta_type
        for idx, names in prog.field_lists.items():
            slots = []
            for n in names:
                base = self.meta_base + mt.offset(n)
                slots += range(base, base + mt.ftype(n).slots)
            self.field_lists[idx] = slots
        for f in ("egress_spec", "packet_length", "mcast_grp", "priority", "checksum_error", "parser_error"):
            if f not in self.sm:
                raise P4Error(None, f"standard_metadata_t lacks field {f}")
        self.error_codes = prog.errors.members

    # ---- storage --------------------------------------------------------------------------------
    def alloc(self, t: ir.Type, owner: Any) -> int:
        """Slots for a value of type ``t``; ``owner`` names the storage (a root of switch.midend.analysis
        storage keys: "H", "M", "SM", a local's Sym)."""
        base = self.nslots
        self._init(t)
        self.nslots = len(self.init)
        self.owners += [(owner, i) for i in range(self.nslots - base)]
        return base

    def dead(self, a: int) -> bool:
        """Fused mode: nothing reads slot ``a`` (its value need not be computed)."""
        return self.facts is not None and not self.facts.is_read(self.owners[a])

    def _init(self, t: ir.Type) -> None:
        if isinstance(t, ir.HeaderT):
            self.init.append(False)
            for _, ft in t.fields:
                self._init(ft)
        elif isinstance(t, ir.StructT):
            for _, ft in t.fields:
                self._init(ft)
        elif isinstance(t, ir.StackT):
            self.init.append(0)
            for _ in range(t.size):
                self._init(t.elem)
        elif isinstance(t, ir.TupleT):
            for et in t.elems:
                self._init(et)
        elif isinstance(t, ir.BoolT):
            self.init.append(False)
        elif isinstance(t, ir.VarbitT):
            self.init.append((0, 0))      # (current width in bits, value)
        else:
            self.init.append(0)

    def bind(self, sym: Sym, base: int) -> None:
        self.slot_of[sym] = base

    # ---- helpers ----------------------------------------------------------------------------------
    def struct(self, fmt: str) -> str:
        """Name of a module-level ``Struct(fmt)`` in the generated code (``U<name>`` unpacks from a
        buffer at an offset, ``K<name>`` packs)."""
        name = self.structs.get(fmt)
        if name is None:
            name = self.structs[fmt] = f"S{len(self.structs)}"
        return name

    def slot_ref(self, a, write: bool = False) -> str:
        """The storage of slot ``a``: ``s[a]`` in the slot list, or the local ``v_a`` in fused mode
        (which needs every address to be known when generating); ``write``: the code assigns it."""
        if self.fused:
            if not isinstance(a, int):
                raise NotFusable("a slot address computed per packet (header stack)")
            if write:
                self.writes.add(a)
            else:
                self.reads.add(a)
            return f"v_{a}"
        return f"s[{a}]"

    def fresh(self, p: str = "t") -> str:
        self.fresh_count += 1
        return f"{p}{self.fresh_count}"

    def emit(self, ind: int, line: str) -> None:
        self.lines.append("    " * ind + line)

    @staticmethod
    def slot_plus(a, off: int):
        if isinstance(a, int):
            return a + off
        return f"({a} + {off})" if off else a

    def const(self, v, t: ir.Type) -> str:
        if isinstance(t, ir.BoolT):
            return "True" if v else "False"
        return repr(int(v))

    # ---- addresses --------------------------------------------------------------------------------
    def addr(self, e: T.Expr):
        """Slot index (int, or Python expression string) of an addressable expression."""
        if isinstance(e, T.Var):
            sym = e.sym
            slot = self.slot_of.get(sym) if isinstance(sym, Sym) else None
            if slot is None:
                raise P4Error(e.loc, f"'{getattr(sym, 'name', '?')}' has no storage here")
            return slot
        if isinstance(e, T.Member):
            base_t = e.expr.type
            if isinstance(base_t, (ir.HeaderT, ir.StructT)):
                return self.slot_plus(self.addr(e.expr), base_t.offset(e.name))
            if isinstance(base_t, ir.StackT):
                stack_base = self.addr(e.expr)
                if self.fused:
                    raise NotFusable("header stack next/last")
                # P4-16 8.18: next with nextIndex >= size, or last with nextIndex == 0, is the parser
                # error StackOutOfBounds (never a write into the neighbouring header)
                oob = self.error_codes["StackOutOfBounds"]
                step = base_t.elem.slots
                if e.name == "next":
                    return f"({stack_base} + 1 + _stk_next(s[{stack_base}], {base_t.size}, {oob}) * {step})"
                if e.name == "last":
                    return f"({stack_base} + 1 + _stk_last(s[{stack_base}], {oob}) * {step})"
            raise P4Error(e.loc, "expression is not addressable")
        if isinstance(e, T.Index):
            base_t = e.expr.type
            stack_base = self.addr(e.expr)
            if isinstance(e.index, T.Const):
                return self.slot_plus(stack_base, 1 + int(e.index.value) * base_t.elem.slots)
            return f"({stack_base} + 1 + min({self.expr(e.index)}, {base_t.size - 1}) * {base_t.elem.slots})"
        raise P4Error(e.loc, "expression is not addressable")

    # ---- expressions ------------------------------------------------------------------------------
    def wrapped(self, code: str, t: ir.Type) -> str:
        if isinstance(t, Bits):
            if t.signed:
                half = 1 << (t.width - 1)
                return f"((({code}) + {half}) & {t.mask}) - {half}"
            return f"(({code}) & {t.mask})"
        return code

    def as_unsigned(self, code: str, t: ir.Type) -> str:
        """Unsigned view of a value (two's complement bits)."""
        if isinstance(t, Bits) and t.signed:
            return f"(({code}) & {t.mask})"
        if isinstance(t, ir.BoolT):
            return f"int({code})"
        return code

    def expr(self, e: T.Expr) -> str:
        t = e.type
        if isinstance(e, T.Const):
            value = e.value
            if isinstance(value, bool) or isinstance(t, ir.BoolT):
                return "True" if value else "False"
            return self.const(self._wrap_value(value, t) if isinstance(value, int) else value, t)
        if isinstance(e, T.Var):
            sym = e.sym
            if sym.kind == "aparam":
                return self.pnames.get(id(sym), f"p_{sym.name}")
            return self.slot_ref(self.addr(e))
        if isinstance(e, T.Member):
            base_t = e.expr.type
            if isinstance(base_t, ir.HeaderT) and is_lookahead(e.expr):       # lookahead<H>().field
                return self.look_field(f"_look(pkt, off, {base_t.width})", base_t, e.name)
            if isinstance(base_t, ir.StackT):
                stack_base = self.addr(e.expr)
                if e.name == "size":
                    return repr(base_t.size)
                if e.name == "lastIndex":
                    return f"(({self.slot_ref(stack_base)} - 1) & 0xFFFFFFFF)"
            if isinstance(base_t, ir.ApplyResultT):
                inner = self.expr(e.expr)
                if e.name == "hit":
                    return f"{inner}[0]"
                if e.name == "miss":
                    return f"(not {inner}[0])"
                return f"{inner}[1]"
            return self.slot_ref(self.addr(e))
        if isinstance(e, T.Index):
            return self.slot_ref(self.addr(e))
        if isinstance(e, T.Slice):
            mask = (1 << (e.hi - e.lo + 1)) - 1
            return f"(({self.as_unsigned(self.expr(e.expr), e.expr.type)} >> {e.lo}) & {mask})"
        if isinstance(e, T.Unary):
            operand = self.expr(e.expr)
            if e.op == "!":
                return f"(not {operand})"
            if isinstance(t, ir.IntLit):
                return f"({e.op}{operand})"
            if e.op == "-":
                return self.wrapped(f"-{operand}", t)
            return f"({operand} ^ {t.mask})" if not t.signed else f"(~{operand})"
        if isinstance(e, T.Binary):
            return self.binary(e)
        if isinstance(e, T.Ternary):
            cond = self.expr(e.cond)
            self.no_hoist += 1
            try:
                return f"({self.expr(e.then)} if {cond} else {self.expr(e.other)})"
            finally:
                self.no_hoist -= 1
        if isinstance(e, T.Cast):
            return self.cast(e)
        if isinstance(e, T.Call):
            return self.call_expr(e)
        if isinstance(e, T.List):
            raise unsupported("list expression in this position", e.loc)
        raise unsupported(type(e).__name__, e.loc)

    def _wrap_value(self, v: int, t) -> int:
        if isinstance(t, Bits):
            v &= t.mask
            if t.signed and v >> (t.width - 1):
                v -= 1 << t.width
        return v

    def eq_at(self, left, right, t: ir.Type) -> str:
        """Equality of the values of type ``t`` at slots ``left`` and ``right`` (P4-16: two headers are equal
        when both are invalid, or both valid with equal fields; structs and stacks compare member by member)."""
        ref, plus = self.slot_ref, self.slot_plus
        if isinstance(t, ir.HeaderT):
            valid = ref(left)
            fields = " and ".join(f"{ref(plus(left, 1 + i))} == {ref(plus(right, 1 + i))}"
                                  for i in range(len(t.fields))) or "True"
            return f"({valid} == {ref(right)} and (not {valid} or ({fields})))"
        if isinstance(t, ir.StructT):
            parts = [self.eq_at(plus(left, t.offset(n)), plus(right, t.offset(n)), ft) for n, ft in t.fields]
            return "(" + (" and ".join(parts) or "True") + ")"
        if isinstance(t, ir.StackT):
            step = t.elem.slots
            parts = [self.eq_at(plus(left, 1 + i * step), plus(right, 1 + i * step), t.elem) for i in range(t.size)]
            return "(" + " and ".join(parts) + ")"
        return f"({ref(left)} == {ref(right)})"

    def binary(self, e: T.Binary) -> str:
        op, t = e.op, e.type
        if op in ("==", "!=") and isinstance(e.left.type, (ir.HeaderT, ir.StructT, ir.StackT)):
            eq = self.eq_at(self.addr(e.left), self.addr(e.right), e.left.type)
            return eq if op == "==" else f"(not {eq})"
        left = self.expr(e.left)
        if op in ("&&", "||"):
            self.no_hoist += 1
            try:
                right = self.expr(e.right)
            finally:
                self.no_hoist -= 1
        else:
            right = self.expr(e.right)
        if op in ("&&", "||"):
            return f"({left} {'and' if op == '&&' else 'or'} {right})"
        if op in ("==", "!=", "<", ">", "<=", ">="):
            return f"({left} {op} {right})"
        if isinstance(t, ir.IntLit):
            py = {"/": "//", "|+|": "+", "|-|": "-"}.get(op, op)
            return f"({left} {py} {right})"
        if op == "++":
            right_t = e.right.type
            joined = f"({self.as_unsigned(left, e.left.type)} << {right_t.width}) | {self.as_unsigned(right, right_t)}"
            return self.wrapped(joined, t) if t.signed else f"({joined})"
        if op in ("+", "-", "*"):
            return self.wrapped(f"{left} {op} {right}", t)
        if op in ("&", "|", "^"):
            return f"({left} {op} {right})"
        if op in ("/", "%"):
            return f"_div({left}, {right})" if op == "/" else f"_mod({left}, {right})"
        if op in ("|+|", "|-|"):
            lo, hi = ((-(1 << (t.width - 1)), (1 << (t.width - 1)) - 1) if t.signed else (0, t.mask))
            return f"min(max({left} {op[1]} {right}, {lo}), {hi})"
        if op == "<<":
            if isinstance(e.right, T.Const):
                shift = int(e.right.value)
                return "0" if shift >= t.width else self.wrapped(f"{left} << {shift}", t)
            return f"_shl({left}, {right}, {t.width}, {int(t.signed)})"
        if op == ">>":
            if isinstance(e.right, T.Const) and int(e.right.value) >= t.width:
                return f"(-1 if {left} < 0 else 0)" if t.signed else "0"
            return f"({left} >> {right})"
        raise unsupported(f"operator {op}", e.loc)

    def cast(self, e: T.Cast) -> str:
        to, src = e.type, e.expr.type
        operand = self.expr(e.expr)
        if isinstance(to, ir.BoolT):
            return operand if isinstance(src, ir.BoolT) else f"({operand} != 0)"
        if isinstance(src, ir.BoolT):
            return f"int({operand})"
        if isinstance(to, ir.EnumT):
            to = to.underlying
        if isinstance(src, ir.EnumT):
            src = src.underlying
        if isinstance(src, ir.IntLit):
            return self.wrapped(operand, to) if isinstance(to, Bits) else operand
        if isinstance(to, Bits) and isinstance(src, Bits):
            if to == src:
                return operand
            if not src.signed and not to.signed and to.width >= src.width:
                return operand
            return self.wrapped(operand, to)   # sign-extends a signed source, truncates, re-wraps
        return operand

    # ---- data serialisation (lists for hash/checksum/digest/emit) ----------------------------------
    def fields_of(self, e: T.Expr) -> list[tuple[str, int]]:
        """Flatten an expression (list, struct, header or scalar) into (unsigned code, width) items."""
        t = e.type
        if isinstance(e, T.List):
            out = []
            for x in e.items:
                out += self.fields_of(x)
            return out
        if isinstance(t, (ir.HeaderT, ir.StructT)):
            base = self.addr(e)
            return self._fields_at(base, t)
        if isinstance(t, ir.VarbitT):
            code = self.expr(e)
            return [(f"{code}[1]", f"{code}[0]")]
        width = t.width if isinstance(t, (Bits, ir.BoolT, ir.EnumT)) else 32
        return [(self.as_unsigned(self.expr(e), t), width)]

    def _fields_at(self, base, t) -> list[tuple[str, int]]:
        out = []
        for n, ft in t.fields:
            slot = self.slot_plus(base, t.offset(n))
            if isinstance(ft, (ir.HeaderT, ir.StructT)):
                out += self._fields_at(slot, ft)
            elif isinstance(ft, ir.StackT):
                for i in range(ft.size):
                    out += self._fields_at(self.slot_plus(slot, 1 + i * ft.elem.slots), ft.elem)
            elif isinstance(ft, ir.VarbitT):
                out.append((f"{self.slot_ref(slot)}[1]", f"{self.slot_ref(slot)}[0]"))      # dynamic width
            else:
                width = ft.width if isinstance(ft, (Bits, ir.BoolT, ir.EnumT)) else 32
                out.append((self.as_unsigned(self.slot_ref(slot), ft), width))
        return out

    @staticmethod
    def concat(items: list[tuple[str, Any]]) -> tuple[str, Any]:
        """Concatenate (code, width) items, most significant first. A width may be a Python
        expression (varbit fields); the total width is then an expression too."""
        if any(isinstance(w, str) for _, w in items):
            acc = None
            for code, w in items:
                acc = code if acc is None else f"(({acc}) << {w}) | {code}"
            static = sum(w for _, w in items if isinstance(w, int))
            dyn = " + ".join(f"{w}" for _, w in items if isinstance(w, str))
            return f"({acc})", f"({static} + {dyn})"
        total = sum(w for _, w in items)
        parts = []
        shift = total
        for code, w in items:
            shift -= w
            parts.append(f"({code} << {shift})" if shift else code)
        return ("(" + " | ".join(parts) + ")") if parts else "0", total

    # ---- calls ------------------------------------------------------------------------------------
    def call_expr(self, e: T.Call) -> str:
        kind = e.kind
        if kind == "hdr" and e.target == "isValid":
            return self.slot_ref(self.addr(e.recv))
        if kind == "union":
            union_t = e.recv.type
            return "(" + " or ".join(self.slot_ref(v) for _, v in union_t.members_valid(self.addr(e.recv))) + ")"
        if kind == "table":
            if self.fused:
                # applied by statements placed before the statement being generated; only valid
                # when the apply is evaluated unconditionally (not in a short-circuit operand)
                if self.no_hoist or self.cur_ind is None:
                    raise NotFusable("table apply inside a conditionally evaluated operand")
                return self.fused_apply(self.cur_ind, e.target)
            return f"T{e.target.index}(s)"
        if kind == "method":
            ext, m = e.target
            if ext == "packet_in" and m == "lookahead":
                look_t = list(e.tvars.values())[0]
                if isinstance(look_t, ir.HeaderT):
                    raise unsupported("lookahead of a header other than assigned to a header or read "
                                      "by a field", e.loc)
                code = f"_look(pkt, off, {look_t.width})"
                return self.wrapped(code, look_t) if look_t.signed else code
            if ext == "packet_in" and m == "length":
                return "len(pkt)"
        raise unsupported("this call in an expression", e.loc)

    def out_assign(self, ind: int, target: T.Expr, code: str) -> None:
        if isinstance(target, T.DontCare):
            self.emit(ind, code)
            return
        self.assign_scalar(ind, target, self.wrapped(code, target.type) if isinstance(target.type, Bits) else code)

    def call_stmt(self, ind: int, e: T.Call, ctx: dict) -> None:
        kind = e.kind
        if kind == "action":
            action: ir.ActionIR = e.target
            if self.fused:
                self.inline_action(ind, action, [self.expr(x) for x in e.args])
                return
            args = "".join(self.expr(x) + ", " for x in e.args)
            self.emit(ind, f"A{action.index}(s, ({args}))")
            return
        if kind == "table":
            if self.fused:
                self.fused_apply(ind, e.target)
            elif self.simple_table(e.target) or self.counted_table(e.target):   # inline, no call
                self.simple_apply(ind, e.target, self.fresh("k"), self.fresh("r"))
            else:
                self.emit(ind, f"T{e.target.index}(s)")
            return
        if kind == "hdr":
            action = self.addr(e.recv)
            if e.target == "setValid":
                self.emit(ind, f"{self.slot_ref(action, True)} = True")
                self.union_others_invalid(ind, e.recv)
            elif e.target == "setInvalid":
                self.emit(ind, f"{self.slot_ref(action, True)} = False")
            return
        if kind == "stack":
            self.stack_shift(ind, e.recv, *e.target)
            return
        if kind == "efunc":
            self.extern_function(ind, e, ctx)
            return
        if kind == "method":
            self.method(ind, e, ctx)
            return
        raise unsupported("call", e.loc)

    def v1_request(self, ind: int, e: T.Call, name: str, args: tuple) -> None:
        """clone/resubmit/recirculate/truncate record a request in the packet's hidden v1model slots; the
        target acts on it at the end of ingress or egress, as BMv2 simple_switch does."""
        if self.fused:
            raise NotFusable(f"{name}()")
        self.uses_v1 = True
        slots = self.v1

        def field_list(x) -> str:
            if isinstance(x, T.List) and not x.items:
                return str(NO_FIELD_LIST)
            if isinstance(x, T.List) or isinstance(x.type, (ir.StructT, ir.TupleT)):
                raise unsupported(f"{name} with a data argument (use the _preserving_field_list form)", x.loc)
            return f"({self.expr(x)} + 1)"

        if name == "truncate":
            self.emit(ind, f"{self.slot_ref(slots['truncate'], True)} = {self.expr(args[0])}")
        elif name in ("resubmit", "resubmit_preserving_field_list"):
            self.emit(ind, f"{self.slot_ref(slots['resubmit'], True)} = {field_list(args[0])}")
        elif name in ("recirculate", "recirculate_preserving_field_list"):
            self.emit(ind, f"{self.slot_ref(slots['recirculate'], True)} = {field_list(args[0])}")
        else:    # clone, clone3, clone_preserving_field_list: CloneType I2E = 0, E2E = 1
            fl = str(NO_FIELD_LIST) if name == "clone" else field_list(args[2])
            t = self.fresh("ct")
            self.emit(ind, f"{t} = {self.expr(args[0])}")
            self.emit(ind, f"if {t} == 0:")
            self.emit(ind + 1, f"{self.slot_ref(slots['clone_i2e'], True)} = {self.expr(args[1])} + 1")
            self.emit(ind + 1, f"{self.slot_ref(slots['clone_i2e_fl'], True)} = {fl}")
            self.emit(ind, "else:")
            self.emit(ind + 1, f"{self.slot_ref(slots['clone_e2e'], True)} = {self.expr(args[1])} + 1")
            self.emit(ind + 1, f"{self.slot_ref(slots['clone_e2e_fl'], True)} = {fl}")

    def stack_shift(self, ind: int, target: T.Expr, op: str, k: int) -> None:
        """P4-16 8.18 ``push_front(k)``: element i takes element i - k, the first k become invalid, nextIndex
        grows by k (at most size); ``pop_front(k)``: element i takes element i + k, the last k become invalid,
        nextIndex shrinks by k (at least 0)."""
        if self.fused:
            raise NotFusable(f"header stack {op}")
        stack_t: ir.StackT = target.type
        stack_base = self.addr(target)
        elem_slots = stack_t.elem.slots

        def element_at(i: int):
            return self.slot_plus(stack_base, 1 + i * elem_slots)

        def copy_element(dst: int, src: int) -> None:
            dst_at, src_at = element_at(dst), element_at(src)
            self.emit(ind, f"s[{dst_at}:{self.slot_plus(dst_at, elem_slots)}] = "
                           f"s[{src_at}:{self.slot_plus(src_at, elem_slots)}]")

        size = stack_t.size
        if k == 0:
            return
        if op == "push_front":
            for i in range(size - 1, k - 1, -1):
                copy_element(i, i - k)
            for i in range(min(k, size)):
                self.emit(ind, f"{self.slot_ref(element_at(i), True)} = False")
            self.emit(ind, f"{self.slot_ref(stack_base, True)} = min({self.slot_ref(stack_base)} + {k}, {size})")
        else:
            for i in range(0, size - k):
                copy_element(i, i + k)
            for i in range(max(size - k, 0), size):
                self.emit(ind, f"{self.slot_ref(element_at(i), True)} = False")
            self.emit(ind, f"{self.slot_ref(stack_base, True)} = max({self.slot_ref(stack_base)} - {k}, 0)")

    def hash_call(self, algorithm: str, e: T.Expr, site: Loc) -> str:
        """Hash of a field list; csum16 works on the concatenated integer directly."""
        if algorithm == "csum16":
            code, w = self.concat(self.fields_of(e))
            return f"H_csum16_bits({code}, {w})"
        return f"{self.hash_fn(algorithm, site)}({self.data_bytes(e)})"

    def hash_fn(self, algorithm: str, site: Loc) -> str:
        """The name the generated code calls for hash ``algorithm`` at the call ``site``: ``H_<algorithm>``, or for
        crc16_custom / crc32_custom the site's own calculation ``HC<i>`` (each call site has its own parameters,
        as each calculation in BMv2's JSON has; :attr:`custom_crcs` lists them and the switch binds them)."""
        if not algorithm.endswith("_custom"):
            return f"H_{algorithm}"
        key = (site.file, site.line, site.col)
        index = self._custom_index.get(key)
        if index is None:
            index = self._custom_index[key] = len(self.custom_crcs)
            self.custom_crcs.append((site, 16 if algorithm == "crc16_custom" else 32))
        return f"HC{index}"

    def data_bytes(self, e: T.Expr) -> str:
        code, w = self.concat(self.fields_of(e))
        return f"_ser({code}, {w})"

    def hash_algorithm(self, e: T.Expr) -> str:
        if not (isinstance(e, T.Const) and e.member and isinstance(e.type, ir.EnumT)
                and e.type.name == "HashAlgorithm"):
            raise P4Error(e.loc, "hash algorithm must be a HashAlgorithm constant")
        if e.member == "random":
            return "random"
        if e.member not in ("crc16", "crc32", "csum16", "identity", "xor16", "crc16_custom", "crc32_custom"):
            raise unsupported(f"HashAlgorithm.{e.member}", e.loc)
        return e.member

    def extern_function(self, ind: int, e: T.Call, ctx: dict) -> None:
        name = e.target
        args = e.args
        if name == "mark_to_drop":
            self.emit(ind, f"{self.slot_ref(self.sm['egress_spec'], True)} = 511")
            self.emit(ind, f"{self.slot_ref(self.sm['mcast_grp'], True)} = 0")
        elif name == "verify":
            if ctx.get("kind") != "parser":
                raise P4Error(e.loc, "verify() can only be called in a parser")
            self.emit(ind, f"if not {self.expr(args[0])}: raise _PErr({self.expr(args[1])})")
        elif name == "hash":
            algorithm = self.hash_algorithm(args[1])
            if algorithm == "random":
                hash_code = "RNG.getrandbits(32)"
            else:
                hash_code = self.hash_call(algorithm, args[3], e.loc)
            base, limit = self.expr(args[2]), self.expr(args[4])
            hashed = self.fresh("h")
            self.emit(ind, f"{hashed} = {hash_code}")
            self.out_assign(ind, args[0], f"({base} + ({hashed} % {limit} if {limit} else {hashed}))")
        elif name == "random":
            self.out_assign(ind, args[0], f"RNG.randint({self.expr(args[1])}, {self.expr(args[2])})")
        elif name == "digest":
            items = self.fields_of(args[1])
            vals = ", ".join(c for c, _ in items)
            self.emit(ind, f"DIGESTS.append(({e.digest.index}, ({vals},)))")
        elif name in ("verify_checksum", "update_checksum", "verify_checksum_with_payload",
                      "update_checksum_with_payload"):
            algorithm = self.hash_algorithm(args[3])
            cond = self.expr(args[0])
            raw = self.raw_csum16(args[1]) if algorithm == "csum16" and not name.endswith("with_payload") else None
            items = self.fields_of(args[1]) if raw is None else []
            if raw is not None or self.fast and algorithm == "csum16" and not name.endswith("with_payload") and \
                    all(isinstance(w, int) for _, w in items):
                # RFC 1071 checksum folded over small integers (layout.csum16_terms), no call
                self.emit(ind, f"if {cond}:")
                total, rem = self.fresh("ct"), self.fresh("cr")
                self.emit(ind + 1, f"{total} = {raw or ' + '.join(layout.csum16_terms(items)) or '0'}")
                self.emit(ind + 1, f"{rem} = {total} % 65535")
                checksum = f"((65535 - {rem}) if {rem} else (0 if {total} else 65535))"
                if name.startswith("verify"):
                    self.emit(ind + 1, f"if {checksum} != {self.as_unsigned(self.expr(args[2]), args[2].type)}:")
                    self.emit(ind + 2, f"{self.slot_ref(self.sm['checksum_error'], True)} = 1")
                else:
                    self.out_assign(ind + 1, args[2], checksum)
                return
            if name.endswith("with_payload"):
                checksum = f"{self.hash_fn(algorithm, e.loc)}({self.data_bytes(args[1])} + ENV.payload)"
            else:
                checksum = self.hash_call(algorithm, args[1], e.loc)
            if name.startswith("verify"):
                self.emit(ind, f"if {cond} and {checksum} != {self.as_unsigned(self.expr(args[2]), args[2].type)}:")
                self.emit(ind + 1, f"{self.slot_ref(self.sm['checksum_error'], True)} = 1")
            else:
                self.emit(ind, f"if {cond}:")
                self.out_assign(ind + 1, args[2], checksum)
        elif name in V1_EXTERNS:
            self.v1_request(ind, e, name, args)
        elif name == "log_msg":
            # BMv2 writes log_msg to its log; here the "switch.p4" logger at INFO, "{}" replaced in order
            vals = []
            if not (isinstance(args[0], T.Const) and isinstance(args[0].value, str)):
                raise unsupported("log_msg with a format other than a string literal", args[0].loc)
            if len(args) > 1:
                items = args[1].items if isinstance(args[1], T.List) else [args[1]]
                for it in items:
                    if not ir.is_scalar(it.type):
                        raise unsupported(f"log_msg of a {it.type} value", it.loc)
                    vals.append(self.as_unsigned(self.expr(it), it.type))
            self.emit(ind, f"_log_msg({args[0].value!r}, ({''.join(v + ', ' for v in vals)}))")
        elif name in ("assert", "assume"):
            pass
        else:
            raise unsupported(f"{name}()", e.loc)

    def method(self, ind: int, e: T.Call, ctx: dict) -> None:
        ext, m = e.target
        args = e.args
        if ext == "packet_in":
            if ctx.get("kind") != "parser":
                raise P4Error(e.loc, f"{m}() can only be called in a parser")
            if m == "extract":
                self.extract(ind, args[0], args[1] if len(args) > 1 else None)
                self.union_others_invalid(ind, args[0])
            elif m == "advance":
                self.emit(ind, f"off = _adv(pkt, off, {self.expr(args[0])})")
            elif m == "lookahead":
                self.emit(ind, self.call_expr(e))
            return
        if ext == "packet_out":
            if m == "emit":
                self.emit_data(ind, args[0])
            return
        inst: ir.InstanceIR = e.instance
        obj = f"X{inst.index}"
        plen = self.slot_ref(self.sm['packet_length'])
        if ext == "counter" and m == "count" and not self.fast:
            self.emit(ind, f"{obj}.count({self.expr(args[0])}, {plen})")
        elif ext == "register" and m == "read" and not self.fast:
            self.out_assign(ind, args[0], f"{obj}.read({self.expr(args[1])})")
        elif ext == "register" and m == "write" and not self.fast:
            self.emit(ind, f"{obj}.write({self.expr(args[0])}, {self.expr(args[1])})")
        elif ext == "counter" and m == "count":
            # inline runtime.Counter.count: XP/XB are the counter's packet and byte lists
            index, in_range = self.index_check(ind, args[0], inst.args[0])
            if in_range != "False":
                if in_range is not None:
                    self.emit(ind, f"if {in_range}:")
                inner = ind + (in_range is not None)
                self.emit(inner, f"XP{inst.index}[{index}] += 1")
                self.emit(inner, f"XB{inst.index}[{index}] += {plen}")
        elif ext == "direct_counter":
            pass   # counted by the table on every hit, as BMv2 does
        elif ext == "meter" and m == "execute_meter":
            self.out_assign(ind, args[1], f"{obj}.execute({self.expr(args[0])}, {plen}, ENV.now_ns)")
        elif ext == "direct_meter" and m == "read":
            self.out_assign(ind, args[0], f"{obj}.read({plen}, ENV.now_ns)")
        elif ext == "register" and m == "read":
            # inline runtime.Register.read/write: XV is the register's value list
            index, in_range = self.index_check(ind, args[1], inst.args[0])
            val = "0" if in_range == "False" else f"XV{inst.index}[{index}]" if in_range is None else \
                f"(XV{inst.index}[{index}] if {in_range} else 0)"
            self.out_assign(ind, args[0], val)
        elif ext == "register" and m == "write":
            index, in_range = self.index_check(ind, args[0], inst.args[0])
            v = self.fresh("v")
            self.emit(ind, f"{v} = {self.expr(args[1])}")
            if in_range != "False":
                self.emit(ind, f"{'' if in_range is None else f'if {in_range}: '}XV{inst.index}[{index}] = {v}")
        else:
            raise unsupported(f"{ext}.{m}", e.loc)

    def raw_csum16(self, e: T.Expr) -> str | None:
        """Fused mode: a csum16 sum for field list ``e`` read from the received bytes, when ``e`` is
        fields of one header, in order, that nothing but extract has written so far (so its bytes
        are still the ones it was extracted from), leaving out only fields that are whole 16-bit
        words at 16-bit positions (the checksum field itself, typically): the analysis decides
        (:attr:`switch.midend.analysis.StorageFacts.raw_csum`).  The sum of the header's 16-bit words minus
        the left-out words is the sum of the list's words: congruent to the list modulo 0xFFFF, and
        zero exactly when the list is (see layout.csum16_terms).  An invalid header here was never
        extracted nor written: its fields are all 0, and so is the sum."""
        omitted_idx = self.facts.raw_csum.get(e) if self.fused and self.facts is not None else None
        if omitted_idx is None:
            return None
        header_t = e.items[0].expr.type
        base = self.addr(e.items[0].expr)
        if base not in self.off_slot:
            return None
        omitted = [(i, header_t.fields[i][1]) for i in omitted_idx]
        code = f"(sum(U{self.struct(f'!{header_t.fixed_width // 16}H')}(pkt, {self.slot_ref(self.off_slot[base])})) " \
               f"if {self.slot_ref(base)} else 0)"
        for i, ft in omitted:
            field = self.as_unsigned(self.slot_ref(base + 1 + i), ft)
            for k in range(ft.width // 16):
                code += f" - {field}" if ft.width == 16 else f" - (({field} >> {16 * k}) & 65535)"
        return code

    def index_check(self, ind: int, e: T.Expr, size: int) -> tuple[str, str | None]:
        """An extern index for the fast path: (code, bounds test), the test None for a literal in
        range, "False" for a literal out of range, and without ``0 <=`` for an unsigned type."""
        code = self.expr(e)
        if _INT_LITERAL.fullmatch(code):
            return code, (None if 0 <= int(code) < size else "False")
        if self.fused and code.isidentifier():
            index = code                      # a local: read as it is
        else:
            index = self.fresh("i")
            self.emit(ind, f"{index} = {code}")
        index_t = e.type
        if isinstance(index_t, ir.EnumT):
            index_t = index_t.underlying
        if isinstance(index_t, Bits) and not index_t.signed:
            return index, f"{index} < {size}"
        return index, f"0 <= {index} < {size}"

    # ---- parser and deparser primitives --------------------------------------------------------------
    def extract(self, ind: int, target: T.Expr, size: T.Expr | None = None) -> None:
        t: ir.HeaderT = target.type
        nbytes = t.fixed_width // 8
        push = None
        if isinstance(target, T.Member) and target.name == "next" and isinstance(target.expr.type, ir.StackT):
            stack_t = target.expr.type
            stack_base = self.addr(target.expr)
            if self.fused:
                raise NotFusable("extract into a header stack")
            self.emit(ind, f"if s[{stack_base}] >= {stack_t.size}: raise _PErr({self.error_codes['StackOutOfBounds']})")
            base = self.fresh("b")
            self.emit(ind, f"{base} = {stack_base} + 1 + s[{stack_base}] * {stack_t.elem.slots}")
            push = stack_base
        else:
            base = self.addr(target)
        varbit_i = t.varbit
        plan = layout.struct_plan([ft.width for _, ft in t.fields]) if varbit_i is None and self.fast else None
        if varbit_i is None:
            if not (plan is not None and self.fused):
                # (fused: unpack_from itself raises struct.error, the parser's PacketTooShort)
                self.emit(ind, f"e = off + {nbytes}")
                self.emit(ind, f"if e > n: raise _PErr({self.error_codes['PacketTooShort']})")
        else:
            # BMv2 extract_VL order: size not a multiple of 8 -> ParserInvalidArgument; not enough
            # bytes -> PacketTooShort; more than the header's maximum -> HeaderTooShort
            size_bits = self.fresh("vb")
            self.emit(ind, f"{size_bits} = {self.expr(size)}")
            self.emit(ind, f"if {size_bits} & 7: raise _PErr({self.error_codes['ParserInvalidArgument']})")
            self.emit(ind, f"e = off + {nbytes} + ({size_bits} >> 3)")
            self.emit(ind, f"if e > n: raise _PErr({self.error_codes['PacketTooShort']})")
            too_long = self.error_codes['HeaderTooShort']
            self.emit(ind, f"if {size_bits} > {t.fields[varbit_i][1].max_width}: raise _PErr({too_long})")
        if plan is not None:
            # one struct.unpack_from for the whole header; fields from small integers (in fused mode a
            # field that is exactly one unpacked part, unsigned, is unpacked straight into its local)
            names = [f"_c{j}" for j in range(len(plan.parts))]
            skip = set()
            if self.fused:
                if base not in self.off_slot:       # where the header was extracted, for the deparser
                    self.off_slot[base] = self.nslots
                    self.init.append(0)
                    self.owners.append(("off",) + self.owners[base])
                    self.nslots += 1
                if not self.dead(self.off_slot[base]):
                    self.emit(ind, f"{self.slot_ref(self.off_slot[base], True)} = off")
                used_parts = set()
                for i, (fname, ft) in enumerate(t.fields):
                    if self.dead(self.slot_plus(base, 1 + i)):
                        skip.add(i)
                    elif isinstance(ft, Bits) and not ft.signed and plan.fields[i] in plan.parts:
                        j = plan.parts.index(plan.fields[i])
                        names[j] = self.slot_ref(self.slot_plus(base, 1 + i), True)
                        skip.add(i)
                        used_parts.add(j)
                for i in set(range(len(t.fields))) - skip:
                    fs, fe = plan.fields[i]
                    used_parts.update(j for j, (ps, pe) in enumerate(plan.parts) if ps < fe and fs < pe)
                names = [x if j in used_parts else "_" for j, x in enumerate(names)]
            self.emit(ind, f"{', '.join(names)}{',' if len(names) == 1 else ''} = U{self.struct(plan.fmt)}(pkt, off)")
            if not self.dead(base):
                self.emit(ind, f"{self.slot_ref(base, True)} = True")
            if push is not None:
                self.emit(ind, f"s[{push}] += 1")
            for i, (fname, ft) in enumerate(t.fields):
                if i in skip:
                    continue
                code = layout.unpack_field(plan, i, names)
                if isinstance(ft, ir.BoolT):
                    code = f"({code} != 0)"
                elif isinstance(ft, Bits) and ft.signed:
                    code = self.wrapped(code, ft)
                self.emit(ind, f"{self.slot_ref(self.slot_plus(base, 1 + i), True)} = {code}")
            self.emit(ind, f"off += {nbytes}" if self.fused else "off = e")
            return
        self.emit(ind, "v = int.from_bytes(pkt[off:e], 'big')")
        self.emit(ind, f"{self.slot_ref(base, True)} = True")
        if push is not None:
            self.emit(ind, f"s[{push}] += 1")
        after = sum(ft.width for ft in (x[1] for x in t.fields[varbit_i + 1:])) if varbit_i is not None else 0
        shift = t.fixed_width
        for i, (fname, ft) in enumerate(t.fields):
            if isinstance(ft, ir.VarbitT):
                code = f"(v >> {after})" if after else "v"
                field = self.slot_ref(self.slot_plus(base, 1 + i), True)
                self.emit(ind, f"{field} = ({size_bits}, {code} & ((1 << {size_bits}) - 1))")
                continue
            w = ft.width
            shift -= w
            if varbit_i is not None and i < varbit_i:
                code = f"(v >> ({shift} + {size_bits}))"
                code = f"({code} & {(1 << w) - 1})" if i > 0 else code
            else:
                code = f"(v >> {shift})" if shift else "v"
                code = f"({code} & {(1 << w) - 1})" if shift + w < t.fixed_width or varbit_i is not None else code
            if isinstance(ft, ir.BoolT):
                code = f"({code} != 0)"
            elif isinstance(ft, Bits) and ft.signed:
                code = self.wrapped(code, ft)
            self.emit(ind, f"{self.slot_ref(self.slot_plus(base, 1 + i), True)} = {code}")
        self.emit(ind, "off = e")

    def emit_data(self, ind: int, e: T.Expr) -> None:
        """``packet_out.emit(e)``: the headers of ``e`` (a header, or a struct or stack of them) that are valid."""
        self._emit_at(ind, self.addr(e), e.type)

    def _emit_at(self, ind: int, base, t) -> None:
        if isinstance(t, ir.HeaderT):
            if self.fused and base in self.off_slot and self.owners[base] in self.facts.pristine:
                # only ever set by extract: emit the bytes it was extracted from (fused mode emits
                # last, after every write is known)
                offset = self.slot_ref(self.off_slot[base])
                self.emit(ind, f"if {self.slot_ref(base)}: out.append(pkt[{offset}:{offset} + {t.fixed_width // 8}])")
                return
            items = self._fields_at(base, t)
            plan = layout.struct_plan([ft.width for _, ft in t.fields]) if t.varbit is None and self.fast else None
            if plan is not None:
                codes = [c for c, _ in items]
                args = ", ".join(layout.pack_part(plan, j, codes) for j in range(len(plan.parts)))
                self.emit(ind, f"if {self.slot_ref(base)}: out.append(K{self.struct(plan.fmt)}({args}))")
                return
            code, w = self.concat(items)
            nbytes = w // 8 if isinstance(w, int) else f"{w} >> 3"
            self.emit(ind, f"if {self.slot_ref(base)}: out.append({code}.to_bytes({nbytes}, 'big'))")
        elif isinstance(t, ir.StructT):
            for n, ft in t.fields:
                self._emit_at(ind, self.slot_plus(base, t.offset(n)), ft)
        elif isinstance(t, ir.StackT):
            for i in range(t.size):
                self._emit_at(ind, self.slot_plus(base, 1 + i * t.elem.slots), t.elem)
        else:
            raise P4Error(None, f"cannot emit {t}")

    # ---- statements ---------------------------------------------------------------------------------
    def assign_scalar(self, ind: int, lhs: T.Expr, code: str) -> None:
        if isinstance(lhs, T.Slice):
            slot = self.addr(lhs.expr)
            base_t = lhs.expr.type
            mask = (1 << (lhs.hi - lhs.lo + 1)) - 1
            keep = base_t.mask ^ (mask << lhs.lo)
            new = f"({self.slot_ref(slot)} & {keep}) | ((({code}) & {mask}) << {lhs.lo})" if not base_t.signed else \
                f"(({self.slot_ref(slot)} & {base_t.mask}) & {keep}) | ((({code}) & {mask}) << {lhs.lo})"
            self.emit(ind, f"{self.slot_ref(slot, True)} = {self.wrapped(new, base_t) if base_t.signed else new}")
            return
        self.emit(ind, f"{self.slot_ref(self.addr(lhs), True)} = {code}")

    def assign(self, ind: int, lhs: T.Expr, rhs: T.Expr) -> None:
        t = lhs.type
        if isinstance(t, (ir.HeaderT, ir.StructT, ir.StackT)):
            self.assign_at(ind, self.addr(lhs), t, rhs)
            if isinstance(t, ir.HeaderT):
                self.union_others_invalid(ind, lhs, only_if_valid=True)
            return
        self.assign_scalar(ind, lhs, self.expr(rhs))

    def union_others_invalid(self, ind: int, target: T.Expr, only_if_valid: bool = False) -> None:
        """After header ``target`` became valid: if it is a member of a header_union, the union's other members
        become invalid (P4-16 8.20).  ``only_if_valid``: the header may have stayed invalid (an assignment
        from an invalid header), so test it first."""
        if not (isinstance(target, T.Member) and isinstance(target.expr.type, ir.HeaderUnionT)):
            return
        union_t = target.expr.type
        if self.fused:
            raise NotFusable("header union")
        others = [v for n, v in union_t.members_valid(self.addr(target.expr)) if n != target.name]
        if not others:
            return
        if only_if_valid:
            self.emit(ind, f"if {self.slot_ref(self.addr(target))}:")
            ind += 1
        for v in others:
            self.emit(ind, f"{self.slot_ref(v, True)} = False")

    def look_field(self, v: str, t: ir.HeaderT, fname: str) -> str:
        """Field ``fname`` of header type ``t`` out of ``v``, the header's bits as one integer."""
        pos = t.width
        for n, ft in t.fields:
            pos -= ft.width
            if n == fname:
                code = f"(({v} >> {pos}) & {(1 << ft.width) - 1})"
                if isinstance(ft, ir.BoolT):
                    return f"bool{code}"
                return self.wrapped(code, ft) if isinstance(ft, Bits) and ft.signed else code
        raise KeyError(fname)

    def assign_at(self, ind: int, left, t: ir.Type, rhs: T.Expr) -> None:
        """Assign ``rhs`` to the header, struct or stack of type ``t`` at slot ``left``: a list/structure
        expression (nested ones included) member by member, any other value slot by slot."""
        if isinstance(rhs, T.List):
            if isinstance(t, ir.HeaderT):
                self.emit(ind, f"{self.slot_ref(left, True)} = True")
            if not isinstance(t, (ir.HeaderT, ir.StructT)):
                raise unsupported(f"a list expression assigned to {t}", rhs.loc)
            for (n, ft), item in zip(t.fields, rhs.items):
                field_at = self.slot_plus(left, t.offset(n))
                if isinstance(ft, (ir.HeaderT, ir.StructT, ir.StackT)):
                    self.assign_at(ind, field_at, ft, item)
                else:
                    self.emit(ind, f"{self.slot_ref(field_at, True)} = {self.expr(item)}")
            return
        if not isinstance(t, (ir.HeaderT, ir.StructT, ir.StackT)):
            self.emit(ind, f"{self.slot_ref(left, True)} = {self.expr(rhs)}")
            return
        if isinstance(t, ir.HeaderT) and is_lookahead(rhs):
            # P4-16 12.8.3: lookahead<H>() gives a valid H made of the next bits, without advancing
            look = self.fresh("la")
            self.emit(ind, f"{look} = _look(pkt, off, {t.width})")
            self.emit(ind, f"{self.slot_ref(left, True)} = True")
            for i, (n, ft) in enumerate(t.fields):
                self.emit(ind, f"{self.slot_ref(self.slot_plus(left, 1 + i), True)} = {self.look_field(look, t, n)}")
            return
        right = self.addr(rhs)
        if self.fused:
            if not (isinstance(left, int) and isinstance(right, int)):
                raise NotFusable("a slot address computed per packet (header stack)")
            lhs_s = ", ".join(self.slot_ref(left + i, True) for i in range(t.slots))
            rhs_s = ", ".join(self.slot_ref(right + i) for i in range(t.slots))
            self.emit(ind, f"{lhs_s}, = {rhs_s},")
            return
        self.emit(ind, f"s[{left}:{self.slot_plus(left, t.slots)}] = s[{right}:{self.slot_plus(right, t.slots)}]")

    def hoisting(self, ind: int, fn):
        """Evaluate ``fn()`` (which generates an expression) allowing table applies in it to be
        placed, as statements at ``ind``, before the statement that uses the expression."""
        self.cur_ind = ind
        try:
            return fn()
        finally:
            self.cur_ind = None

    def stmt(self, ind: int, s: T.Stmt, ctx: dict) -> None:
        if isinstance(s, T.Block):
            n0 = len(self.lines)
            for j, x in enumerate(s.stmts):
                if self.fused and isinstance(x, T.VarDecl) and x.init is None and set_before_use(s.stmts[j + 1:], x.sym):
                    self.slot_of[x.sym] = self.alloc(x.sym.type, x.sym)   # no initial value: set before any use
                    continue
                self.stmt(ind, x, ctx)
            if len(self.lines) == n0:
                self.emit(ind, "pass")
        elif isinstance(s, T.Assign):
            if isinstance(s.lhs.type, (ir.HeaderT, ir.StructT, ir.StackT)):
                self.assign(ind, s.lhs, s.rhs)
            else:
                self.hoisting(ind, lambda: self.assign(ind, s.lhs, s.rhs))
        elif isinstance(s, T.CallStmt):
            self.call_stmt(ind, s.call, ctx)
        elif isinstance(s, T.If):
            cond = self.hoisting(ind, lambda: self.expr(s.cond))
            self.emit(ind, f"if {cond}:")
            self.stmt(ind + 1, s.then, ctx)
            if s.other is not None:
                self.emit(ind, "else:")
                self.stmt(ind + 1, s.other, ctx)
        elif isinstance(s, T.Switch):
            r = self.fresh("r")
            res = self.hoisting(ind, lambda: self.expr(s.expr))
            # on a value: the value itself; on action_run: the table apply's result, whose [1] is the action
            self.emit(ind, f"{r} = {res}" if s.on_value else f"{r} = {res}[1]")
            first = True
            pending: list[str] = []
            default_body = None
            for c in s.cases:
                if c.default:
                    default_body = c.body
                    continue
                pending += [repr(v) for v in c.values]
                if c.body is None:
                    continue
                cond = f"{r} in ({', '.join(pending)},)"
                self.emit(ind, f"{'if' if first else 'elif'} {cond}:")
                self.stmt(ind + 1, c.body, ctx)
                first = False
                pending = []
            if default_body is not None:
                if first:
                    self.stmt(ind, default_body, ctx)
                else:
                    self.emit(ind, "else:")
                    self.stmt(ind + 1, default_body, ctx)
        elif isinstance(s, T.VarDecl):
            sym = s.sym
            self.slot_of[sym] = self.alloc(sym.type, sym)
            self.init_local(ind, s)
        elif isinstance(s, T.For):
            # P4-16 1.2.4: init; while cond: body; update.  The body runs in a one-pass inner loop so that
            # P4's continue (a Python break out of it) still runs the update; P4's break sets a flag.
            if self.fused:
                raise NotFusable("for loop")
            for x in s.init:
                self.stmt(ind, x, ctx)
            brk = self.fresh("brk")
            self.emit(ind, f"{brk} = False")
            self.emit(ind, "while True:")
            if s.cond is not None:
                cond = self.hoisting(ind + 1, lambda: self.expr(s.cond))
                self.emit(ind + 1, f"if not {cond}: break")
            self.emit(ind + 1, "for _once in (0,):")
            self.loops.append(brk)
            try:
                self.stmt(ind + 2, s.body, ctx)
            finally:
                self.loops.pop()
            self.emit(ind + 1, f"if {brk}: break")
            for x in s.update:
                self.stmt(ind + 1, x, ctx)
        elif isinstance(s, T.Break):
            self.emit(ind, f"{self.loops[-1]} = True")
            self.emit(ind, "break")
        elif isinstance(s, T.Continue):
            self.emit(ind, "break")
        elif isinstance(s, T.Exit):
            self.emit(ind, "raise _Exit")
        elif isinstance(s, T.Return):
            # fused: every body holding a return is wrapped in a one-pass loop (see run_body)
            self.emit(ind, "break" if self.fused else "return")
        elif isinstance(s, T.Empty):
            self.emit(ind, "pass")
        else:
            raise unsupported(type(s).__name__, s.loc)

    def init_local(self, ind: int, d: T.VarDecl) -> None:
        """Give the local variable of ``d`` (its slot already allocated) its initial value."""
        if d.init is not None:
            self.assign(ind, T.Var(loc=d.loc, type=d.sym.type, sym=d.sym), d.init)
        else:
            self._reset(ind, self.slot_of[d.sym], d.sym.type)

    def _reset(self, ind: int, base: int, t: ir.Type) -> None:
        vals = self.init[base:base + t.slots]
        if self.fused:
            for i, v in enumerate(vals):
                self.emit(ind, f"{self.slot_ref(base + i, True)} = {v!r}")
            return
        if len(vals) == 1:
            self.emit(ind, f"s[{base}] = {vals[0]!r}")
        else:
            self.emit(ind, f"s[{base}:{base + t.slots}] = {vals!r}")

    # ---- blocks -------------------------------------------------------------------------------------
    def gen_action(self, a: ir.ActionIR) -> None:
        """``A<i>(s, args)``: the action data come as one tuple (a table's cached result holds it),
        so applying a table is a plain call, not a ``*args`` call."""
        self.emit(0, f"def A{a.index}(s, args):")
        params = [f"p_{p.name}" for p in a.in_params + a.params]
        if params:
            self.emit(1, f"{''.join(x + ', ' for x in params)}= args")
        self.stmt(1, a.body, {"kind": "action"})
        self.emit(0, "")

    def gen_table(self, t: ir.TableIR) -> None:
        self.emit(0, f"def T{t.index}(s):")
        if self.simple_table(t) or self.counted_table(t):
            self.simple_apply(1, t, "k", "r")
            self.emit(1, "return r")
            self.emit(0, "")
            return
        keys = [self.as_unsigned(self.expr(k.expr), k.expr.type) for k in t.keys]
        key, sel = self.lookup_args(keys, t)
        self.emit(1, f"r = TBL{t.index}.lookup({key}, s[{self.sm['packet_length']}], {sel})")
        self.emit(1, "ACTIONS[r[1]](s, r[2])")
        self.emit(1, "return r")
        self.emit(0, "")

    def lookup_args(self, keys: list[str], t: ir.TableIR) -> tuple[str, str]:
        """The key tuple (from the key fields' unsigned ``keys``) and the selector bytes (``None`` without an
        action selector) that ``Table.lookup`` takes for table ``t``."""
        sel = "None"
        if t.selector_keys:
            code, w = self.concat([(self.as_unsigned(self.expr(k.expr), k.expr.type), k.width)
                                   for k in t.selector_keys])
            sel = f"_ser({code}, {w})"
        return "(" + "".join(k + ", " for k in keys) + ")", sel

    def simple_table(self, t: ir.TableIR) -> bool:
        """No action profile, direct counter or direct meter: a hit only selects an action."""
        return self.fast and t.implementation is None and t.direct_counter is None and t.direct_meter is None

    def counted_table(self, t: ir.TableIR) -> bool:
        """A direct counter and nothing else: the fast path caches (entry, result) and counts inline."""
        return self.fast and t.implementation is None and t.direct_counter is not None and t.direct_meter is None

    def simple_apply(self, ind: int, t: ir.TableIR, k: str, r: str) -> None:
        """Apply a simple (or counted) table: TCACHE{i} (the table's cache dict) maps a key to the
        result tuple (hit, action index, args, action function) -- for a counted table to (entry or
        None, result) -- and a one-field key is cached bare (Table.fill, Table.fill_counted)."""
        keys = [self.as_unsigned(self.expr(x.expr), x.expr.type) for x in t.keys]
        self.emit(ind, f"{k} = {keys[0] if len(keys) == 1 else '(' + ''.join(x + ', ' for x in keys) + ')'}")
        self.cached_lookup(ind, t, k, r, self.slot_ref(self.sm['packet_length']))
        self.emit(ind, f"{r}[3](s, {r}[2])")

    def cached_lookup(self, ind: int, t: ir.TableIR, k: str, r: str, plen: str) -> None:
        """``r`` = the cached result of a simple or counted table for key ``k`` (filled on a miss); a counted
        table's entry is counted here, ``plen`` bytes."""
        if self.counted_table(t):
            c, e = self.fresh("c"), self.fresh("e")
            self.emit(ind, f"{c} = TCACHE{t.index}.get({k})")
            self.emit(ind, f"if {c} is None: {c} = TBL{t.index}.fill_counted({k})")
            self.emit(ind, f"{e} = {c}[0]")
            self.emit(ind, f"if {e} is not None:")
            self.emit(ind + 1, f"{e}.packets += 1")
            self.emit(ind + 1, f"{e}.bytes += {plen}")
            self.emit(ind, f"{r} = {c}[1]")
        else:
            self.emit(ind, f"{r} = TCACHE{t.index}.get({k})")
            self.emit(ind, f"if {r} is None: {r} = TBL{t.index}.fill({k})")

    def bind_params(self, b: ir.BlockIR, role: str) -> None:
        base = {"H": self.headers_base, "M": self.meta_base, "SM": self.sm_base}
        for sym, root in storage_roots(role, b.params).items():
            self.bind(sym, base[root])
        for loc in b.locals:
            self.slot_of[loc] = self.alloc(loc.type, loc)

    def gen_control(self, role: str, b: ir.BlockIR) -> None:
        for a in b.actions:
            self.gen_action(a)
        for t in b.tables:
            self.gen_table(t)
        self.emit(0, f"def C_{role}(s):" if role != "deparser" else "def C_deparser(s):")
        if role == "deparser":
            self.emit(1, "out = []")
        self.emit(1, "try:")
        for d in b.inits:
            self.init_local(2, d)
        self.stmt(2, b.apply, {"kind": "control", "role": role})
        self.emit(1, "except _Exit:")
        self.emit(2, "pass")
        if role == "deparser":
            self.emit(1, "return out")
        self.emit(0, "")

    def gen_parser(self, b: ir.BlockIR) -> None:
        states = {st.name: i for i, st in enumerate(b.states)}
        ACC, REJ = -1, -2

        def target(name: str) -> int:
            return ACC if name == "accept" else REJ if name == "reject" else states[name]

        if parser_is_dag(b.states):
            if not (self.fast and self.gen_parser_flat(b)):
                self.gen_parser_dag(b, states, target)
            return

        self.emit(0, "def C_parser(s, pkt):")
        self.emit(1, "n = len(pkt)")
        self.emit(1, "off = 0")
        self.emit(1, f"st = {states['start']}")
        self.emit(1, "steps = 0")
        self.emit(1, "try:")
        self._parser_locals(2, b)
        self.emit(2, "while True:")
        self.emit(3, "steps += 1")
        self.emit(3, f"if steps > 10000: raise _PErr({self.error_codes['ParserTimeout']})")
        ctx = {"kind": "parser"}
        for i, st in enumerate(b.states):
            self.emit(3, f"{'if' if i == 0 else 'elif'} st == {i}:")
            for x in st.stmts:
                self.stmt(4, x, ctx)

            def goto(ind: int, name: str) -> None:
                self.emit(ind, f"st = {target(name)}")
            self._transition(4, st.transition, goto)
            self.emit(4, f"if st == {ACC}: return off, 0, True")
            self.emit(4, f"if st == {REJ}: return off, 0, False")
        self.emit(1, "except _PErr as x:")
        self.emit(2, "return off, x.code, False")
        self.emit(1, "except _Exit:")
        self.emit(2, "return off, 0, True")
        self.emit(0, "")

    def _parser_locals(self, ind: int, b: ir.BlockIR) -> None:
        for d in b.inits:
            self.init_local(ind, d)

    FLAT_PARSER_STATES = 48      # most state copies a parser is inlined into (a DAG with shared states)

    def gen_parser_flat(self, b: ir.BlockIR) -> bool:
        """A loop-free parser as one function: every state inlined into its predecessors' branches
        (a state reached from several places is copied), so a packet costs no calls and ``off`` is a
        plain local.  Returns False, emitting nothing, when the copies would exceed
        :attr:`FLAT_PARSER_STATES`."""
        byname = {st.name: st for st in b.states}
        if flat_state_copies(b.states) > self.FLAT_PARSER_STATES:
            return False
        ctx = {"kind": "parser"}

        def goto(ind: int, name: str) -> None:
            if name == "accept":
                self.emit(ind, "return off, 0, True")
            elif name == "reject":
                self.emit(ind, "return off, 0, False")
            else:
                st = byname[name]
                for x in st.stmts:
                    self.stmt(ind, x, ctx)
                self._transition(ind, st.transition, goto)

        self.emit(0, "def C_parser(s, pkt):")
        self.emit(1, "n = len(pkt)")
        self.emit(1, "off = 0")
        self.emit(1, "try:")
        self._parser_locals(2, b)
        goto(2, "start")
        self.emit(1, "except _PErr as x:")
        self.emit(2, "return off, x.code, False")
        self.emit(0, "")
        return True

    def gen_parser_dag(self, b: ir.BlockIR, states: dict, target) -> None:
        ctx = {"kind": "parser"}

        def goto(ind: int, name: str) -> None:
            if name == "accept":
                self.emit(ind, "return off, 0, True")
            elif name == "reject":
                self.emit(ind, "return off, 0, False")
            else:
                self.emit(ind, f"return P_S{states[name]}(s, pkt, off, n)")

        for i, st in enumerate(b.states):
            self.emit(0, f"def P_S{i}(s, pkt, off, n):")
            self.emit(1, "try:")
            n0 = len(self.lines)
            for x in st.stmts:
                self.stmt(2, x, ctx)
            self._transition(2, st.transition, goto)
            if len(self.lines) == n0:
                self.emit(2, "pass")
            self.emit(1, "except _PErr as x:")
            self.emit(2, "if x.off is None: x.off = off")
            self.emit(2, "raise")
            self.emit(0, "")
        self.emit(0, "def C_parser(s, pkt):")
        self.emit(1, "try:")
        self._parser_locals(2, b)
        self.emit(2, f"return P_S{states['start']}(s, pkt, 0, len(pkt))")
        self.emit(1, "except _PErr as x:")
        self.emit(2, "return (x.off or 0), x.code, False")
        self.emit(0, "")

    def _transition(self, ind: int, tr: T.Transition, goto) -> None:
        if tr.state is not None:
            goto(ind, tr.state)
            return
        ks = []
        for kx in tr.select:
            code = self.as_unsigned(self.expr(kx), kx.type)
            if self.fused and code.isidentifier():
                ks.append(code)       # a local: nothing runs between here and the tests
            else:
                ks.append(self.fresh("k"))
                self.emit(ind, f"{ks[-1]} = {code}")
        first = True
        matched_default = False
        for c in tr.cases:
            conds = []
            for kv, val in zip(ks, c.values):
                if val is None:
                    continue
                if val[0] == "exact":
                    conds.append(f"{kv} == {val[1]}")
                elif val[0] == "ternary":
                    conds.append(f"{kv} & {val[2]} == {val[1]}")
                elif val[0] == "range":
                    conds.append(f"{val[1]} <= {kv} <= {val[2]}")
                elif val[0] == "vset":       # the value set's current members (Switch.set_value_set)
                    conds.append(f"{kv} in VS{val[1].index}")
            if not conds:
                if first:
                    goto(ind, c.state)
                else:
                    self.emit(ind, "else:")
                    goto(ind + 1, c.state)
                matched_default = True
                break
            self.emit(ind, f"{'if' if first else 'elif'} {' and '.join(conds)}:")
            goto(ind + 1, c.state)
            first = False
        if not matched_default:
            if first:
                self.emit(ind, f"raise _PErr({self.error_codes['NoMatch']})")
            else:
                self.emit(ind, "else:")
                self.emit(ind + 1, f"raise _PErr({self.error_codes['NoMatch']})")

    # ---- fused mode: the whole pipeline as two functions over local variables ----------------------
    def capture(self, fn) -> list[str]:
        """Lines ``fn()`` generates, kept apart from the output."""
        saved, self.lines = self.lines, []
        try:
            fn()
            return self.lines
        finally:
            self.lines = saved

    def run_body(self, ind: int, body: T.Stmt, ctx: dict) -> None:
        """A control's or action's body; one holding a ``return`` runs in a one-pass ``while True``
        loop, so its returns (generated as ``break``) leave exactly that body."""
        if contains(body, T.Return):
            self.emit(ind, "while True:")
            self.stmt(ind + 1, body, ctx)
            self.emit(ind + 1, "break")
        else:
            self.stmt(ind, body, ctx)

    def inline_action(self, ind: int, a: ir.ActionIR, args) -> None:
        """Action ``a`` inlined: ``args`` is the code of its data tuple (a table result) or the list
        of argument codes of a direct call.  Its parameters get fresh local names, so an action
        inlined into another one cannot overwrite the caller's parameters."""
        params = a.in_params + a.params
        names = [self.fresh("p") for _ in params]
        if params:
            if isinstance(args, str):
                self.emit(ind, f"{', '.join(names)}, = {args}")
            else:
                for j, (n, x) in enumerate(zip(names, args)):
                    if _INT_LITERAL.fullmatch(x) or x in ("True", "False"):
                        names[j] = x              # a constant argument is used as is
                    else:
                        self.emit(ind, f"{n} = {x}")
        saved = dict(self.pnames)
        for sym, n in zip(params, names):
            self.pnames[id(sym)] = n
        try:
            self.run_body(ind, a.body, {"kind": "action"})
        finally:
            self.pnames = saved

    def fused_apply(self, ind: int, t: ir.TableIR) -> str:
        """Apply table ``t`` (statements at ``ind``); returns the name of its result tuple (hit,
        action index, args, ...).  Simple and direct-counted tables read their cache as in list
        mode; others call ``Table.lookup``.  The action then runs inlined, chosen by index among
        every action the result can name: the table's actions and default for a plain table, any
        action of the program for one with an action profile (members may name any action)."""
        r = self.fresh("r")
        plen = self.slot_ref(self.sm["packet_length"])
        keys = [self.as_unsigned(self.expr(x.expr), x.expr.type) for x in t.keys]
        if self.simple_table(t) or self.counted_table(t):
            if len(keys) == 1 and keys[0].isidentifier():
                k = keys[0]
            else:
                k = self.fresh("k")
                self.emit(ind, f"{k} = {keys[0] if len(keys) == 1 else '(' + ''.join(x + ', ' for x in keys) + ')'}")
            self.cached_lookup(ind, t, k, r, plen)
        else:
            key, sel = self.lookup_args(keys, t)
            self.emit(ind, f"{r} = TBL{t.index}.lookup({key}, {plen}, {sel})")
        acts = t.runnable_actions(self.prog.actions)
        a = self.fresh("a")
        self.emit(ind, f"{a} = {r}[1]")
        for j, act in enumerate(acts):
            self.emit(ind, f"{'if' if j == 0 else 'elif'} {a} == {act.index}:")
            n0 = len(self.lines)
            self.inline_action(ind + 1, act, f"{r}[2]")
            if len(self.lines) == n0:
                self.emit(ind + 1, "pass")
        return r

    def fused_control(self, ind: int, role: str, b: ir.BlockIR) -> None:
        self.emit(ind, "try:")
        inner = ind + 1
        loop = contains(b.apply, T.Return)
        if loop:
            self.emit(inner, "while True:")
            inner += 1
        n0 = len(self.lines)
        for d in b.inits:
            self.init_local(inner, d)
        self.stmt(inner, b.apply, {"kind": "control", "role": role})
        if loop:
            self.emit(inner, "break")
        elif len(self.lines) == n0:
            self.emit(inner, "pass")
        self.emit(ind, "except _Exit:")
        self.emit(ind + 1, "pass")

    def fused_deparser(self, ind: int, b: ir.BlockIR) -> None:
        """``g_data``, the packet leaving: the emitted headers, then the payload.  A deparser that is
        only ``emit`` calls becomes one list display of ``part if valid else b''`` items; any
        other runs as a control appending to ``out``."""
        body = b.apply.stmts if isinstance(b.apply, T.Block) else (b.apply,)
        plain = not b.inits and all(
            isinstance(x, T.CallStmt) and x.call.kind == "method"
            and x.call.target == ("packet_out", "emit") for x in body)
        if not plain:
            self.emit(ind, "out = []")
            self.fused_control(ind, "deparser", b)
            self.emit(ind, "out.append(g_payload)")
            self.emit(ind, "g_data = b''.join(out)")
            return
        lines = self.capture(lambda: [self.emit_data(0, x.call.args[0]) for x in body])
        items = []
        for x in lines:                   # "if <valid>: out.append(<bytes>)", as _emit_at writes them
            cond, _, rest = x.partition(": out.append(")
            assert cond.startswith("if ") and rest.endswith(")"), x
            items.append(f"{rest[:-1]} if {cond[3:]} else b''")
        self.emit(ind, f"g_data = b''.join([{', '.join(items + ['g_payload'])}])")

    def fused_parser(self, ind: int, b: ir.BlockIR) -> None:
        """The parser inline: a loop-free one as nested branches whose leaves fall through to the
        code after it (states copied as in :meth:`gen_parser_flat`), any other as a state loop
        left by ``break``.  An error ends in ``g_perr``; ``off`` is where parsing stopped."""
        ctx = {"kind": "parser"}
        byname = {st.name: st for st in b.states}
        states = {st.name: i for i, st in enumerate(b.states)}
        self.emit(ind, "off = 0")
        self.emit(ind, "g_perr = 0")
        self.emit(ind, "try:")
        self._parser_locals(ind + 1, b)
        flat = parser_is_dag(b.states) and flat_state_copies(b.states) <= self.FLAT_PARSER_STATES
        if flat:
            def goto(i: int, name: str) -> None:
                if name in ("accept", "reject"):
                    self.emit(i, "pass")
                else:
                    st = byname[name]
                    for x in st.stmts:
                        self.stmt(i, x, ctx)
                    self._transition(i, st.transition, goto)
            goto(ind + 1, "start")
        else:
            def target(name: str) -> int:
                return -1 if name == "accept" else -2 if name == "reject" else states[name]

            def goto_st(i: int, name: str) -> None:
                self.emit(i, f"st = {target(name)}")
            self.emit(ind + 1, f"st = {states['start']}")
            self.emit(ind + 1, "steps = 0")
            self.emit(ind + 1, "while True:")
            self.emit(ind + 2, "steps += 1")
            self.emit(ind + 2, f"if steps > 10000: raise _PErr({self.error_codes['ParserTimeout']})")
            for i, st in enumerate(b.states):
                self.emit(ind + 2, f"{'if' if i == 0 else 'elif'} st == {i}:")
                for x in st.stmts:
                    self.stmt(ind + 3, x, ctx)
                self._transition(ind + 3, st.transition, goto_st)
                self.emit(ind + 3, "if st < 0: break")
        self.emit(ind, "except _PErr as x:")
        self.emit(ind + 1, "g_perr = x.code")
        self.emit(ind, "except _StructError:")
        self.emit(ind + 1, f"g_perr = {self.error_codes['PacketTooShort']}")
        if not flat:
            self.emit(ind, "except _Exit:")
            self.emit(ind + 1, "pass")

    def generate_fused(self) -> str:
        """``F_ingress(port, pkt)`` and ``F_egress(port, prio, entry, depth_left, now)``: the same
        per-packet work as the list-mode functions plus the glue of ``Switch`` (standard_metadata,
        traffic manager hand-off, departure), with every slot a local variable.

        Only the slots egress, computeChecksum or the deparser use and the ingress side may have set
        (the *carried* slots) travel through the queue, as the tuple ``(pkt, off, *carried)``; every
        other local starts from its initial value.  ``Switch`` binds the globals the glue uses
        (``SW``, ``ENV``, ``TM``, ``ENQUEUE``, ``TM_DROP``, ``PORTS``, ``OUTPUTS``, ``Departure``)."""
        p = self.prog
        sm = self.sm
        I_PORT, PLEN, IGT = sm["ingress_port"], sm["packet_length"], sm["ingress_global_timestamp"]
        PERR, PRIO, MGRP, ESPEC = sm["parser_error"], sm["priority"], sm["mcast_grp"], sm["egress_spec"]
        RID, ITYPE = sm["egress_rid"], sm["instance_type"]
        EPORT, ENQ_TS, ENQ_QD = sm["egress_port"], sm["enq_timestamp"], sm["enq_qdepth"]
        DEQ_TD, DEQ_QD, EGT = sm["deq_timedelta"], sm["deq_qdepth"], sm["egress_global_timestamp"]
        # set by the glue when egress starts (egress_spec is cleared there, as BMv2 does), so never carried
        egress_set = {EPORT, ENQ_TS, ENQ_QD, DEQ_TD, DEQ_QD, EGT, ESPEC}

        # ingress side, then egress side: the deparser comes last, once every write is known
        # (headers only ever set by extract are emitted as the bytes they came from)
        ing = self.capture(lambda: (self.fused_parser(1, p.blocks["parser"]),
                                    self.emit(1, "if g_perr:"),
                                    self.emit(2, f"{self.slot_ref(PERR, True)} = g_perr"),
                                    self.emit(2, "SW.parser_errors += 1"),
                                    self.fused_control(1, "verify", p.blocks["verify"]),
                                    self.fused_control(1, "ingress", p.blocks["ingress"])))
        reads_i, writes_i = self.reads, self.writes
        self.reads, self.writes = set(), set()
        eg = self.capture(lambda: self.fused_control(1, "egress", p.blocks["egress"]))
        cd = self.capture(lambda: (self.fused_control(1, "compute", p.blocks["compute"]),
                                   self.fused_deparser(1, p.blocks["deparser"])))
        reads_e = self.reads | {ESPEC}
        self.read_anywhere = reads_i | reads_e | {PRIO, MGRP}
        carried = sorted((reads_e & (writes_i | {I_PORT, PLEN, IGT, PERR, RID, ITYPE})) - egress_set)
        self.carried = carried
        init = self.init
        ref = self.slot_ref

        def unpack_init(slots) -> list[str]:
            slots = sorted(slots)
            if not slots:
                return []
            vals = "".join(f"{init[a]!r}, " for a in slots)
            return [f"    {''.join(ref(a) + ', ' for a in slots)}= ({vals})"]

        def chunks(items: list[str]) -> str:
            # tuple displays of at most 30 items compile to one BUILD_TUPLE (longer ones to a list
            # built item by item, then converted): nest the carried slots in chunks of 28
            if len(items) <= 28:
                return "".join(x + ", " for x in items)
            return "".join("(" + "".join(x + ", " for x in items[i:i + 28]) + "), "
                           for i in range(0, len(items), 28))

        def state(rid: str | None = None) -> str:
            items = []
            for a in carried:
                items.append(rid if a == RID and rid else "5" if a == ITYPE and rid else ref(a))
            return f"(pkt, off, {chunks(items)})"

        uses_payload = any("ENV.payload" in x for x in ing + eg + cd)
        uses_now = any("ENV.now_ns" in x for x in ing + eg + cd)      # meters
        local_i = reads_i | set(carried) | {PRIO, MGRP, ESPEC}
        out = ["def F_ingress(g_port, pkt):",
               "    g_now = SW.now_ns"]
        out += unpack_init(local_i - {I_PORT, PLEN, IGT})      # these three are set just below
        if I_PORT in local_i:
            out.append(f"    {ref(I_PORT)} = g_port")
        out.append("    n = len(pkt)")
        if PLEN in local_i:
            out.append(f"    {ref(PLEN)} = n")
        if IGT in local_i:
            out.append(f"    {ref(IGT)} = (g_now // 1000) & 0xFFFFFFFFFFFF")
        if uses_now:
            out.append("    ENV.now_ns = g_now")
        out += ing
        out += [f"    g_prio = {ref(PRIO)}",
                f"    g_grp = {ref(MGRP)}",
                "    if g_grp:",
                "        for g_eport, g_rid in SW.mcast.get(g_grp, ()):",
                f"            ENQUEUE(g_eport, g_prio, {state('g_rid')}, n, g_now)",
                "        return",
                f"    g_eport = {ref(ESPEC)}",
                "    if g_eport == 511:",
                "        TM_DROP(g_port, g_prio, 'pipeline_drop')",
                "        return",
                f"    g_st = {state()}",
                # TrafficManager.enqueue inlined for a queue that exists (QMAP holds those with
                # a priority in range); the method otherwise (creates the queue, or drops)
                "    g_q = QMAP.get(g_eport * 8 + g_prio)",
                "    if g_q is None:",
                "        ENQUEUE(g_eport, g_prio, g_st, n, g_now)",
                "        return",
                "    g_f = g_q.fifo",
                "    g_d = len(g_f)",
                "    if g_d >= g_q.capacity:",
                "        TM_DROP(g_eport, g_prio, 'queue_full')",
                "        return",
                "    g_f.append((g_st, g_now, g_d, n))",
                "    g_q.enq_packets += 1",
                "    if g_d >= g_q.peak_depth:",
                "        g_q.peak_depth = g_d + 1",
                "    TM.backlog += 1",
                "    DIRTY.add(g_eport)",
                ""]

        out += ["def F_egress(g_port, g_prio, g_e, g_depth, g_now):",
                "    SW.now_ns = g_now",
                f"    (pkt, off, {chunks([ref(a) for a in carried])}), g_enq, g_eqd, _ = g_e"]
        out += unpack_init(reads_e - set(carried) - egress_set)
        if EPORT in reads_e:
            out.append(f"    {ref(EPORT)} = g_port")
        out.append(f"    {ref(ESPEC)} = 0")
        if ENQ_TS in reads_e:
            out.append(f"    {ref(ENQ_TS)} = (g_enq // 1000) & 0xFFFFFFFF")
        if ENQ_QD in reads_e:
            out.append(f"    {ref(ENQ_QD)} = g_eqd if g_eqd < {QDEPTH_MAX} else {QDEPTH_MAX}")
        if DEQ_TD in reads_e:
            out.append(f"    {ref(DEQ_TD)} = ((g_now - g_enq) // 1000) & 0xFFFFFFFF")
        if DEQ_QD in reads_e:
            out.append(f"    {ref(DEQ_QD)} = g_depth if g_depth < {QDEPTH_MAX} else {QDEPTH_MAX}")
        if EGT in reads_e:
            out.append(f"    {ref(EGT)} = (g_now // 1000) & 0xFFFFFFFFFFFF")
        if uses_now:
            out.append("    ENV.now_ns = g_now")
        out += eg
        out += [f"    if {ref(ESPEC)} == 511:",
                "        TM_DROP(g_port, g_prio, 'pipeline_drop')",
                "        return",
                "    g_payload = pkt[off:]"]
        if uses_payload:
            out.append("    ENV.payload = g_payload")
        out += cd
        out += ["    g_link = PORTS[g_port]",
                "    if TM.plain_links:",
                "        g_busy = g_link.busy_until_ns",
                "        OUTPUTS.append(_tuple_new(Departure, (g_port, g_data, g_busy, g_busy)))",
                "        return",
                "    if g_link.loss > 0 and TM.rng.random() < g_link.loss:",
                "        TM_DROP(g_port, g_prio, 'emulated_loss')",
                "        return",
                "    g_busy = g_link.busy_until_ns",
                "    OUTPUTS.append(_tuple_new(Departure, (g_port, g_data, g_busy, g_busy + g_link.delay_ns)))",
                ""]
        head = []
        for fmt, n in self.structs.items():
            head += [f"{n} = _Struct({fmt!r})", f"U{n} = {n}.unpack_from", f"K{n} = {n}.pack"]
        return "\n".join(head + out) + "\n"

    def generate(self) -> str:
        p = self.prog
        for role in ROLES:
            self.bind_params(p.blocks[role], role)
        if self.fused:
            # what nothing reads is found on the IR first (switch.midend.analysis), so one run does not compute it
            self.facts = storage_facts(p)
            src = self.generate_fused()
            missed = sorted({self.owners[a] for a in self.read_anywhere if self.dead(a)}, key=repr)
            if missed:
                # the analysis must see every read this generator makes; where it did not, the list shape
                # (which computes everything) stays correct -- tests/switch/test_tir.py requires none
                raise NotFusable(f"dead-storage analysis missed reads of {missed}")
            return src
        # top-level actions (e.g. NoAction) are generated once
        block_actions = {a.index for b in p.blocks.values() for a in b.actions}
        for a in p.actions:
            if a.index not in block_actions:
                self.gen_action(a)
        self.gen_parser(p.blocks["parser"])
        for role in ("verify", "ingress", "egress", "compute", "deparser"):
            self.gen_control(role, p.blocks[role])
        head = []
        for fmt, n in self.structs.items():
            head += [f"{n} = _Struct({fmt!r})", f"U{n} = {n}.unpack_from", f"K{n} = {n}.pack"]
        return "\n".join(head + self.lines) + "\n"


_INT_LITERAL = re.compile(r"-?[0-9]+")


PRELUDE = '''
from struct import Struct as _Struct, error as _StructError
class _PErr(Exception):
    __slots__ = ("code", "off")
    def __init__(self, code):
        self.code = code
        self.off = None

class _Exit(Exception):
    pass

def _div(a, b):
    return a // b if b else 0

def _mod(a, b):
    return a % b if b else 0

def _shl(a, b, w, signed):
    if b >= w:
        return 0
    v = (a << b) & ((1 << w) - 1)
    if signed and v >> (w - 1):
        v -= 1 << w
    return v

def _stk_next(i, size, code):
    if i >= size:
        raise _PErr(code)
    return i

def _stk_last(i, code):
    if i == 0:
        raise _PErr(code)
    return i - 1

import logging as _logging
_P4LOG = _logging.getLogger("switch.p4")

def _log_msg(fmt, vals):
    if _P4LOG.isEnabledFor(_logging.INFO):
        parts = fmt.split("{}")
        out = parts[0]
        for i, p in enumerate(parts[1:]):
            out += (str(int(vals[i])) if i < len(vals) else "{}") + p
        _P4LOG.info("%s", out)

def _look(pkt, off, w):
    nb = (w + 7) // 8
    if off + nb > len(pkt):
        raise _PErr(PACKET_TOO_SHORT)
    return int.from_bytes(pkt[off:off + nb], 'big') >> (nb * 8 - w)

def _adv(pkt, off, bits):
    if bits & 7:
        raise _PErr(PARSER_INVALID_ARGUMENT)
    off2 = off + (bits >> 3)
    if off2 > len(pkt):
        raise _PErr(PACKET_TOO_SHORT)
    return off2
'''

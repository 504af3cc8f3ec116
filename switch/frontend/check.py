"""Name resolution and type checking: syntax tree -> typed IR (declarations in :mod:`switch.midend.ir`, bodies in
:mod:`switch.midend.tir`, built from each checked body by :mod:`switch.frontend.lower`).

Every diagnostic is a :class:`~switch.errors.P4Error` at the offending token, worded for a P4
programmer (unknown name, width mismatch, missing state, assignment to an ``in`` parameter...).
Constant expressions (widths, sizes, keysets, constructor arguments, const entries) are
evaluated here, so the code generator only sees values it can embed.
"""
from __future__ import annotations

from typing import Any

from ..errors import Loc, P4Error, unsupported
from ..midend import ir
from ..midend.ir import BOOL, INTLIT, STR, VOID, Bits, Sym
from . import bmv2_rules, lower
from . import p4ast as A

#: Target limits, so that a pushed program cannot make the compiler or the switch allocate without bound (BMv2
#: has limits of its own; these are generous for real programs): the widest bit<W>/int<W>/varbit<W>, the largest
#: header stack, the most cells of a counter, meter or register, the largest table and the largest compile-time
#: integer.
MAX_WIDTH = 4096
MAX_STACK = 1024
MAX_EXTERN_SIZE = 1 << 22
MAX_TABLE_SIZE = 1 << 24
MAX_CONST_BITS = 8192
#: BMv2's largest entry priority (PI's pivot: a P4Runtime priority p is BMv2's 2**31 - 1 - p, lowest BMv2 wins)
BMV2_MAX_PRIORITY = (1 << 31) - 1
COMPARE = {"==", "!=", "<", ">", "<=", ">="}
SUPPORTED_EXTERNS = {"packet_in", "packet_out", "counter", "direct_counter", "meter", "direct_meter",
                     "register", "action_profile", "action_selector"}


def wrap(v: int, t: ir.Type) -> int:
    """Reduce an integer to the value set of ``t`` (two's complement for int<W>)."""
    if isinstance(t, Bits):
        v &= t.mask
        if t.signed and v >> (t.width - 1):
            v -= 1 << t.width
    return v


def has_varbit(t: ir.Type) -> bool:
    if isinstance(t, ir.VarbitT):
        return True
    if isinstance(t, (ir.HeaderT, ir.StructT)):
        return any(has_varbit(ft) for _, ft in t.fields)
    if isinstance(t, ir.StackT):
        return has_varbit(t.elem)
    return False


class Scope:
    def __init__(self, parent: "Scope | None" = None):
        self.parent = parent
        self.syms: dict[str, Any] = {}

    def lookup(self, name: str):
        s = self
        while s is not None:
            if name in s.syms:
                return s.syms[name]
            s = s.parent
        return None

    def declare(self, sym: Sym | list, name: str, loc: Loc) -> None:
        if name in self.syms and not isinstance(self.syms[name], list):
            raise P4Error(loc, f"'{name}' is already declared at {self.syms[name].loc}")
        self.syms[name] = sym


class Ctx:
    """Where a statement is: the block, the action (if any), parser or control."""

    def __init__(self, block: ir.BlockIR | None, kind: str, action: ir.ActionIR | None = None):
        self.block = block
        self.kind = kind
        self.action = action
        self.loops = 0            # enclosing for loops (break/continue need one)


class Checker:
    def __init__(self, prog: A.Program, path: str):
        self.prog = prog
        self.path = path
        self.globals = Scope()
        self.errors = ir.ErrorT()
        self.match_kinds = ir.MatchKindT()
        self.actions: list[ir.ActionIR] = []
        self.tables: list[ir.TableIR] = []
        self.instances: list[ir.InstanceIR] = []
        self.digests: dict[str, ir.DigestIR] = {}
        self.value_sets: list[ir.ValueSetIR] = []
        self.header_types: dict[str, ir.Type] = {}
        self.main: A.Instance | None = None
        self.locals_all: list[Sym] = []
        self.block_kind = ""          # "parser" or "control" while checking one (see member())
        # the first for-in loop met: refused for BMv2 once the whole program is checked, so that the front end's
        # errors come first, as p4c's front end runs before its back end
        self.for_in: A.For | None = None

    # ---------------------------------------------------------------------------------------
    def run(self) -> ir.ProgramIR:
        for d in self.prog.decls:
            self.declaration(d)
        if self.main is None:
            raise P4Error(Loc(self.path, 1, 1), "no 'main' package instantiation (expected 'V1Switch(...) main;')")
        program = self.bind_main()
        bmv2_rules.check_for_in(self.for_in)
        return program

    def declaration(self, d) -> None:
        g = self.globals
        if isinstance(d, A.ErrorDecl):
            for n, loc in d.members:
                if n in self.errors.members:
                    raise P4Error(loc, f"error.{n} is already declared")
                self.errors.members[n] = len(self.errors.members)
            g.syms["error"] = Sym("type", "error", self.errors, d.loc)
        elif isinstance(d, A.MatchKindDecl):
            for n, loc in d.members:
                self.match_kinds.members[n] = len(self.match_kinds.members)
                g.declare(Sym("const", n, self.match_kinds, loc, value=n), n, loc)
        elif isinstance(d, A.TypedefDecl):
            g.declare(Sym("type", d.name, self.resolve_type(d.type, g), d.loc, d), d.name, d.loc)
        elif isinstance(d, A.HeaderDecl):
            fields = []
            seen = set()
            for f in d.fields:
                ft = self.resolve_type(f.type, g)
                if f.name in seen:
                    raise P4Error(f.loc, f"duplicate field '{f.name}'")
                seen.add(f.name)
                if d.is_union:
                    if not isinstance(ft, ir.HeaderT):
                        raise P4Error(f.loc, f"header_union member '{f.name}' must be a header, not {ft}")
                elif not d.is_struct:
                    if isinstance(ft, ir.EnumT) and ft.underlying:
                        ft = ft
                    elif isinstance(ft, ir.VarbitT):
                        if any(isinstance(t0, ir.VarbitT) for _, t0 in fields):
                            raise P4Error(f.loc, f"header {d.name} has more than one varbit field")
                    elif not isinstance(ft, (Bits, ir.BoolT)):
                        raise P4Error(f.loc, f"header field '{f.name}' must be bit<W>, int<W>, bool or varbit<W>, not {ft}")
                elif isinstance(ft, (ir.ExternT, ir.TableT, ir.IntLit)):
                    raise P4Error(f.loc, f"struct field '{f.name}' cannot have type {ft}")
                fields.append((f.name, ft))
            if d.is_union:
                self.header_types[d.name] = ir.HeaderUnionT(d.name, fields)
                g.declare(Sym("type", d.name, self.header_types[d.name], d.loc, d), d.name, d.loc)
                return
            t = ir.StructT(d.name, fields) if d.is_struct else ir.HeaderT(d.name, fields)
            if not d.is_struct and t.fixed_width % 8:
                raise P4Error(d.loc, f"header {d.name} is {t.fixed_width} bits long"
                                     f"{' (without its varbit field)' if t.varbit is not None else ''}, "
                                     "not a multiple of 8 (BMv2 requires byte-aligned headers)")
            if not d.is_struct and t.varbit is not None and t.fields[t.varbit][1].max_width % 8:
                raise P4Error(d.fields[t.varbit].loc, f"varbit field '{t.fields[t.varbit][0]}' has a maximum width of "
                                                      f"{t.fields[t.varbit][1].max_width} bits, not a multiple of 8 "
                                                      "(BMv2 extracts whole bytes)")
            self.header_types[d.name] = t
            g.declare(Sym("type", d.name, t, d.loc, d), d.name, d.loc)
        elif isinstance(d, A.EnumDecl):
            under = self.resolve_type(d.underlying, g) if d.underlying else None
            t = ir.EnumT(d.name, under)
            for i, (n, ve, loc) in enumerate(d.members):
                if n in t.members:
                    raise P4Error(loc, f"duplicate enum member '{n}'")
                if under is not None:
                    if ve is None:
                        raise P4Error(loc, f"member '{n}' of serializable enum {d.name} needs a value")
                    self.expr(ve, g)
                    t.members[n] = wrap(self.const_eval(ve, g), under)
                else:
                    t.members[n] = i
            g.declare(Sym("type", d.name, t, d.loc, d), d.name, d.loc)
        elif isinstance(d, A.ConstDecl):
            t = self.resolve_type(d.type, g)
            self.expr(d.init, g, t)
            self.assignable(t, d.init, d.init.loc)
            v = self.const_eval(d.init, g)
            g.declare(Sym("const", d.name, t, d.loc, d, value=wrap(v, t) if isinstance(v, int) and not isinstance(v, bool) else v), d.name, d.loc)
        elif isinstance(d, A.ExternDecl):
            g.declare(Sym("type", d.name, ir.BlockT(d), d.loc, d), d.name, d.loc)
        elif isinstance(d, A.ExternFuncDecl):
            cur = g.syms.get(d.name)
            if isinstance(cur, list):
                cur.append(Sym("efunc", d.name, None, d.loc, d.proto))
            else:
                g.declare([Sym("efunc", d.name, None, d.loc, d.proto)], d.name, d.loc)
        elif isinstance(d, A.BlockTypeDecl):
            g.declare(Sym("type", d.name, ir.BlockT(d), d.loc, d), d.name, d.loc)
        elif isinstance(d, A.ActionDecl):
            a = self.action(d, g, None, "")
            g.declare(Sym("action", d.name, None, d.loc, a), d.name, d.loc)
        elif isinstance(d, (A.ParserDecl, A.ControlDecl)):
            g.declare(Sym("block", d.name, ir.BlockT(d), d.loc, d), d.name, d.loc)
        elif isinstance(d, A.Instance):
            if d.name == "main":
                self.main = d
                return
            t = self.resolve_type(d.type, g)
            if not isinstance(t, ir.ExternT):
                raise unsupported(f"top-level instantiation of {t} (only extern instances and 'main')", d.loc)
            # an extern instance shared by every control (BMv2 allows it); P4Info names it without a prefix
            inst = self.instance(d, g, "")
            g.declare(Sym("instance", d.name, t, d.loc, inst), d.name, d.loc)
        else:  # pragma: no cover - parser only produces the kinds above
            raise unsupported(type(d).__name__, d.loc)

    # ---- types ------------------------------------------------------------------------------
    def resolve_type(self, tr: A.TypeRef, scope: Scope, tvars: dict | None = None) -> ir.Type:
        k = tr.kind
        if k in ("bit", "int"):
            if tr.width is None:
                return INTLIT
            self.expr(tr.width, scope)
            w = self.const_eval(tr.width, scope)
            if not isinstance(w, int) or isinstance(w, bool) or w <= 0:
                raise P4Error(tr.loc, f"invalid width {w} for {k}<W>")
            if w > MAX_WIDTH:
                raise P4Error(tr.loc, f"width {w} of {k}<W> exceeds this target's limit of {MAX_WIDTH} bits")
            return Bits(w, k == "int")
        if k == "varbit":
            self.expr(tr.width, scope)
            w = self.const_eval(tr.width, scope)
            if not isinstance(w, int) or isinstance(w, bool) or w <= 0:
                raise P4Error(tr.loc, f"invalid width {w} for varbit<W>")
            if w > MAX_WIDTH:
                raise P4Error(tr.loc, f"width {w} of varbit<W> exceeds this target's limit of {MAX_WIDTH} bits")
            return ir.VarbitT(w)
        if k == "bool":
            return BOOL
        if k == "error":
            return self.errors
        if k == "void":
            return VOID
        if k == "string":
            return STR
        if k == "match_kind":
            return self.match_kinds
        if k == "dontcare":
            return ir.DONTCARE
        if k == "tuple":
            return ir.TupleT([self.resolve_type(a, scope, tvars) for a in tr.args])
        if k == "stack":
            et = self.resolve_type(tr.args[0], scope, tvars)
            if not isinstance(et, ir.HeaderT):
                raise P4Error(tr.loc, f"header stack elements must be headers, not {et}")
            self.expr(tr.size, scope)
            n = self.const_eval(tr.size, scope)
            if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
                raise P4Error(tr.size.loc, "header stack size must be a positive constant")
            if n > MAX_STACK:
                raise P4Error(tr.size.loc, f"header stack size {n} exceeds this target's limit of {MAX_STACK}")
            return ir.StackT(et, n)
        if k == "name":
            if tvars is not None and tr.name in tvars:
                return tvars[tr.name]
            s = scope.lookup(tr.name)
            if s is None or isinstance(s, list):
                raise P4Error(tr.loc, f"unknown type '{tr.name}'")
            if s.kind == "type" and isinstance(s.type, ir.BlockT) and isinstance(s.decl, A.ExternDecl):
                return ir.ExternT(s.decl, [self.resolve_type(a, scope, tvars) for a in tr.args])
            if s.kind not in ("type", "block"):
                raise P4Error(tr.loc, f"'{tr.name}' is not a type")
            return s.type
        raise unsupported(f"type {k}", tr.loc)

    # ---- constants ----------------------------------------------------------------------------
    def const_eval(self, e: A.Expr, scope: Scope):
        """The value of a compile-time constant expression; an integer beyond :data:`MAX_CONST_BITS` bits is an
        error (untyped integers have arbitrary precision, so ``1 << 4000`` multiplied by itself would grow)."""
        v = self._const_eval(e, scope)
        if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > MAX_CONST_BITS:
            raise P4Error(e.loc, f"constant value longer than {MAX_CONST_BITS} bits")
        return v

    def _const_eval(self, e: A.Expr, scope: Scope):
        if isinstance(e, A.Lit):
            return e.value if e.type is None or not isinstance(e.type, Bits) else wrap(e.value, e.type)
        if isinstance(e, A.BoolLit):
            return e.value
        if isinstance(e, A.Name):
            s = e.ref
            if isinstance(s, Sym) and s.kind == "const":
                return s.value
            raise P4Error(e.loc, f"'{e.name}' is not a compile-time constant")
        if isinstance(e, A.Member):
            if isinstance(e.type, (ir.EnumT, ir.ErrorT)) and isinstance(e.expr, A.Name) and \
                    isinstance(e.expr.ref, Sym) and e.expr.ref.kind == "type":
                return e.type.members[e.name]
            raise P4Error(e.loc, "expression is not a compile-time constant")
        if isinstance(e, A.Cast):
            v = self.const_eval(e.expr, scope)
            if isinstance(e.type, ir.BoolT):
                return bool(v)
            return wrap(int(v), e.type)
        if isinstance(e, A.Unary):
            v = self.const_eval(e.expr, scope)
            r = {"-": lambda: -v, "~": lambda: ~v, "!": lambda: not v}[e.op]()
            return wrap(r, e.type) if isinstance(e.type, Bits) else r
        if isinstance(e, A.Binary):
            a = self.const_eval(e.left, scope)
            b = self.const_eval(e.right, scope)
            op = e.op
            if op == "++":
                return wrap((wrap(a, e.left.type) & e.left.type.mask) << e.right.type.width | (b & e.right.type.mask), e.type)
            if op in ("/", "%") and b == 0:
                raise P4Error(e.loc, "division by zero")
            f = {"+": a + b, "-": a - b, "*": a * b, "&": a & b if not isinstance(a, bool) else a and b,
                 "|": a | b, "^": a ^ b, "==": a == b, "!=": a != b, "<": a < b, ">": a > b,
                 "<=": a <= b, ">=": a >= b, "&&": a and b, "||": a or b}
            if op in f:
                r = f[op]
            elif op == "/":
                r = a // b
            elif op == "%":
                r = a % b
            elif op == "<<":
                r = a << b if b < 4096 else 0
            elif op == ">>":
                r = a >> b
            elif op in ("|+|", "|-|"):
                r = a + b if op == "|+|" else a - b
                t = e.type
                if isinstance(t, Bits):
                    lo, hi = (-(1 << (t.width - 1)), (1 << (t.width - 1)) - 1) if t.signed else (0, t.mask)
                    return max(lo, min(hi, r))
                return r
            else:
                raise P4Error(e.loc, f"cannot evaluate '{op}' at compile time")
            return wrap(r, e.type) if isinstance(e.type, Bits) else r
        if isinstance(e, A.Ternary):
            return self.const_eval(e.then if self.const_eval(e.cond, scope) else e.other, scope)
        if isinstance(e, A.Slice):
            v = self.const_eval(e.expr, scope)
            return (v >> e.lo_v) & ((1 << (e.hi_v - e.lo_v + 1)) - 1)
        raise P4Error(e.loc, "expression is not a compile-time constant")

    # ---- expressions --------------------------------------------------------------------------
    def coerce(self, e: A.Expr, t: ir.Type) -> None:
        """Give an untyped integer literal (sub)expression the type ``t``."""
        if isinstance(e.type, ir.IntLit) and isinstance(t, (Bits, ir.EnumT)) and not (isinstance(t, ir.EnumT) and t.underlying is None):
            tt = t.underlying if isinstance(t, ir.EnumT) else t
            if isinstance(e, A.Lit):
                e.type = tt
            elif isinstance(e, (A.Binary, A.Unary, A.Ternary)):
                e.type = tt
                for c in (getattr(e, "left", None), getattr(e, "right", None), getattr(e, "expr", None),
                          getattr(e, "then", None), getattr(e, "other", None)):
                    if c is not None and isinstance(c.type, ir.IntLit) and not (isinstance(e, A.Binary) and e.op in ("<<", ">>") and c is e.right):
                        self.coerce(c, tt)
            else:
                e.type = tt

    def same(self, a: ir.Type, b: ir.Type) -> bool:
        if a is b or a == b:
            return True
        if isinstance(a, ir.TupleT) and isinstance(b, ir.TupleT):
            return len(a.elems) == len(b.elems) and all(self.same(x, y) for x, y in zip(a.elems, b.elems))
        if isinstance(a, ir.StackT) and isinstance(b, ir.StackT):     # P4-16 8.18: stacks of one type assign
            return a.size == b.size and self.same(a.elem, b.elem)
        return False

    def assignable(self, t: ir.Type, e: A.Expr, loc: Loc) -> None:
        """Check that expression ``e`` (already typed) can be assigned to a location of type ``t``."""
        if isinstance(e.type, ir.IntLit):
            if isinstance(t, (Bits,)) or (isinstance(t, ir.EnumT) and t.underlying):
                self.coerce(e, t)
                return
            if isinstance(t, ir.IntLit):
                return
            raise P4Error(loc, f"cannot assign an integer to a value of type {t}")
        if isinstance(t, ir.EnumT) and t.underlying and isinstance(e.type, Bits) and e.type == t.underlying:
            return
        if isinstance(e, A.StructExpr) and isinstance(t, (ir.HeaderT, ir.StructT)):
            # P4-16 8.13: every field named exactly once; put the items in the type's field order
            by = {}
            for n, it in zip(e.names, e.items):
                if n not in t.index:
                    raise P4Error(it.loc, f"{t} has no field '{n}'")
                if n in by:
                    raise P4Error(it.loc, f"field '{n}' given twice")
                by[n] = it
            missing = [n for n, _ in t.fields if n not in by]
            if missing:
                raise P4Error(loc, f"structure-valued expression lacks field(s) {', '.join(missing)} of {t}")
            e.items = [by[n] for n, _ in t.fields]
            e.names = [n for n, _ in t.fields]
        elif isinstance(e, A.StructExpr):
            raise P4Error(loc, f"a structure-valued expression cannot be a {t}")
        if isinstance(e, A.ListExpr) and isinstance(t, (ir.HeaderT, ir.StructT)):
            if len(e.items) != len(t.fields):
                raise P4Error(loc, f"list has {len(e.items)} elements but {t} has {len(t.fields)} fields")
            for it, (_, ft) in zip(e.items, t.fields):
                self.assignable(ft, it, it.loc)
            e.type = t
            return
        if not self.same(t, e.type):
            if isinstance(t, Bits) and isinstance(e.type, Bits):
                raise P4Error(loc, f"width mismatch: cannot assign {e.type} to {t} (use a cast)")
            raise P4Error(loc, f"type mismatch: cannot assign {e.type} to {t}")

    def unify(self, e: A.Binary) -> ir.Type:
        lt, rt = e.left.type, e.right.type
        if isinstance(lt, ir.IntLit) and isinstance(rt, ir.IntLit):
            return INTLIT
        if isinstance(lt, ir.IntLit):
            self.coerce(e.left, rt)
            lt = e.left.type
        elif isinstance(rt, ir.IntLit):
            self.coerce(e.right, lt)
            rt = e.right.type
        if isinstance(lt, ir.EnumT) and lt.underlying and isinstance(rt, Bits):
            lt = lt.underlying
        if isinstance(rt, ir.EnumT) and rt.underlying and isinstance(lt, Bits):
            rt = rt.underlying
        if not self.same(lt, rt):
            if isinstance(lt, Bits) and isinstance(rt, Bits):
                raise P4Error(e.loc, f"width mismatch in '{e.op}': {lt} and {rt} (use a cast)")
            raise P4Error(e.loc, f"type mismatch in '{e.op}': {lt} and {rt}")
        return lt

    def expr(self, e: A.Expr, scope: Scope, expected: ir.Type | None = None) -> ir.Type:
        t = self._expr(e, scope, expected)
        e.type = t
        return t

    def _expr(self, e: A.Expr, scope: Scope, expected) -> ir.Type:
        if isinstance(e, A.Lit):
            if e.width is not None:
                if e.width == 0:
                    raise P4Error(e.loc, "a literal needs a width of at least 1")
                t = Bits(e.width, e.signed)
                if e.value > t.mask:
                    raise P4Error(e.loc, f"value {e.value} does not fit in {t}")
                return t
            return INTLIT
        if isinstance(e, A.BoolLit):
            return BOOL
        if isinstance(e, A.StrLit):
            return STR
        if isinstance(e, A.Default):
            return ir.DONTCARE
        if isinstance(e, A.Name):
            s = scope.lookup(e.name)
            if s is None:
                raise P4Error(e.loc, f"unknown name '{e.name}'")
            e.ref = s
            if isinstance(s, list):
                return VOID
            if s.kind in ("var", "param", "aparam", "const", "instance"):
                return s.type
            if s.kind == "table":
                return ir.TableT(s.decl)
            if s.kind in ("type", "block"):
                return s.type
            if s.kind == "action":
                return VOID
            raise P4Error(e.loc, f"'{e.name}' cannot be used in an expression")
        if isinstance(e, A.Member):
            return self.member(e, scope)
        if isinstance(e, A.Index):
            bt = self.expr(e.expr, scope)
            it = self.expr(e.index, scope)
            if not isinstance(bt, ir.StackT):
                raise P4Error(e.loc, f"cannot index a value of type {bt}")
            if not isinstance(it, (Bits, ir.IntLit)) or (isinstance(it, Bits) and it.signed):
                raise P4Error(e.index.loc, "header stack index must be an unsigned integer")
            if isinstance(it, ir.IntLit) or isinstance(e.index, A.Lit):
                v = self.const_eval(e.index, scope)
                if v < 0 or v >= bt.size:
                    raise P4Error(e.index.loc, f"index {v} out of range for {bt}")
            return bt.elem
        if isinstance(e, A.Slice):
            bt = self.expr(e.expr, scope)
            self.expr(e.hi, scope)
            self.expr(e.lo, scope)
            hi = self.const_eval(e.hi, scope)
            lo = self.const_eval(e.lo, scope)
            if not isinstance(bt, Bits):
                raise P4Error(e.loc, f"cannot slice a value of type {bt}")
            if not (0 <= lo <= hi < bt.width):
                raise P4Error(e.loc, f"slice [{hi}:{lo}] out of range for {bt}")
            e.hi_v, e.lo_v = hi, lo
            return Bits(hi - lo + 1)
        if isinstance(e, A.Unary):
            t = self.expr(e.expr, scope)
            if e.op == "!":
                if not isinstance(t, ir.BoolT):
                    raise P4Error(e.loc, f"'!' needs a bool operand, not {t}")
                return BOOL
            if not isinstance(t, (Bits, ir.IntLit)):
                raise P4Error(e.loc, f"'{e.op}' needs an integer operand, not {t}")
            if e.op == "~" and isinstance(t, ir.IntLit):
                raise P4Error(e.loc, "'~' needs an operand with a width (e.g. 8w5)")
            return t
        if isinstance(e, A.Binary):
            return self.binary(e, scope)
        if isinstance(e, A.Ternary):
            c = self.expr(e.cond, scope)
            if not isinstance(c, ir.BoolT):
                raise P4Error(e.cond.loc, f"condition must be bool, not {c}")
            self.expr(e.then, scope)             # types both branches (unify reads them)
            self.expr(e.other, scope)
            fake = A.Binary(e.loc, "?:", e.then, e.other)
            t = self.unify(fake)
            if isinstance(t, ir.IntLit):
                raise P4Error(e.loc, "'?:' with two untyped integers: give one a width")
            return t
        if isinstance(e, A.Cast):
            to = self.resolve_type(e.to, scope)
            src = self.expr(e.expr, scope, to)
            return self.cast(e, src, to)
        if isinstance(e, A.ListExpr):
            ts = [self.expr(x, scope) for x in e.items]
            for x, t in zip(e.items, ts):
                if t is VOID or isinstance(t, (ir.TableT, ir.ExternT, ir.BlockT)):
                    raise P4Error(x.loc, "a list item must be a value")
            return ir.TupleT(ts)
        if isinstance(e, A.Call):
            return self.call(e, scope, None)
        if isinstance(e, (A.Mask, A.Range)):
            raise P4Error(e.loc, "'&&&' and '..' are only allowed in keysets")
        raise unsupported(type(e).__name__, e.loc)

    def cast(self, e, src: ir.Type, to: ir.Type) -> ir.Type:
        ok = False
        if isinstance(to, Bits) and isinstance(src, (Bits, ir.IntLit, ir.BoolT)):
            ok = not isinstance(src, ir.BoolT) or to.width == 1
        elif isinstance(to, ir.BoolT) and (isinstance(src, ir.BoolT) or (isinstance(src, Bits) and src.width == 1)
                                          or isinstance(src, ir.IntLit)):
            ok = True
        elif isinstance(to, ir.EnumT) and to.underlying and isinstance(src, (Bits, ir.IntLit, ir.EnumT)):
            ok = True
        elif isinstance(to, Bits) and isinstance(src, ir.EnumT) and src.underlying:
            ok = True
        elif self.same(src, to):
            ok = True
        if not ok:
            raise P4Error(e.loc, f"cannot cast {src} to {to}")
        if isinstance(src, ir.IntLit):
            self.coerce(e.expr, to if not isinstance(to, ir.BoolT) else Bits(1))
        return to

    def binary(self, e: A.Binary, scope: Scope) -> ir.Type:
        op = e.op
        lt = self.expr(e.left, scope)
        rt = self.expr(e.right, scope)
        if op in ("&&", "||"):
            for x, t in ((e.left, lt), (e.right, rt)):
                if not isinstance(t, ir.BoolT):
                    raise P4Error(x.loc, f"'{op}' needs bool operands, not {t}")
            return BOOL
        if op in ("<<", ">>"):
            if not isinstance(lt, (Bits, ir.IntLit)):
                raise P4Error(e.left.loc, f"cannot shift a value of type {lt}")
            if isinstance(rt, Bits) and rt.signed or not isinstance(rt, (Bits, ir.IntLit)):
                raise P4Error(e.right.loc, f"shift amount must be unsigned, not {rt}")
            if isinstance(lt, ir.IntLit) and not isinstance(rt, ir.IntLit):
                raise P4Error(e.left.loc, "left operand of a shift needs a width (e.g. 8w1)")
            if isinstance(rt, ir.IntLit) and self.const_eval(e.right, scope) < 0:
                raise P4Error(e.right.loc, "shift amount must not be negative")
            return lt
        if op == "++":
            for x, t in ((e.left, lt), (e.right, rt)):
                if not isinstance(t, Bits):
                    raise P4Error(x.loc, f"'++' needs operands with a width, not {t}")
            return Bits(lt.width + rt.width, lt.signed)
        t = self.unify(e)
        if op in COMPARE:
            if op not in ("==", "!=") and not isinstance(t, (Bits, ir.IntLit)):
                raise P4Error(e.loc, f"'{op}' needs integer operands, not {t}")
            if isinstance(t, (ir.HeaderT, ir.StructT, ir.StackT)):
                # P4-16 8.9/8.11/8.17: equal when both invalid or both valid with equal fields; structs and
                # stacks field by field.  The code generator compares the operands' slots.
                for x in (e.left, e.right):
                    if isinstance(x, A.ListExpr):
                        raise unsupported("comparison with a list or structure expression", x.loc)
            return BOOL
        if not isinstance(t, (Bits, ir.IntLit)):
            raise P4Error(e.loc, f"'{op}' needs integer operands, not {t}")
        if op in ("/", "%"):
            self.division(e, t, scope)
        return t

    def division(self, e: A.Binary, t: ir.Type, scope: Scope) -> None:
        """p4c's rules for ``/`` and ``%``: unsigned operands only, no negative constant, and -- BMv2 has no
        division -- a value known at compile time: both operands constant (folded), a dividend of 0, or a divisor
        that is a power of two (p4c's strength reduction makes it a shift or a mask).  Anything else p4c's
        midend refuses ("could not evaluate expression at compilation time")."""
        op = e.op
        if isinstance(t, Bits) and t.signed:
            raise P4Error(e.loc, f"'{op}' is not defined on signed values ({t}) (p4c: cannot operate on signed "
                                 f"values)")
        vals = []
        for x in (e.left, e.right):
            try:
                vals.append(self.const_eval(x, scope))
            except P4Error:
                vals.append(None)
        for x, v in zip((e.left, e.right), vals):
            if isinstance(v, int) and v < 0 and isinstance(x.type, ir.IntLit):
                raise P4Error(x.loc, f"'{op}' is not defined on negative numbers")
        left, right = vals
        if right == 0:
            raise P4Error(e.right.loc, "division by zero" if op == "/" else "modulo by zero")
        if (left is not None and right is not None) or left == 0:
            return
        if isinstance(right, int) and right > 0 and right & (right - 1) == 0:
            return
        raise P4Error(e.loc, f"'{op}' by a value not known at compile time is refused by p4c (BMv2 cannot divide: "
                             f"'could not evaluate expression at compilation time'); only constants, and divisors "
                             f"that are powers of two, are allowed")

    def member(self, e: A.Member, scope: Scope) -> ir.Type:
        # Type.member for enums and errors
        if isinstance(e.expr, A.Name):
            s = scope.lookup(e.expr.name)
            if isinstance(s, Sym) and s.kind == "type" and isinstance(s.type, (ir.EnumT, ir.ErrorT)):
                e.expr.ref = s
                e.expr.type = s.type
                if e.name not in s.type.members:
                    raise P4Error(e.loc, f"'{e.name}' is not a member of {s.type}")
                return s.type
            if isinstance(s, Sym) and s.kind == "type" and isinstance(s.type, (ir.HeaderT, ir.StructT, Bits,
                                                                                 ir.StackT, ir.BoolT)):
                raise P4Error(e.expr.loc, f"'{e.expr.name}' is a type, not a value")
        bt = self.expr(e.expr, scope)
        if isinstance(bt, (ir.HeaderT, ir.StructT)):
            if e.name in bt.index:
                bmv2_rules.check_next_member(e)
                return bt.ftype(e.name)
            if isinstance(bt, ir.HeaderT) and e.name in ("isValid", "setValid", "setInvalid"):
                # call() handles h.isValid() itself; reaching here means the method is used as a value
                raise P4Error((e.name_loc or e.loc), f"'{e.name}' is a method: call it, {e.name}()")
            raise P4Error((e.name_loc or e.loc),
                          f"{'header' if isinstance(bt, ir.HeaderT) else 'struct'} {bt.name} has no field '{e.name}'")
        if isinstance(bt, ir.StackT):
            if e.name in ("next", "last", "lastIndex") and self.block_kind != "parser":
                # P4-16 8.18: they depend on the parser's nextIndex and "may only be used in a parser"
                raise P4Error(e.loc, f"header stack '{e.name}' may only be used in a parser")
            if e.name in ("next", "last"):
                return bt.elem
            if e.name in ("size", "lastIndex"):
                return Bits(32)
            if e.name in ("push_front", "pop_front"):
                return VOID
            raise P4Error(e.loc, f"header stack has no member '{e.name}'")
        if isinstance(bt, ir.ApplyResultT):
            if e.name in ("hit", "miss"):
                return BOOL
            if e.name == "action_run":
                return ir.ActionEnumT(bt.table)
            raise P4Error(e.loc, f"table apply result has no member '{e.name}'")
        if isinstance(bt, (ir.TableT, ir.ExternT, ir.BlockT)):
            return VOID   # method: resolved by call()
        raise P4Error(e.loc, f"value of type {bt} has no member '{e.name}'")

    # ---- calls ------------------------------------------------------------------------------
    def bind_args(self, e: A.Call, params: list[A.Param], tparams: list[str], scope: Scope,
                  tvars: dict | None = None, what: str = "") -> dict:
        e.args = A.resolve_args(e.args, params, e.loc, what)
        if len(e.args) != len(params):
            raise P4Error(e.loc, f"{what} expects {len(params)} argument(s), got {len(e.args)}")
        tv: dict[str, ir.Type] = dict(tvars or {})
        for i, tname in enumerate(tparams):
            if i < len(e.type_args):
                tv[tname] = self.resolve_type(e.type_args[i], scope)
        # first pass: bind type variables from typed arguments
        pending = []
        for a, p in zip(e.args, params):
            at = self.expr(a, scope)
            if p.type.kind == "name" and p.type.name in tparams and p.type.name not in tv:
                if isinstance(at, ir.IntLit):
                    pending.append((a, p))
                    continue
                tv[p.type.name] = at
        for a, p in pending:
            if p.type.name not in tv:
                tv[p.type.name] = INTLIT
        for a, p in zip(e.args, params):
            pt = self.resolve_type(p.type, scope, {**{t: ir.TypeVar(t) for t in tparams}, **tv})
            if isinstance(pt, ir.TypeVar):
                continue
            if p.direction in ("out", "inout"):
                self.lvalue(a, scope, f"argument for '{p.direction} {p.name}'")
            if isinstance(a, A.Default):
                if p.direction != "out":
                    raise P4Error(a.loc, "'_' can only be passed to an out parameter")
                continue
            if isinstance(pt, ir.MatchKindT) or isinstance(a.type, ir.TupleT):
                continue
            if isinstance(pt, ir.StrT):
                continue
            self.assignable(pt, a, a.loc)
        return tv

    def call(self, e: A.Call, scope: Scope, ctx: Ctx | None) -> ir.Type:
        f = e.func
        if isinstance(f, A.Name):
            s = scope.lookup(f.name)
            if s is None:
                raise P4Error(f.loc, f"unknown name '{f.name}'")
            f.ref = s
            if isinstance(s, list):   # extern function (possibly overloaded)
                cands = [x for x in s if _resolves(e.args, x.decl.params)]
                if not cands and any(isinstance(a, A.NamedArg) for a in e.args):
                    A.resolve_args(e.args, s[0].decl.params, e.loc, f.name)     # raises the precise error
                if not cands:
                    raise P4Error(e.loc, f"{f.name} expects {len(s[0].decl.params)} argument(s), got {len(e.args)}")
                proto = cands[0].decl
                if f.name in ("resubmit", "recirculate", "clone3"):      # v1model's deprecated data forms
                    x = e.args[-1]
                    if not (isinstance(x, A.ListExpr) and not x.items):
                        raise unsupported(f"{f.name} with a data argument other than {{}} (use the "
                                          "_preserving_field_list form and @field_list)", x.loc)
                tv = self.bind_args(e, proto.params, proto.type_params, scope, what=f.name)
                e.kind = "efunc"
                e.target = f.name
                e.tvars = tv
                if f.name == "digest":
                    dt = e.args[1].type
                    if not isinstance(dt, ir.StructT):
                        raise P4Error(e.args[1].loc, "digest data must be a struct")
                    if has_varbit(dt):
                        raise unsupported("a varbit field in digest data", e.args[1].loc)
                    if dt.name not in self.digests:
                        self.digests[dt.name] = ir.DigestIR(dt.name, dt, len(self.digests))
                    e.digest = self.digests[dt.name]
                return self.resolve_type(proto.ret, scope, tv) if proto.ret else VOID
            if s.kind == "action":
                a: ir.ActionIR = s.decl
                if ctx is not None and ctx.action is not None and ctx.action is a:
                    raise P4Error(e.loc, "an action cannot call itself")
                params = a.decl.params
                e.args = A.resolve_args(e.args, params, e.loc, f"action {a.name}")
                if len(e.args) != len(params):
                    raise P4Error(e.loc, f"action {a.name} expects {len(params)} argument(s), got {len(e.args)}")
                for arg, p in zip(e.args, a.in_params + a.params):
                    self.expr(arg, scope)
                    self.assignable(p.type, arg, arg.loc)
                e.kind = "action"
                e.target = a
                return VOID
            raise P4Error(f.loc, f"'{f.name}' is not a function or action")
        if isinstance(f, A.Member):
            bt = self.expr(f.expr, scope)
            m = f.name
            if isinstance(bt, ir.HeaderUnionT) and m == "isValid":      # P4-16 8.20: any member valid
                if e.args:
                    raise P4Error(e.loc, "isValid() takes no arguments")
                e.kind = "union"
                e.target = m
                return BOOL
            if isinstance(bt, ir.HeaderT) and m in ("isValid", "setValid", "setInvalid"):
                if e.args:
                    raise P4Error(e.loc, f"{m}() takes no arguments")
                if m != "isValid":
                    self.lvalue(f.expr, scope, f"target of {m}()")
                e.kind = "hdr"
                e.target = m
                return BOOL if m == "isValid" else VOID
            if isinstance(bt, ir.StackT) and m in ("push_front", "pop_front"):
                # P4-16 8.18: shift the elements by a compile-time count
                if len(e.args) != 1:
                    raise P4Error(e.loc, f"{m} takes one argument (a compile-time count)")
                self.expr(e.args[0], scope)
                k = self.const_eval(e.args[0], scope)
                if not isinstance(k, int) or isinstance(k, bool) or k < 0:
                    raise P4Error(e.args[0].loc, f"{m} needs a non-negative compile-time integer")
                self.lvalue(f.expr, scope, f"target of {m}()")
                e.kind = "stack"
                e.target = (m, k)
                return VOID
            if isinstance(bt, ir.TableT):
                if m != "apply":
                    raise P4Error(f.loc, f"table has no method '{m}'")
                if e.args:
                    raise P4Error(e.loc, "apply() takes no arguments")
                if ctx is not None and ctx.action is not None:
                    raise P4Error(e.loc, "tables cannot be applied inside actions")
                e.kind = "table"
                e.target = bt.table
                return ir.ApplyResultT(bt.table)
            if isinstance(bt, ir.BlockT):
                # switch.frontend.inline has replaced every apply of a parser/control declared earlier by its body
                raise P4Error(e.loc, f"{bt.name} cannot be applied here: a parser applies parsers and a control "
                                     "applies controls, declared before it (P4-16 15.1)")
            if isinstance(bt, ir.ExternT):
                decl = bt.decl
                ms = [x for x in decl.methods if x.name == m and x.ret is not None]
                if not ms:
                    raise P4Error(f.loc, f"extern {decl.name} has no method '{m}'")
                cands = [x for x in ms if _resolves(e.args, x.params)] or ms
                proto = cands[0]
                ext_tv = dict(zip(decl.type_params, bt.args))
                tv = self.bind_args(e, proto.params, proto.type_params, scope, ext_tv, what=f"{decl.name}.{m}")
                e.kind = "method"
                e.target = (decl.name, m)
                e.tvars = tv
                if decl.name == "packet_in" and m == "extract":
                    at = e.args[0].type
                    if not isinstance(at, ir.HeaderT):
                        raise P4Error(e.args[0].loc, f"extract needs a header, not {at}")
                    if len(e.args) == 1 and at.varbit is not None:
                        raise P4Error(e.loc, f"header {at.name} has a varbit field: extract it with a size, "
                                             "extract(hdr, (bit<32>)sizeInBits)")
                    if len(e.args) == 2 and at.varbit is None:
                        raise P4Error(e.loc, f"extract with a size needs a header with a varbit field; "
                                             f"{at.name} has none")
                if decl.name == "packet_in" and m == "lookahead":
                    if not e.type_args:
                        raise P4Error(e.loc, "lookahead needs a type argument, e.g. lookahead<bit<8>>()")
                    lt = tv.get(proto.type_params[0]) if proto.type_params else None
                    if not isinstance(lt, (Bits, ir.HeaderT)) or (isinstance(lt, ir.HeaderT) and lt.varbit is not None):
                        raise unsupported(f"lookahead of {lt}", e.loc)
                if decl.name == "packet_out" and m == "emit":
                    at = e.args[0].type
                    if not isinstance(at, (ir.HeaderT, ir.StructT, ir.StackT)):
                        raise P4Error(e.args[0].loc, f"emit needs a header, header stack or struct, not {at}")
                return self.resolve_type(proto.ret, scope, tv)
            raise P4Error(f.loc, f"value of type {bt} has no method '{m}'")
        raise P4Error(e.loc, "this expression cannot be called")

    def lvalue(self, e: A.Expr, scope: Scope, what: str = "left-hand side") -> None:
        base = e
        while True:
            ro = base.readonly                 # an inlined in/directionless parameter (switch.frontend.inline marks it)
            if ro is not None:
                if what == "left-hand side":
                    raise P4Error(ro.at or e.loc, f"cannot assign to {ro.describe()}")
                raise P4Error(ro.at or e.loc, f"{what} must be writable, not {ro.describe()}")
            if not isinstance(base, (A.Member, A.Index, A.Slice)):
                break
            base = base.expr
        base = e
        while isinstance(base, (A.Member, A.Index, A.Slice)):
            if isinstance(base, A.Member) and isinstance(base.expr.type, ir.StackT) and base.name in ("size", "lastIndex"):
                raise P4Error(e.loc, f"{what} is not assignable")
            if isinstance(base, A.Member) and isinstance(base.expr.type, ir.StackT) and base.name == "last":
                # P4-16 6.7 lists hs.last among the l-values, but p4c's type checker makes only hs.next one
                # (typeCheckExpr.cpp): "Expression hs.last.f cannot be the target of an assignment"
                raise P4Error(e.loc, f"{what} is not assignable: a header stack's 'last' element is read-only in "
                                     f"p4c, which refuses the write ('cannot be the target of an assignment'); "
                                     f"write the element by its index")
            base = base.expr
        if isinstance(base, A.Default):
            return
        if not isinstance(base, A.Name) or not isinstance(base.ref, Sym):
            raise P4Error(e.loc, f"{what} is not assignable")
        s = base.ref
        if s.kind == "var":
            return
        if s.kind == "param":
            if s.direction in ("out", "inout"):
                return
            raise P4Error(e.loc, f"cannot assign to '{s.name}': it is an 'in' parameter" if s.direction == "in"
                          else f"cannot assign to '{s.name}': parameter without direction is read-only")
        if s.kind == "aparam":
            # p4c: "Expression v cannot be the target of an assignment" ("Read-only value used for out/inout
            # parameter" as an argument); every parameter an action keeps here is 'in' or directionless
            ro = A.ReadOnlyParam(s.name, s.direction, s.owner)
            if what == "left-hand side":
                raise P4Error(e.loc, f"cannot assign to {ro.describe()}")
            raise P4Error(e.loc, f"{what} must be writable, not {ro.describe()}")
        if s.kind == "const":
            raise P4Error(e.loc, f"cannot assign to constant '{s.name}'")
        raise P4Error(e.loc, f"{what} is not assignable")

    # ---- statements ---------------------------------------------------------------------------
    def stmt(self, s: A.Stmt, scope: Scope, ctx: Ctx) -> None:
        if isinstance(s, A.Block):
            inner = Scope(scope)
            for x in s.stmts:
                self.stmt(x, inner, ctx)
        elif isinstance(s, A.Assign):
            lt = self.expr(s.lhs, scope)
            self.lvalue(s.lhs, scope)
            self.expr(s.rhs, scope, lt)
            self.assignable(lt, s.rhs, s.rhs.loc)
        elif isinstance(s, A.CallStmt):
            self.call(s.call, scope, ctx)
            s.call.type = VOID
        elif isinstance(s, A.If):
            c = self.expr(s.cond, scope)
            if not isinstance(c, ir.BoolT):
                raise P4Error(s.cond.loc, f"if condition must be bool, not {c}")
            self.stmt(s.then, Scope(scope), ctx)
            if s.other is not None:
                self.stmt(s.other, Scope(scope), ctx)
        elif isinstance(s, A.Switch):
            if ctx.kind == "parser":
                raise P4Error(s.loc, "switch is not allowed in a parser (P4-16 13.4)")
            if ctx.action is not None:
                raise P4Error(s.loc, "switch is not allowed inside actions")
            t = self.call(s.expr.expr, scope, ctx) if isinstance(s.expr, A.Member) and isinstance(s.expr.expr, A.Call) else None
            if t is not None:
                s.expr.expr.type = t
                s.expr.type = self.member(s.expr, scope)
            else:
                self.expr(s.expr, scope)
            if not isinstance(s.expr.type, ir.ActionEnumT):
                self.value_switch(s, scope, ctx)
                return
            table = s.expr.type.table
            names = {a.name: a for a in table.actions}
            names.update({a.fqname: a for a in table.actions})
            for c in s.cases:
                for lab in c.labels:
                    if isinstance(lab, A.Default):
                        continue
                    if not isinstance(lab, A.Name) or lab.name not in names:
                        raise P4Error(lab.loc, f"'{getattr(lab, 'name', '?')}' is not an action of table {table.name}")
                    lab.ref = names[lab.name]
                if c.body is not None:
                    self.stmt(c.body, Scope(scope), ctx)
        elif isinstance(s, A.VarDecl):
            t = self.resolve_type(s.type, scope)
            if isinstance(t, (ir.ExternT, ir.IntLit, ir.BlockT)):
                raise P4Error(s.loc, f"cannot declare a variable of type {t}")
            if s.init is not None:
                self.expr(s.init, scope, t)
                self.assignable(t, s.init, s.init.loc)
            if s.arg_for is not None:           # a list argument of a function's directionless parameter
                self.const_argument(s.init, s.arg_for, scope)
            sym = Sym("var", s.name, t, s.loc, s)
            s.sym = sym
            self.locals_all.append(sym)
            scope.declare(sym, s.name, s.loc)
        elif isinstance(s, A.ConstDecl):
            t = self.resolve_type(s.type, scope)
            self.expr(s.init, scope, t)
            self.assignable(t, s.init, s.init.loc)
            if s.arg_for is not None:
                self.const_argument(s.init, s.arg_for, scope)
            value = self.const_eval(s.init, scope)
            scope.declare(Sym("const", s.name, t, s.loc, s, value=value), s.name, s.loc)
        elif isinstance(s, (A.Exit, A.Return)) and ctx.kind == "parser":
            # P4-16 12.4: parser statements are assignments, calls, declarations, blocks and conditionals;
            # a state ends only with its transition
            what = "exit" if isinstance(s, A.Exit) else "return"
            raise P4Error(s.loc, f"'{what}' is not allowed in a parser (a state ends with its transition)")
        elif isinstance(s, A.For):
            if ctx.kind == "parser":
                raise P4Error(s.loc, "a for loop is not allowed in a parser (P4-16 1.2.4: controls and actions)")
            inner = Scope(scope)
            for x in s.init:
                self.stmt(x, inner, ctx)
            if s.cond is not None:
                c = self.expr(s.cond, inner)
                if not isinstance(c, ir.BoolT):
                    raise P4Error(s.cond.loc, f"for condition must be bool, not {c}")
            for x in s.update:
                self.stmt(x, inner, ctx)
            ctx.loops += 1
            try:
                self.stmt(s.body, Scope(inner), ctx)
            finally:
                ctx.loops -= 1
            if s.in_range and self.for_in is None:
                self.for_in = s
        elif isinstance(s, (A.Break, A.Continue)):
            if not ctx.loops:
                raise P4Error(s.loc, f"'{'break' if isinstance(s, A.Break) else 'continue'}' outside a for loop")
        elif isinstance(s, A.Exit):
            pass
        elif isinstance(s, A.Return):
            if s.expr is not None:
                raise P4Error(s.loc, "return with a value is only allowed in functions")
        elif isinstance(s, A.Empty):
            pass
        else:
            raise unsupported(type(s).__name__, s.loc)

    def const_argument(self, e: A.Expr, param: A.ReadOnlyParam, scope: Scope) -> None:
        """P4-16 6.8: the argument of a function's directionless parameter is known at compile time (each item
        of a list or structure argument); p4c: "argument used for directionless parameter must be a
        compile-time constant"."""
        if isinstance(e, A.ListExpr):
            for x in e.items:
                self.const_argument(x, param, scope)
            return
        try:
            self.const_eval(e, scope)
        except P4Error:
            raise P4Error(e.loc, f"the argument for directionless parameter '{param.name}' of {param.owner} "
                                 f"must be a compile-time constant") from None

    def value_switch(self, s: A.Switch, scope: Scope, ctx: Ctx) -> None:
        """P4-16 12.7: ``switch`` on a bit<W>, int<W>, enum or error value with compile-time labels; each
        label's value is kept in ``label.value`` for the code generator (``s.on_value`` marks the form)."""
        t = s.expr.type
        if isinstance(t, ir.ErrorT):
            # P4-16 1.2.x lists error among the switch types, but p4c's front end refuses it ("'switch' type can't
            # be error"); programs here must compile with p4c
            raise P4Error(s.expr.loc, "switch on an error value is refused by p4c ('switch' type can't be error): "
                                      "compare it with == in an if, or key a table on it")
        if not isinstance(t, (Bits, ir.EnumT)):
            raise P4Error(s.expr.loc, f"switch needs a bit<W>, int<W> or enum value (or an action_run), not {t}")
        s.on_value = True
        seen: dict = {}
        for i, c in enumerate(s.cases):
            for lab in c.labels:
                if isinstance(lab, A.Default):
                    if i != len(s.cases) - 1:
                        raise P4Error(lab.loc, "the default label of a switch must be the last one")
                    continue
                self.expr(lab, scope, t)
                self.assignable(t, lab, lab.loc)
                v = self.const_eval(lab, scope)
                v = wrap(v, t) if isinstance(t, Bits) else v
                if v in seen:
                    raise P4Error(lab.loc, f"duplicate switch label (same value as the label at {seen[v]})")
                seen[v] = lab.loc
                lab.value_v = v
            if c.body is not None:
                self.stmt(c.body, Scope(scope), ctx)
        if s.cases and s.cases[-1].body is None:
            raise P4Error(s.cases[-1].loc, "the last label of a switch needs a block")

    # ---- actions, tables, blocks ----------------------------------------------------------------
    def qualify(self, prefix: str, name: str, annots) -> str:
        a = A.annot(annots, "name")
        if a and a.args and isinstance(a.args[0], A.StrLit):
            n = a.args[0].value
            if n.startswith("."):
                return n[1:]
            return (prefix + "." if prefix else "") + n
        return (prefix + "." if prefix else "") + name

    def action(self, d: A.ActionDecl, scope: Scope, block: ir.BlockIR | None, prefix: str) -> ir.ActionIR:
        inner = Scope(scope)
        params = []
        in_params = []
        for p in d.params:
            t = self.resolve_type(p.type, scope)
            if p.direction and p.direction != "in":
                raise unsupported(f"action parameter with direction '{p.direction}'", p.loc)
            if p.direction and params:
                raise P4Error(p.loc, f"directional parameter '{p.name}' after directionless ones "
                                     "(directional action parameters come first)")
            if not isinstance(t, (Bits, ir.BoolT, ir.EnumT)):
                raise P4Error(p.loc, f"action parameter '{p.name}' must be bit<W>, int<W>, bool or a serializable enum, not {t}")
            sym = Sym("aparam", p.name, t, p.loc, p, direction=p.direction, owner=f"action {d.name}")
            (in_params if p.direction else params).append(sym)
            inner.declare(sym, p.name, p.loc)
        a = ir.ActionIR(d.name, self.qualify(prefix, d.name, d.annots), params, d, lower.annotations(d.annots),
                        len(self.actions), in_params)
        self.actions.append(a)
        self.stmt(d.body, inner, Ctx(block, "control", a))
        a.body = lower.block(d.body)
        return a

    def instance(self, d: A.Instance, scope: Scope, prefix: str) -> ir.InstanceIR:
        t = self.resolve_type(d.type, scope)
        if isinstance(t, ir.BlockT):
            raise unsupported("instantiating a parser or control inside another", d.loc)
        if not isinstance(t, ir.ExternT):
            raise P4Error(d.loc, f"cannot instantiate {t}")
        if t.decl.name not in SUPPORTED_EXTERNS:
            raise unsupported(f"extern {t.decl.name}", d.loc)
        ctors = [m for m in t.decl.methods if m.ret is None and _resolves(d.args, m.params)]
        if not ctors:
            raise P4Error(d.loc, f"no constructor of {t.decl.name} takes {len(d.args)} argument(s)")
        call = A.Call(d.loc, A.Name(d.loc, t.decl.name), [], d.args)
        self.bind_args(call, ctors[0].params, [], scope, dict(zip(t.decl.type_params, t.args)), what=t.decl.name)
        vals = [self.const_eval(a, scope) for a in d.args]
        if t.decl.name == "register" and t.args and not isinstance(t.args[0], (Bits, ir.BoolT)):
            raise unsupported(f"register of {t.args[0]} (BMv2 registers hold bit<W>, int<W> or bool)", d.loc)
        for prm, a, v in zip(ctors[0].params, d.args, vals):
            if prm.name == "size" and isinstance(v, int) and not 0 < v <= MAX_EXTERN_SIZE:
                raise P4Error(a.loc, f"{t.decl.name} size {v} out of range (1..{MAX_EXTERN_SIZE} on this target)")
        inst = ir.InstanceIR(d.name, self.qualify(prefix, d.name, d.annots), t.decl.name, t.args, vals,
                             lower.annotations(d.annots), d.loc, len(self.instances))
        self.instances.append(inst)
        return inst

    def select_keyset(self, k: A.Expr, kt: ir.Type, scope: Scope):
        """One element of a select case: a value set (``("vset", ValueSetIR)``) or a constant keyset."""
        if isinstance(k, A.Name):
            s = scope.lookup(k.name)
            if isinstance(s, Sym) and s.kind == "value_set":
                if not self.same(s.type, kt) and not (isinstance(kt, ir.EnumT) and kt.underlying == s.type):
                    raise P4Error(k.loc, f"value_set {k.name} holds {s.type} but the select key is {kt}")
                k.ref = s
                return ("vset", s.decl)
        return self.keyset_value(k, kt, "exact", scope)

    def keyset_value(self, k: A.Expr, kt: ir.Type, mk: str, scope: Scope):
        """Evaluate one keyset element of a const entry or a select case for key type ``kt``."""
        w = kt.width if isinstance(kt, (Bits, ir.BoolT, ir.EnumT)) else 32
        full = (1 << w) - 1

        def val(x):
            self.expr(x, scope, kt)
            if isinstance(x.type, ir.IntLit) and isinstance(kt, (Bits, ir.EnumT)):
                self.coerce(x, kt)
            v = self.const_eval(x, scope)
            if not isinstance(v, int):            # e.g. a match_kind name such as 'ternary'
                raise P4Error(x.loc, f"keyset value must be an integer constant, not {x.type}")
            return int(v) & full

        if isinstance(k, A.Default):
            return None
        if isinstance(k, A.Mask):
            v, m = val(k.value), val(k.mask)
            if mk == "lpm":                       # a prefix: the mask's leading ones (p4c-bm2-ss's prefix_length)
                plen = w - ((m ^ full) & full).bit_length()
                if m != full ^ ((1 << (w - plen)) - 1):
                    raise P4Error(k.loc, f"invalid mask for an lpm key: {m:#x} is not a prefix of {w} bits")
                return ("lpm", v & m, plen)
            return ("ternary", v & m, m)
        if isinstance(k, A.Range):
            return ("range", val(k.lo), val(k.hi))
        v = val(k)
        if mk == "lpm":
            return ("lpm", v, w)
        if mk == "ternary":
            return ("ternary", v, full)
        if mk == "range":
            return ("range", v, v)
        return ("exact", v)

    def table(self, d: A.TableDecl, scope: Scope, block: ir.BlockIR, prefix: str) -> ir.TableIR:
        keys, sel_keys = [], []
        for k in d.keys:
            kt = self.expr(k.expr, scope)
            if k.match_kind not in self.match_kinds.members:
                raise P4Error(k.loc, f"unknown match kind '{k.match_kind}'")
            if not isinstance(kt, (Bits, ir.BoolT, ir.EnumT, ir.ErrorT)):
                raise P4Error(k.loc, f"table key must be bit<W>, int<W>, bool, enum or error, not {kt}")
            na = A.annot(k.annots, "name")
            name = na.args[0].value if na and na.args and isinstance(na.args[0], A.StrLit) else self.expr_text(k.expr)
            # an error key matches the error's number (declaration order, core.p4's first) as a 32-bit field
            kir = ir.KeyIR(lower.expr(k.expr), k.match_kind, name, ir.bit_width(kt), lower.annotations(k.annots))
            (sel_keys if k.match_kind == "selector" else keys).append(kir)
        acts = []
        scopes = {}
        for ar in d.actions:
            s = scope.lookup(ar.name.lstrip("."))
            if not isinstance(s, Sym) or s.kind != "action":
                raise P4Error(ar.loc, f"unknown action '{ar.name}'")
            if s.decl.in_params:
                raise unsupported(f"action {s.decl.name} with directional parameters in a table's actions", ar.loc)
            acts.append(s.decl)
            scopes[s.decl.fqname] = ("DEFAULT_ONLY" if A.annot(ar.annots, "defaultonly") else
                                     "TABLE_ONLY" if A.annot(ar.annots, "tableonly") else "TABLE_AND_DEFAULT")
        if not d.has_actions:                     # p4c: "expected 'actions' property"
            raise P4Error(d.loc, f"table {d.name} has no 'actions' property (it may be empty: actions = {{ }})")
        # an empty list leaves the table NoAction, as its default only (below), as p4c does
        byname = {a.name: a for a in acts}

        def action_call(ar: A.ActionRef, what: str):
            a = byname.get(ar.name.lstrip("."))
            if a is None:
                raise P4Error(ar.loc, f"{what} '{ar.name}' is not in the actions of table {d.name}")
            args = A.resolve_args(ar.args or [], a.decl.params, ar.loc, f"action {a.name}")
            if len(args) != len(a.params):
                raise P4Error(ar.loc, f"action {a.name} expects {len(a.params)} argument(s), got {len(args)}")
            vals = []
            for x, p in zip(args, a.params):
                self.expr(x, scope, p.type)
                self.assignable(p.type, x, x.loc)
                vals.append(int(self.const_eval(x, scope)) & ((1 << p.type.width) - 1))
            return a, vals

        if d.default_action is not None:
            da, dargs = action_call(d.default_action, "default action")
            if scopes[da.fqname] == "TABLE_ONLY":
                raise P4Error(d.default_action.loc, f"action {da.name} is @tableonly and cannot be the default")
        else:
            na = self.globals.lookup("NoAction")
            if not isinstance(na, Sym) or na.decl not in acts:
                if na is None:
                    raise P4Error(d.loc, f"table {d.name} has no default_action and NoAction is not declared")
            da, dargs = na.decl, []
            if da not in acts:
                acts.append(da)
                scopes[da.fqname] = "DEFAULT_ONLY"
        size = 1024
        if d.size is not None:
            self.expr(d.size, scope)
            size = int(self.const_eval(d.size, scope))
            if not 0 < size <= MAX_TABLE_SIZE:
                raise P4Error(d.size.loc, f"table size {size} out of range (1..{MAX_TABLE_SIZE} on this target)")
        impl = None
        dc = dm = None
        for prop, ex in (("implementation", d.implementation), ("counters", d.counters), ("meters", d.meters)):
            if ex is None:
                continue
            if isinstance(ex, A.Call):  # inline constructor: implementation = action_selector(...)
                fake = A.Instance(ex.loc, A.TypeRef(ex.loc, "name", name=ex.func.name), ex.args, d.name + "_" + prop, [])
                inst = self.instance(fake, scope, prefix)
            else:
                self.expr(ex, scope)
                if not isinstance(ex, A.Name) or not isinstance(ex.ref, Sym) or ex.ref.kind != "instance":
                    raise P4Error(ex.loc, f"'{prop}' must name an extern instance")
                inst = ex.ref.decl
            inst.tables.append(None)
            want = {"implementation": ("action_profile", "action_selector"), "counters": ("direct_counter",),
                    "meters": ("direct_meter",)}[prop]
            if inst.extern not in want:
                raise P4Error(ex.loc, f"'{prop}' needs a {' or '.join(want)}, not {inst.extern}")
            if prop == "implementation":
                impl = inst
            elif prop == "counters":
                dc = inst
            else:
                dm = inst
        if sel_keys and (impl is None or impl.extern != "action_selector"):
            raise P4Error(d.loc, f"table {d.name} has selector keys but no action_selector implementation")
        t = ir.TableIR(d.name, self.qualify(prefix, d.name, d.annots), keys, sel_keys, acts, scopes, da, dargs,
                       d.const_default, size, None, d.const_entries, impl, dc, dm, lower.annotations(d.annots), d.loc,
                       len(self.tables))
        for inst in (impl, dc, dm):
            if inst is not None:
                inst.tables[inst.tables.index(None)] = t
        for p, ex in d.props.items():
            if p not in ("support_timeout", "psa_direct_counter", "psa_direct_meter", "largest_priority_wins",
                         "priority_delta"):
                raise unsupported(f"table property '{p}'", ex.loc)
        if d.entries is not None:
            if impl is not None:
                raise unsupported("entries in a table with an action profile", d.loc)
            ents = []
            seen: dict[tuple, Loc] = {}
            needs_prio = any(k.match_kind in ("ternary", "range", "optional") for k in keys)
            order = self.entry_order(d, needs_prio, scope)
            for pos, i in enumerate(order):
                en = d.entries[i]
                if len(en.keys) != len(keys):
                    raise P4Error(en.loc, f"entry has {len(en.keys)} key(s) but table {d.name} has {len(keys)}")
                vals = []
                for kx, kir in zip(en.keys, keys):
                    kt = kir.expr.type
                    bmv2_rules.check_entry_key(kx, kt, kir.match_kind)
                    vals.append(self.keyset_value(kx, kt, kir.match_kind, scope))
                a, args = action_call(en.action, "action")
                prio = None
                pa = A.annot(en.annots, "priority")
                if needs_prio:
                    # BMv2's order (p4c-bm2-ss: an entry's priority is its @priority or its position from 1 in
                    # the order entry_order gives; the lowest wins, the earlier of equal ones), as the P4Runtime
                    # priority BMv2 reports for it
                    prio = BMV2_MAX_PRIORITY - (self.entry_priority(pa, scope) if pa is not None else pos + 1)
                # the table's own key of an entry (runtime.Table.entry_key): the same twice is an error
                k = (tuple(vals), (prio or 0) if needs_prio else 0)
                if k in seen:
                    raise P4Error(en.loc, f"entry has the same key as the entry at {seen[k]}")
                seen[k] = en.loc
                ents.append(ir.EntryIR(vals, a, args, prio, en.loc))
            if len(ents) > size:
                raise P4Error(d.entries[size].loc, f"table {d.name} has {len(ents)} entries but its size is {size}")
            t.entries = ents
        self.tables.append(t)
        return t

    def entry_order(self, d: A.TableDecl, needs_prio: bool, scope: Scope) -> list[int]:
        """The order in which p4c-bm2-ss writes table ``d``'s entries (indexes into ``d.entries``), which gives
        each its BMv2 priority (its position, unless it has ``@priority``).  Without ``priority=`` that is the
        order written.  With it, p4c's EntryPriorities (P4-16 14.2.1.4) gives an entry without one the previous
        entry's priority minus ``priority_delta`` (plus, with ``largest_priority_wins = false``), refuses a first
        entry without one, and sorts entries out of priority order by priority (the winner first); p4c-bm2-ss
        then ignores the values and writes the positions.  p4c's sort (std::sort) keeps the written order of
        equal priorities for up to 16 entries (libstdc++'s insertion sort); beyond, equal priorities are refused
        in a list that needs sorting."""
        n = len(d.entries)
        explicit = [en for en in d.entries if en.priority is not None]
        if not explicit:
            return list(range(n))
        if d.const_entries:                        # p4c's EntryPriorities, its checks in its order
            raise P4Error(explicit[0].priority.loc, "a table with const entries cannot have priorities "
                                                    "(priority=); use @priority(n) after the action")
        largest, delta = True, 1
        if "largest_priority_wins" in d.props:
            ex = d.props["largest_priority_wins"]
            self.expr(ex, scope)
            largest = self.const_eval(ex, scope)
            if not isinstance(largest, bool):
                raise P4Error(ex.loc, "largest_priority_wins must be a boolean expression (p4c's words)")
        if "priority_delta" in d.props:
            ex = d.props["priority_delta"]
            self.expr(ex, scope)
            delta = self.const_eval(ex, scope)
            if isinstance(delta, bool) or not isinstance(delta, int) or not 0 <= delta < 1 << 32:
                raise P4Error(ex.loc, "priority_delta must be a positive value (p4c: an unsigned int; 0 gives "
                                      "every entry without priority= the one before it)")
        if not needs_prio:
            at = d.keys[0].loc if d.keys else d.loc
            raise P4Error(at, f"table {d.name}'s key match types need no priorities, but entries give some "
                              "(priority=): p4c's 'key match type does not require priorities, but some are "
                              "specified'")
        if d.entries[0].priority is None:
            raise P4Error(d.entries[0].loc, "the first entry must have a priority (priority=) when others have "
                                            "one (p4c: 'entry must have a priority')")
        prios: list[int] = []
        cur = 0
        for en in d.entries:
            if en.priority is not None:
                self.expr(en.priority, scope)
                v = self.const_eval(en.priority, scope)
                if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 1 << 64:
                    raise P4Error(en.priority.loc, "an entry priority must be a compile-time integer from 0 to "
                                                   "2**64 - 1")
                cur = v
            prios.append(cur)
            cur = cur - delta if largest else cur + delta
            if not 0 <= cur < 1 << 64:             # p4c computes the next one after every entry, the last too
                raise P4Error(d.loc, f"table {d.name}: overflow in the entries' priority computation (p4c: "
                                     f"'Overflow in priority computation'), below 0 or above 2**64 - 1")
        order = sorted(range(n), key=lambda i: -prios[i] if largest else prios[i])
        if n > 16 and order != list(range(n)) and len(set(prios)) < n:
            raise unsupported(f"equal entry priorities among more than 16 entries out of priority order (p4c sorts "
                              f"them with std::sort, which may reorder equal ones) in table {d.name}", d.loc)
        return order

    def entry_priority(self, pa: A.Annotation, scope: Scope) -> int:
        """The value of an entry's ``@priority(n)`` (BMv2's priority: the lowest wins): a compile-time integer
        from 0 to BMV2_MAX_PRIORITY."""
        if len(pa.args) != 1 or not isinstance(pa.args[0], A.Expr):
            raise P4Error(pa.loc, "@priority takes one compile-time integer")
        self.expr(pa.args[0], scope)
        v = self.const_eval(pa.args[0], scope)
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= BMV2_MAX_PRIORITY:
            raise P4Error(pa.loc, f"@priority must be an integer from 0 to {BMV2_MAX_PRIORITY}")
        return v

    def expr_text(self, e: A.Expr) -> str:
        if isinstance(e, A.Name):
            return e.name
        if isinstance(e, A.Member):
            return f"{self.expr_text(e.expr)}.{e.name}"
        if isinstance(e, A.Index):
            return f"{self.expr_text(e.expr)}[{self.expr_text(e.index)}]"
        if isinstance(e, A.Lit):
            return str(e.value)
        if isinstance(e, A.Slice):
            return f"{self.expr_text(e.expr)}[{e.hi_v}:{e.lo_v}]"
        if isinstance(e, A.Call) and isinstance(e.func, A.Member):
            return f"{self.expr_text(e.func)}()"
        return "key"

    def block(self, d) -> ir.BlockIR:
        kind = "parser" if isinstance(d, A.ParserDecl) else "control"
        self.block_kind = kind
        scope = Scope(self.globals)
        params = []
        for p in d.params:
            t = self.resolve_type(p.type, scope)
            sym = Sym("param", p.name, t, p.loc, p, direction=p.direction)
            params.append(sym)
            scope.declare(sym, p.name, p.loc)
        b = ir.BlockIR(kind, d.name, d, params)
        ctx = Ctx(b, kind)
        for loc in d.locals:
            if isinstance(loc, A.ActionDecl):
                a = self.action(loc, scope, b, d.name)
                b.actions.append(a)
                scope.declare(Sym("action", loc.name, None, loc.loc, a), loc.name, loc.loc)
            elif isinstance(loc, A.TableDecl):
                t = self.table(loc, scope, b, d.name)
                b.tables.append(t)
                scope.declare(Sym("table", loc.name, ir.TableT(t), loc.loc, t), loc.name, loc.loc)
            elif isinstance(loc, A.ValueSetDecl):
                t = self.resolve_type(loc.type, scope)
                if not isinstance(t, Bits):
                    raise unsupported(f"value_set of {t} (only bit<W>/int<W>)", loc.type.loc)
                self.expr(loc.size, scope)
                size = int(self.const_eval(loc.size, scope))
                if not 0 < size <= MAX_TABLE_SIZE:
                    raise P4Error(loc.size.loc, f"value_set size {size} out of range (1..{MAX_TABLE_SIZE})")
                vs = ir.ValueSetIR(loc.name, self.qualify(d.name, loc.name, loc.annots), t.width, size,
                                   lower.annotations(loc.annots), loc.loc, len(self.value_sets))
                self.value_sets.append(vs)
                scope.declare(Sym("value_set", loc.name, t, loc.loc, vs), loc.name, loc.loc)
            elif isinstance(loc, A.Instance):
                inst = self.instance(loc, scope, d.name)
                b.instances.append(inst)
                scope.declare(Sym("instance", loc.name, self.resolve_type(loc.type, scope), loc.loc, inst),
                              loc.name, loc.loc)
            else:
                self.stmt(loc, scope, ctx)
                if isinstance(loc, A.VarDecl):
                    b.locals.append(loc.sym)
                    b.inits += (lower.stmt(loc),)
        if kind == "parser":
            names = {s.name: s for s in d.states}
            if "start" not in names:
                raise P4Error(d.loc, f"parser {d.name} has no 'start' state")
            seen = set()
            for st in d.states:
                if st.name in seen:
                    raise P4Error(st.loc, f"state '{st.name}' is declared twice")
                if st.name in ("accept", "reject"):
                    raise P4Error(st.loc, f"state '{st.name}' is reserved")
                seen.add(st.name)
            for st in d.states:
                inner = Scope(scope)
                for x in st.stmts:
                    self.stmt(x, inner, ctx)
                tr = st.transition
                if tr is None:
                    raise P4Error(st.loc, f"state '{st.name}' has no transition statement")
                targets = [tr.state] if tr.state else [c.state for c in tr.cases]
                locs = [tr.loc] if tr.state else [c.loc for c in tr.cases]
                for tname, tl in zip(targets, locs):
                    if tname not in names and tname not in ("accept", "reject"):
                        raise P4Error(tl, f"no parser state named '{tname}'")
                if tr.select is not None:
                    kts = [self.expr(x, inner) for x in tr.select]
                    for x, kt in zip(tr.select, kts):
                        if not isinstance(kt, (Bits, ir.BoolT, ir.EnumT, ir.ErrorT)):
                            raise P4Error(x.loc, f"cannot select on a value of type {kt}")
                    for c in tr.cases:
                        ks = c.keyset.items if isinstance(c.keyset, A.ListExpr) else [c.keyset]
                        if len(ks) == 1 and isinstance(ks[0], A.Default):
                            ks = ks * len(kts)
                        if len(ks) != len(kts):
                            raise P4Error(c.loc, f"keyset has {len(ks)} element(s) but select has {len(kts)}")
                        c.values = [self.select_keyset(k, kt, inner) for k, kt in zip(ks, kts)]
            b.states = tuple(lower.state(st) for st in d.states)
        else:
            self.stmt(d.apply, Scope(scope), ctx)
            bmv2_rules.check_table_sites(d.apply)
            for decl, top in d.inlined_actions or ():
                # P4Info lists them as p4c does, with no parameters (p4c binds every argument of a direct call)
                b.inlined_actions.append((ir.ActionIR(decl.name, self.qualify("" if top else d.name, decl.name,
                                                                               decl.annots),
                                                      [], decl, lower.annotations(decl.annots)), top))
            b.apply = lower.stmt(d.apply)
        return b

    def field_lists(self, meta: ir.Type) -> dict[int, list[str]]:
        """v1model field lists: index -> the user metadata fields annotated ``@field_list(index, ...)``,
        which resubmit/recirculate/clone ``_preserving_field_list(index)`` carry over."""
        out: dict[int, list[str]] = {}
        for d in self.prog.decls:
            if isinstance(d, A.HeaderDecl) and d.is_struct and d.name == getattr(meta, "name", None):
                for f in d.fields:
                    a = A.annot(f.annots, "field_list")
                    if a is not None:
                        for i in _field_list_ids(a):
                            out.setdefault(i, []).append(f.name)
        return out

    # ---- main -------------------------------------------------------------------------------
    def bind_main(self) -> ir.ProgramIR:
        m = self.main
        pk = self.globals.lookup(m.type.name)
        if not isinstance(pk, Sym) or not isinstance(pk.decl, A.BlockTypeDecl) or pk.decl.kind != "package":
            raise P4Error(m.loc, f"'{m.type.name}' is not a package")
        if pk.name != "V1Switch":
            raise unsupported(f"package {pk.name} (only V1Switch)", m.loc)
        if len(m.args) != 6:
            raise P4Error(m.loc, f"V1Switch expects 6 arguments, got {len(m.args)}")
        roles = ["parser", "verify", "ingress", "egress", "compute", "deparser"]
        want = ["parser", "control", "control", "control", "control", "control"]
        blocks = {}
        for role, kind, a in zip(roles, want, m.args):
            if not (isinstance(a, A.Call) and isinstance(a.func, A.Name) and not a.args):
                raise P4Error(a.loc, f"argument for {role} must be an instantiation such as MyParser()")
            s = self.globals.lookup(a.func.name)
            if not isinstance(s, Sym) or s.kind != "block":
                raise P4Error(a.loc, f"unknown parser or control '{a.func.name}'")
            d = s.decl
            if d.ctor_params:   # a sub-parser/sub-control's are bound by the inliner; V1Switch's blocks take none
                raise unsupported(f"constructor parameters of {d.name} passed to V1Switch", d.ctor_params[0].loc)
            if (kind == "parser") != isinstance(d, A.ParserDecl):
                raise P4Error(a.loc, f"'{d.name}' is a {'parser' if isinstance(d, A.ParserDecl) else 'control'}, "
                                     f"but V1Switch expects a {kind} for {role}")
            if d.name in {b.name for b in blocks.values()}:
                raise unsupported("the same control instantiated twice in V1Switch", a.loc)
            blocks[role] = self.block(d)
        # parameter shapes, as V1Switch's declaration requires
        shapes = {"parser": 4, "verify": 2, "ingress": 3, "egress": 3, "compute": 2, "deparser": 2}
        for role, b in blocks.items():
            if len(b.params) != shapes[role]:
                raise P4Error(b.decl.loc, f"{role} {b.name} must have {shapes[role]} parameters, has {len(b.params)}")
        p = blocks["parser"].params
        H, M, SM = p[1].type, p[2].type, p[3].type
        if not isinstance(H, ir.StructT):
            raise P4Error(p[1].loc, f"the headers type must be a struct, not {H}")
        for role, b in blocks.items():
            if role == "deparser":
                types = [b.params[1].type]
                exp = [H]
            elif role == "parser":
                continue
            else:
                types = [x.type for x in b.params]
                exp = [H, M, SM][:len(types)]
            for x, t, et in zip(b.params[-len(types):] if role == "deparser" else b.params, types, exp):
                if t is not et:
                    raise P4Error(x.loc, f"parameter '{x.name}' of {b.name} has type {t}, but V1Switch needs {et}")
        ctrl = []
        for name, t in self.header_types.items():
            a = A.annot(t.decl_annots, "controller_header") if hasattr(t, "decl_annots") else None
        for d in self.prog.decls:
            if isinstance(d, A.HeaderDecl) and not d.is_struct:
                a = A.annot(d.annots, "controller_header")
                if a and a.args and isinstance(a.args[0], A.StrLit):
                    if self.header_types[d.name].varbit is not None:
                        raise unsupported("a varbit field in a @controller_header header", d.loc)
                    ctrl.append((a.args[0].value, self.header_types[d.name], lower.annotations(d.annots)))
        return ir.ProgramIR(self.path, H, M, SM, blocks, self.actions, self.tables, self.instances,
                            list(self.digests.values()), self.errors, self.header_types, ctrl,
                            value_sets=self.value_sets, field_lists=self.field_lists(M))


def _field_list_ids(a: A.Annotation) -> list[int]:
    out = []
    for x in a.args:
        if not isinstance(x, A.Lit):
            raise P4Error(a.loc, "@field_list takes integer constants")
        out.append(x.value)
    return out


def _resolves(args: list[A.Expr], params: list[A.Param]) -> bool:
    """Whether ``args`` (named, positional, with defaults) fit ``params``: picks among overloads."""
    try:
        return len(A.resolve_args(args, params, None, "")) == len(params) == max(len(args), len(params))
    except P4Error:
        return False


def check(prog: A.Program, path: str) -> ir.ProgramIR:
    """Resolve names and types of ``prog``; returns the typed IR or raises P4Error."""
    return Checker(prog, path).run()


def load_ir(path: str, include_dirs: list[str] | None = None, defines: dict | None = None) -> ir.ProgramIR:
    """Preprocess, parse and check a P4 file."""
    from .inline import inline
    from .parser import parse
    from .preprocess import preprocess
    try:
        return check(inline(parse(preprocess(path, include_dirs, defines))), path)
    except RecursionError:
        raise P4Error(Loc(path, 1, 1), "program nesting too deep") from None

"""Analyses of the typed IR (:mod:`switch.midend.tir`) that the code generator (:mod:`switch.backend.codegen`) bases its
choices on, kept apart from the code it prints: def-use facts about variables (is a variable's initial value
ever read?), whether a body holds a ``return`` or ``exit``, the shape of a parser's state graph (loop-free? how
many state copies would one straight-line function need?) and which storage the program never reads
(:func:`dead_storage`).  Each is a pure function of the IR.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
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
    """True when no state of ``states`` (a parser's :class:`~switch.midend.tir.State` list) can be reached again
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


# ---- storage the fused pipeline reads ------------------------------------------------------------------
def storage_roots(role: str, params: list[Sym]) -> dict[Sym, str]:
    """v1model: which parameters of the V1Switch block playing ``role`` are the packet's headers (``"H"``), its
    user metadata (``"M"``) and ``standard_metadata`` (``"SM"``); every block sees the same three."""
    if role == "parser":
        return {params[1]: "H", params[2]: "M", params[3]: "SM"}
    if role == "deparser":
        return {params[1]: "H"}
    return dict(zip(params, ("H", "M", "SM")))


#: the blocks in the order the fused pipeline runs (and the code generator generates) them
ROLES = ("parser", "verify", "ingress", "egress", "compute", "deparser")

#: per extern function or method, the positions of its out arguments
_OUT_ARGS = {"hash": (0,), "random": (0,), "update_checksum": (2,), "update_checksum_with_payload": (2,),
             ("register", "read"): (0,), ("meter", "execute_meter"): (1,), ("direct_meter", "read"): (0,)}


@dataclass(eq=False)
class StorageFacts:
    """What the fused pipeline (``Gen(fuse=True)``) reads, found on the IR before any code is generated.

    Storage is named independently of slot numbers: ``(root, offset)``, ``root`` one of ``"H"``, ``"M"``,
    ``"SM"`` (see :func:`storage_roots`) or a local variable's :class:`~switch.midend.ir.Sym`, ``offset`` the slot
    within it (:mod:`switch.midend.ir` layout); ``("off", root, offset)`` is where the header at ``(root, offset)``
    was extracted in the packet.  The code generator does not compute what :meth:`is_read` denies (the parser
    unpacks such fields into ``_``), and follows the two choices made here that decide what is read:

    * ``pristine``: headers only ever written by ``extract``; the deparser emits their received bytes, so it
      reads only their validity and offset, not their fields;
    * ``raw_csum``: csum16 field lists (:class:`~switch.midend.tir.List` nodes) that are fields of one such header not
      written before the checksum is computed; the sum is taken over the received bytes, reading the header's
      validity, its offset and the left-out fields (``raw_csum[node]``: their indexes in the header).
    """
    read: set = field(default_factory=set)
    pristine: set = field(default_factory=set)
    raw_csum: dict = field(default_factory=dict)

    def is_read(self, key) -> bool:
        return key in self.read


def storage_facts(prog: ir.ProgramIR) -> StorageFacts:
    """The storage the fused pipeline of ``prog`` reads (see :class:`StorageFacts`)."""
    return _Reads(prog).run()


class _Reads:
    """One walk over the program in the fused pipeline's order, actions walked where tables and direct calls
    run them (the code generator inlines them there), recording reads, non-extract writes so far, extracted
    headers, csum16 candidates and emitted headers."""

    def __init__(self, prog: ir.ProgramIR):
        self.prog = prog
        self.roots: dict[Sym, str] = {}
        for role in ROLES:
            self.roots.update(storage_roots(role, prog.blocks[role].params))
        self.read: set = set()
        self.written: set = set()        # written other than by extract, so far in the walk
        self.extracted: set = set()      # headers extracted whole (no varbit field) by the parser
        self.emitted: list = []          # (key, header type) of every header the deparser emits
        self.raw_ok: dict = {}           # csum16 list -> omitted field indexes, while every visit allows it
        self.raw_bad: set = set()        # csum16 lists some visit could not sum from the received bytes
        self.raw_fields: dict = {}       # csum16 list -> the reads it makes when summed field by field

    def sm(self, name: str) -> tuple:
        return ("SM", self.prog.sm_type.offset(name))

    def run(self) -> StorageFacts:
        p = self.prog
        par = p.blocks["parser"]
        for d in par.inits:
            self.stmt(d)
        for st in par.states:
            for x in st.stmts:            # (not a block: every declaration gets its initial value)
                self.stmt(x)
            for x in st.transition.select:
                self.expr(x)
        self.written.add(self.sm("parser_error"))
        for role in ROLES[1:]:
            b = p.blocks[role]
            for d in b.inits:
                self.stmt(d)
            self.stmt(b.apply)
        # the glue reads these after ingress/egress (multicast group, queue, drop test)
        self.read |= {self.sm("priority"), self.sm("mcast_grp"), self.sm("egress_spec")}
        pristine = set()
        for key, t in self.emitted:
            if key in self.extracted and not self.any_written(key, t):
                pristine.add(key)
                self.read |= {key, ("off",) + key}
            else:
                self.read.add(key)
                self.fields_at(key, t)
        for node in self.raw_bad:
            self.read |= self.raw_fields.get(node, set())
        raw = {n: om for n, om in self.raw_ok.items() if n not in self.raw_bad}
        return StorageFacts(self.read, pristine, raw)

    # ---- storage of expressions
    def addr(self, e) -> tuple | None:
        """The storage key of an addressable expression with a fixed place, else None."""
        if isinstance(e, T.Var):
            s = e.sym
            if s.kind not in ("var", "param"):
                return None
            return (self.roots.get(s, s), 0)
        if isinstance(e, T.Member):
            bt = e.expr.type
            if isinstance(bt, (ir.HeaderT, ir.StructT)):
                a = self.addr(e.expr)
                return None if a is None else (a[0], a[1] + bt.offset(e.name))
            return None
        if isinstance(e, T.Index) and isinstance(e.index, T.Const):
            a = self.addr(e.expr)
            return None if a is None else (a[0], a[1] + 1 + int(e.index.value) * e.expr.type.elem.slots)
        return None

    def span(self, key: tuple, t: ir.Type) -> list[tuple]:
        return [(key[0], key[1] + i) for i in range(t.slots)]

    def any_written(self, key: tuple, t: ir.Type) -> bool:
        return any(k in self.written for k in self.span(key, t))

    def read_all(self, e) -> None:
        """Every slot of ``e``'s value is read (or, without a fixed place, whatever it names)."""
        a = self.addr(e)
        if a is None:
            self.expr(e)
        else:
            self.read.update(self.span(a, e.type))

    def write(self, e) -> None:
        if isinstance(e, T.DontCare):
            return
        if isinstance(e, T.Slice):              # a slice assignment keeps the other bits: reads its base
            self.read_all(e.expr)
            e = e.expr
        a = self.addr(e)
        if a is None:
            self.expr(e)
        else:
            self.written.update(self.span(a, e.type))

    def expr(self, e) -> None:
        if isinstance(e, (T.Const, T.DontCare)):
            return
        if isinstance(e, T.Var):
            if e.sym.kind != "aparam":
                self.read_all_scalar(e)
            return
        if isinstance(e, T.Member):
            bt = e.expr.type
            if isinstance(bt, ir.HeaderT) and is_lookahead(e.expr):
                return
            if isinstance(bt, ir.StackT):
                if e.name == "lastIndex":
                    self.read_all_scalar(e.expr)
                elif e.name != "size":
                    self.read_all(e.expr)
                return
            if isinstance(bt, ir.ApplyResultT):
                self.expr(e.expr)
                return
            self.read_all_scalar(e)
            return
        if isinstance(e, T.Index):
            self.expr(e.index)
            self.read_all_scalar(e)
            return
        if isinstance(e, T.Binary) and e.op in ("==", "!=") and \
                isinstance(e.left.type, (ir.HeaderT, ir.StructT, ir.StackT)):
            self.read_all(e.left)
            self.read_all(e.right)
            return
        if isinstance(e, T.Call):
            self.call(e)
            return
        for x in children(e):
            self.expr(x)

    def read_all_scalar(self, e) -> None:
        """The one slot a scalar read of ``e`` reads (or everything, when its place is not fixed)."""
        a = self.addr(e)
        if a is None:
            for x in children(e):
                self.read_all(x)
        else:
            self.read.add(a)

    def fields(self, e) -> None:
        """Reads of ``e`` serialised (hash, checksum, digest data): a header's or struct's fields, not the
        validity of the headers in it."""
        if isinstance(e, T.List):
            for x in e.items:
                self.fields(x)
        elif isinstance(e.type, (ir.HeaderT, ir.StructT)) and self.addr(e) is not None:
            self.fields_at(self.addr(e), e.type)
        else:
            self.expr(e)

    def fields_at(self, key: tuple, t: ir.Type) -> None:
        for n, ft in t.fields:
            k = (key[0], key[1] + t.offset(n))
            if isinstance(ft, (ir.HeaderT, ir.StructT)):
                self.fields_at(k, ft)
            elif isinstance(ft, ir.StackT):
                for i in range(ft.size):
                    self.fields_at((k[0], k[1] + 1 + i * ft.elem.slots), ft.elem)
            else:
                self.read.add(k)

    # ---- statements
    def body(self, stmts) -> None:
        for j, x in enumerate(stmts):
            if isinstance(x, T.VarDecl) and x.init is None and set_before_use(stmts[j + 1:], x.sym):
                continue                  # gets no initial value (Gen.stmt)
            self.stmt(x)

    def stmt(self, s) -> None:
        if isinstance(s, T.Block):
            self.body(s.stmts)
        elif isinstance(s, T.Assign):
            self.assign(s.lhs, s.rhs)
        elif isinstance(s, T.CallStmt):
            self.call(s.call)
        elif isinstance(s, T.VarDecl):
            if s.init is not None:
                self.assign(T.Var(loc=s.loc, type=s.sym.type, sym=s.sym), s.init)
            else:
                self.written.update(self.span((s.sym, 0), s.sym.type))
        else:
            for x in children(s):
                (self.expr if isinstance(x, T.Expr) else self.stmt)(x)

    def assign(self, lhs, rhs) -> None:
        t = lhs.type
        if isinstance(t, (ir.HeaderT, ir.StructT, ir.StackT)):
            self.assign_value(rhs, t)
        else:
            self.expr(rhs)
        self.write(lhs)

    def assign_value(self, rhs, t: ir.Type) -> None:
        if isinstance(rhs, T.List) and isinstance(t, (ir.HeaderT, ir.StructT)):
            for (_, ft), item in zip(t.fields, rhs.items):
                if isinstance(ft, (ir.HeaderT, ir.StructT, ir.StackT)):
                    self.assign_value(item, ft)
                else:
                    self.expr(item)
        elif not isinstance(t, (ir.HeaderT, ir.StructT, ir.StackT)) or is_lookahead(rhs):
            self.expr(rhs)
        else:
            self.read_all(rhs)

    def apply(self, t: ir.TableIR) -> None:
        self.read.add(self.sm("packet_length"))
        for k in t.keys + t.selector_keys:
            self.expr(k.expr)
        acts = t.runnable_actions(self.prog.actions)
        for a in acts:
            self.stmt(a.body)

    def call(self, c) -> None:
        k, a = c.kind, c.args
        if k == "table":
            self.apply(c.target)
        elif k == "action":
            for x in a:
                self.expr(x)
            self.stmt(c.target.body)
        elif k == "hdr":
            key = self.addr(c.recv)
            if c.target == "isValid":
                self.read_all_scalar(c.recv)
            elif key is not None:
                self.written.add(key)
        elif k == "union":
            key = self.addr(c.recv)
            if key is None:
                self.expr(c.recv)
            else:
                self.read |= {(key[0], key[1] + c.recv.type.offset(n)) for n, _ in c.recv.type.fields}
        elif k == "efunc":
            self.efunc(c)
        elif k == "method":
            self.method(c)
        else:                             # header stack shifts: not fused; count everything they name
            self.read_all(c.recv)
            self.write(c.recv)

    def efunc(self, c) -> None:
        n, a = c.target, c.args
        if n == "mark_to_drop":
            self.written |= {self.sm("egress_spec"), self.sm("mcast_grp")}
            return
        if n == "hash":
            self.expr(a[2])
            self.expr(a[4])
            if not (isinstance(a[1], T.Const) and a[1].member == "random"):
                self.fields(a[3])
        elif n == "digest":
            self.fields(a[1])
        elif n.startswith(("verify_checksum", "update_checksum")):
            self.expr(a[0])
            csum16 = isinstance(a[3], T.Const) and a[3].member == "csum16"
            if csum16 and not n.endswith("with_payload") and isinstance(a[1], T.List):
                self.csum16_list(a[1])
            else:
                self.fields(a[1])
            if n.startswith("verify"):
                self.expr(a[2])
                self.written.add(self.sm("checksum_error"))
        else:
            outs = _OUT_ARGS.get(n, ())
            for i, x in enumerate(a):
                if i not in outs:
                    self.expr(x)
        for i in _OUT_ARGS.get(n, ()):
            self.write(a[i])

    def method(self, c) -> None:
        ext, m = c.target
        a = c.args
        if ext == "packet_in":
            if m == "extract":
                key = self.addr(a[0])
                if len(a) > 1:
                    self.expr(a[1])
                if key is None:
                    self.read_all(a[0])
                    self.write(a[0])
                elif a[0].type.varbit is None:
                    self.extracted.add(key)
            elif m == "advance":
                self.expr(a[0])
            return
        if ext == "packet_out":
            if m == "emit":
                self.emit(a[0])
            return
        self.read.add(self.sm("packet_length"))
        outs = _OUT_ARGS.get((ext, m), ())
        for i, x in enumerate(a):
            if i not in outs:
                self.expr(x)
        for i in outs:
            self.write(a[i])

    def emit(self, e) -> None:
        key = self.addr(e)
        if key is None:
            self.read_all(e)
            return
        self.emit_at(key, e.type)

    def emit_at(self, key: tuple, t: ir.Type) -> None:
        if isinstance(t, ir.HeaderT):
            self.emitted.append((key, t))
        elif isinstance(t, ir.StructT):
            for n, ft in t.fields:
                self.emit_at((key[0], key[1] + t.offset(n)), ft)
        elif isinstance(t, ir.StackT):
            for i in range(t.size):
                self.emit_at((key[0], key[1] + 1 + i * t.elem.slots), t.elem)

    def csum16_list(self, e: T.List) -> None:
        """A csum16 field list: summed from the received bytes when it is fields of one extracted header, in
        order, not written so far, leaving out only whole 16-bit words at 16-bit positions (see
        :attr:`StorageFacts.raw_csum`); otherwise field by field."""
        saved, self.read = self.read, set()
        self.fields(e)
        self.raw_fields[e] = self.read
        self.read = saved
        omitted = self.raw_omitted(e)
        if omitted is None:
            self.raw_bad.add(e)
            self.read |= self.raw_fields[e]
            return
        base = self.addr(e.items[0].expr)
        self.raw_ok[e] = omitted
        self.read |= {base, ("off",) + base} | {(base[0], base[1] + 1 + i) for i in omitted}

    def raw_omitted(self, e: T.List) -> tuple | None:
        base, ht, idx = None, None, []
        for x in e.items:
            if not (isinstance(x, T.Member) and isinstance(x.expr.type, ir.HeaderT)):
                return None
            b = self.addr(x.expr)
            if b is None or (base is not None and b != base):
                return None
            base, ht = b, x.expr.type
            idx.append(ht.index[x.name])
        if not idx or idx != sorted(set(idx)) or ht.varbit is not None or base not in self.extracted \
                or ht.fixed_width % 16 or self.any_written(base, ht):
            return None
        pos, omitted = 0, []
        for i, (_, ft) in enumerate(ht.fields):
            if i not in idx:
                if pos % 16 or ft.width % 16:
                    return None
                omitted.append(i)
            pos += ft.width
        return tuple(omitted)

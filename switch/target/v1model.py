"""The embedded v1model switch: load a program, manage its tables and externs, inject packets
and collect what leaves, on a simulated clock.

Table entries are addressed the way P4Runtime addresses them (P4Info ids or names, match field
ids, byte-string or integer values, canonical forms on read-back), so the P4Runtime server of
part 2 can be a thin translation layer.  Packet path (BMv2 simple_switch order): parser ->
verifyChecksum -> ingress -> [multicast replication] -> traffic manager -> egress ->
computeChecksum -> deparser -> link (delay, loss).  A parser error does not drop the packet: as
in BMv2, ingress runs with ``standard_metadata.parser_error`` set (the error is also counted).
As in BMv2, ``egress_spec`` is 0 when egress starts (``egress_port`` holds the port), and egress
drops a packet by setting it to 511 (``mark_to_drop``).
"""
from __future__ import annotations

import random
from operator import itemgetter as _itemgetter
from typing import Any, Iterable

from ..backend import runtime
from ..backend.codegen import PRELUDE, Gen, NotFusable
from ..backend.p4info import P4InfoBuilder
from ..errors import Loc, P4Error, SwitchError
from ..frontend.check import load_ir
from ..midend import ir
from .tm import TrafficManager

#: v1model's HashAlgorithm members in declaration order (an action selector's first argument is the index)
SELECTOR_ALGOS = ["crc32", "crc32_custom", "crc16", "crc16_custom", "random", "identity", "csum16", "xor16"]

DROP_PORT = 511
# standard_metadata.instance_type values of BMv2 simple_switch
INSTANCE_NORMAL = 0
INSTANCE_INGRESS_CLONE = 1
INSTANCE_EGRESS_CLONE = 2
INSTANCE_RECIRC = 4
INSTANCE_REPLICATION = 5
INSTANCE_RESUBMIT = 6
#: resubmits or recirculations of one received packet before it is dropped ("resubmit_limit",
#: "recirculate_limit"): a program that always resubmits would otherwise loop for ever (BMv2 has no limit)
MAX_EXTRA_PASSES = 16


class Departure(tuple):
    """A packet that left the switch: egress port, bytes, time it left and time it arrives.

    A tuple ``(port, data, time_ns, arrival_ns)`` with those names as attributes: the generated
    code makes one per packet with a single C call, ``tuple.__new__(Departure, (...))``, where a
    class with an ``__init__`` would cost a Python call."""

    __slots__ = ()

    def __new__(cls, port: int, data: bytes, time_ns: int, arrival_ns: int):
        return tuple.__new__(cls, (port, data, time_ns, arrival_ns))

    port = property(_itemgetter(0), doc="egress port")
    data = property(_itemgetter(1), doc="the bytes sent")
    time_ns = property(_itemgetter(2), doc="when it left (simulated clock)")
    arrival_ns = property(_itemgetter(3), doc="when it arrives at the far end of the link")

    def __repr__(self) -> str:
        return f"Departure(port={self[0]}, data={self[1]!r}, time_ns={self[2]}, arrival_ns={self[3]})"


class _Env:
    __slots__ = ("now_ns", "payload")

    def __init__(self):
        self.now_ns = 0
        self.payload = b""


def to_int(v: Any, width: int | None = None) -> int:
    """Accept an int, P4Runtime bytes, a MAC 'aa:bb:..' or an IPv4 'a.b.c.d' string."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, (bytes, bytearray)):
        return int.from_bytes(v, "big")
    if isinstance(v, str):
        if v.count(".") == 3:
            return int.from_bytes(bytes(int(x) for x in v.split(".")), "big")
        if ":" in v:
            return int(v.replace(":", ""), 16)
        return int(v, 0)
    raise SwitchError("INVALID_ARGUMENT", f"cannot interpret value {v!r}")


def canonical_bytes(v: int, width: int) -> bytes:
    """P4Runtime canonical byte string: shortest big-endian form, at least one byte."""
    return v.to_bytes(max(1, (v.bit_length() + 7) // 8), "big")


class Switch:
    """One v1model switch running a P4 program."""

    def __init__(self, program: str | ir.ProgramIR, *, priority_queues: int = 1, queue_capacity: int = 64,
                 seed: int = 0, include_dirs: list[str] | None = None, mcast_groups: dict | None = None,
                 fast_paths: bool = True, fuse: bool = True):
        self.ir = program if isinstance(program, ir.ProgramIR) else load_ir(program, include_dirs)
        self.p4info = P4InfoBuilder(self.ir).build()
        self.ids = _Ids(self.p4info)
        self.rng = random.Random(seed)
        self.tm = TrafficManager(priority_queues, queue_capacity, seed + 1)
        self.env = _Env()
        self.now_ns = 0
        self.outputs: list[Departure] = []
        self.digests: list[tuple[int, tuple]] = []
        self.parser_errors = 0
        self.mcast: dict[int, list[tuple[int, int]]] = {k: list(v) for k, v in (mcast_groups or {}).items()}
        # clone (mirroring) sessions: id -> ([(egress port, egress_rid)], truncate length or 0)
        self.clone_sessions: dict[int, tuple[list[tuple[int, int]], int]] = {}
        self._deferred: list = []         # E2E clones and recirculations, run after the egress pass
        self.fast_paths = fast_paths      # False: the plain reference code, for differential tests
        # fused pipeline functions over local variables (with fast paths, when the program allows;
        # see docs/switch-target.md); False keeps the list-mode fast code, for differential tests
        self.fuse = fuse
        self.fused = False
        self.not_fused_because = ""
        try:
            self._build()
        except (RecursionError, SyntaxError) as e:
            # nesting beyond what the generated Python may hold (CPython allows 100 indentation levels and 200
            # nested parentheses): a limit of this target, reported at the program like any compile error
            why = "recursion limit" if isinstance(e, RecursionError) else e.msg
            raise P4Error(Loc(self.ir.path, 1, 1), f"program nested too deeply for this target ({why})") from None

    # ---- construction ---------------------------------------------------------------------------
    def _build(self) -> None:
        p = self.ir
        gen = Gen(p, self.fast_paths, self.fuse)
        try:
            src = gen.generate()
        except NotFusable as x:           # e.g. header stacks: the list-mode fast code instead
            self.not_fused_because = str(x)
            gen = Gen(p, self.fast_paths, False)
            src = gen.generate()
        self.fused = gen.fused
        self.source = src
        self.gen = gen
        ns: dict[str, Any] = {"RNG": self.rng, "ENV": self.env, "DIGESTS": self.digests,
                              "PACKET_TOO_SHORT": p.errors.members["PacketTooShort"],
                              "PARSER_INVALID_ARGUMENT": p.errors.members["ParserInvalidArgument"],
                              "_ser": runtime.serialise,
                              # the glue of the fused functions (Gen.generate_fused)
                              "SW": self, "TM": self.tm, "ENQUEUE": self.tm.enqueue, "TM_DROP": self.tm.drop,
                              "PORTS": self.tm.ports, "OUTPUTS": self.outputs, "Departure": Departure,
                              "_tuple_new": tuple.__new__, "QMAP": self.tm.qmap, "DIRTY": self.tm._dirty}
        for n, f in runtime.HASHES.items():
            ns[f"H_{n}"] = f
        ns["H_csum16_bits"] = runtime.csum16_bits
        self._custom_crcs(gen)
        for i, (site, _) in enumerate(gen.custom_crcs):
            ns[f"HC{i}"] = self._crc_at[(site.file, site.line, site.col)].compute
        self.instances: dict[str, Any] = {}
        for inst in p.instances:
            ns[f"X{inst.index}"] = obj = self._make_extern(inst)
            # the generated code indexes these lists directly (they are updated in place, never rebound)
            if isinstance(obj, runtime.Counter):
                ns[f"XP{inst.index}"], ns[f"XB{inst.index}"] = obj.packets, obj.bytes
            elif isinstance(obj, runtime.Register):
                ns[f"XV{inst.index}"] = obj.values
            self.instances[inst.fqname] = obj
        self.tables: dict[str, runtime.Table] = {}
        for t in p.tables:
            tb = runtime.Table(t, [k.match_kind for k in t.keys], [k.width for k in t.keys],
                               (t.default_action.index, tuple(t.default_args)))
            if t.implementation is not None:
                tb.profile = self.instances[t.implementation.fqname]
                tb.profile.tables.append(tb)
            if t.direct_counter is not None:
                tb.count_direct = True
            if t.direct_meter is not None:
                tb.dmeter = self.instances[t.direct_meter.fqname]
            ns[f"TBL{t.index}"] = tb
            ns[f"TCACHE{t.index}"] = tb.cache
            self.tables[t.fqname] = tb
            # initial entries: ``const entries`` are read-only; plain ``entries`` are ordinary entries the
            # control plane reads, modifies and deletes (P4-16 14.2.1.4)
            for e in t.entries or []:
                try:
                    tb.insert(runtime.Entry(tuple(e.keys), e.priority or 0, e.action.index, tuple(e.args),
                                            is_const=t.const_entries))
                except SwitchError as x:          # the checker rules these out; a located error all the same
                    raise P4Error(e.loc, f"entry cannot be installed: {x.message}") from None
        # parser value sets: the generated select tests membership in these sets (updated in place)
        self.value_sets: dict[str, tuple[ir.ValueSetIR, set[int]]] = {}
        for vs in p.value_sets:
            ns[f"VS{vs.index}"] = members = set()
            self.value_sets[vs.fqname] = (vs, members)
        exec(compile(PRELUDE, "<switch-prelude>", "exec"), ns)
        exec(compile(src, f"<p4:{p.path}>", "exec"), ns)
        ns["ACTIONS"] = [ns.get(f"A{a.index}") for a in p.actions]    # fused code inlines actions
        for tb in self.tables.values():
            tb.bind_actions(ns["ACTIONS"])
        self.ns = ns
        sm = gen.sm
        self._sm = sm
        # two extra slots after the program's own: the received bytes and the offset where the parser
        # stopped travel in the packet state through the traffic manager; the payload is sliced off
        # in egress (queued packets then share the received bytes instead of holding copies)
        self._payload_slot = len(gen.init)
        self._init = gen.init + [b"", 0]
        if self.fused:
            self._ingress_one = ns["F_ingress"]
            self._egress_one = ns["F_egress"]
        else:
            self._make_packet_path()

    def _make_extern(self, inst: ir.InstanceIR):
        a = inst.args
        if inst.extern == "counter":
            return runtime.Counter(inst.fqname, a[0], ["packets", "bytes", "packets_and_bytes"][a[1]])
        if inst.extern == "direct_counter":
            return None
        if inst.extern == "meter":
            return runtime.Meter(inst.fqname, a[0], ["packets", "bytes"][a[1]])
        if inst.extern == "direct_meter":
            return runtime.DirectMeter(inst.fqname, ["packets", "bytes"][a[0]])
        if inst.extern == "register":
            t = inst.type_args[0]
            if not isinstance(t, (ir.Bits, ir.BoolT)):
                raise SwitchError("INVALID_ARGUMENT", f"register {inst.fqname}: element type {t} unsupported")
            return runtime.Register(inst.fqname, a[0], t.width, getattr(t, "signed", False))
        if inst.extern == "action_profile":
            return runtime.ActionProfile(inst.fqname, a[0], False, None, self.rng)
        if inst.extern == "action_selector":
            custom = self._crc_at.get((inst.loc.file, inst.loc.line, inst.loc.col))
            return runtime.ActionProfile(inst.fqname, a[1], True, SELECTOR_ALGOS[a[0]], self.rng, custom)
        raise SwitchError("UNIMPLEMENTED", f"extern {inst.extern}")

    # ---- custom CRC calculations ----------------------------------------------------------------
    def _custom_crcs(self, gen: Gen) -> None:
        """One :class:`runtime.CustomCrc` per place that names crc16_custom or crc32_custom: each hash or checksum
        call (``gen.custom_crcs``) and each action selector.  They are named ``calc_0``, ``calc_1``, ... in
        source order (file, line, column), and their parameters are set by name (:meth:`set_crc_parameters`),
        as BMv2 names the calculations of its JSON and sets them with ``set_crc16_parameters`` /
        ``set_crc32_parameters``.  (p4c's calculation names also count the calculations that are not custom, so
        the numbers need not match BMv2's for the same program; :attr:`custom_crcs` says where each one is.)"""
        sites = [(loc, w) for loc, w in gen.custom_crcs]
        for inst in self.ir.instances:
            if inst.extern == "action_selector" and SELECTOR_ALGOS[inst.args[0]].endswith("_custom"):
                sites.append((inst.loc, 16 if SELECTOR_ALGOS[inst.args[0]] == "crc16_custom" else 32))
        sites.sort(key=lambda x: (x[0].file, x[0].line, x[0].col))
        #: name -> calculation, in source order
        self.custom_crcs: dict[str, runtime.CustomCrc] = {}
        self._crc_at: dict[tuple[str, int, int], runtime.CustomCrc] = {}
        for loc, width in sites:
            c = runtime.CustomCrc(f"calc_{len(self.custom_crcs)}", width, str(loc))
            self.custom_crcs[c.name] = c
            self._crc_at[(loc.file, loc.line, loc.col)] = c

    def set_crc_parameters(self, name: str, width: int, polynomial: int, initial_remainder: int,
                           final_xor_value: int, reflect_data: bool, reflect_remainder: bool) -> None:
        """BMv2's ``set_crc16_parameters`` (``width`` 16) / ``set_crc32_parameters`` (32) for the custom CRC
        calculation ``name``: NOT_FOUND for an unknown name, INVALID_ARGUMENT when the calculation has the other
        width or a value does not fit it.  Takes effect for the next packet; a new pipeline starts from the
        defaults."""
        c = self.custom_crcs.get(name)
        if c is None:
            known = ", ".join(f"{n} ({x.width} bits, {x.where})" for n, x in self.custom_crcs.items()) or "none"
            raise SwitchError("NOT_FOUND", f"no custom CRC calculation {name!r}; the program has: {known}")
        if c.width != width:
            raise SwitchError("INVALID_ARGUMENT", f"custom CRC calculation {name} is crc{c.width}_custom, "
                                                  f"not crc{width}_custom")
        c.configure(polynomial, initial_remainder, final_xor_value, reflect_data, reflect_remainder)
        for prof in self.instances.values():          # selectors memoise their member choice in table caches
            if isinstance(prof, runtime.ActionProfile):
                prof.changed()

    # ---- packet path ----------------------------------------------------------------------------
    def _make_packet_path(self) -> None:
        """Build the per-packet glue as closures with the standard_metadata slot numbers and the
        pipeline functions bound as constants (no attribute or dict lookups per packet)."""
        sm = self._sm
        init = self._init
        ns = self.ns
        parser, verify, ingress = ns["C_parser"], ns["C_verify"], ns["C_ingress"]
        egress, compute, deparser = ns["C_egress"], ns["C_compute"], ns["C_deparser"]
        env = self.env
        tm = self.tm
        enqueue, tm_drop = tm.enqueue, tm.drop
        ports = tm.ports
        outputs = self.outputs
        sw = self
        I_PORT, PLEN, IGT = sm["ingress_port"], sm["packet_length"], sm["ingress_global_timestamp"]
        PERR, PRIO, MGRP, ESPEC = sm["parser_error"], sm["priority"], sm["mcast_grp"], sm["egress_spec"]
        RID, ITYPE = sm["egress_rid"], sm["instance_type"]
        EPORT, ENQ_TS, ENQ_QD = sm["egress_port"], sm["enq_timestamp"], sm["enq_qdepth"]
        DEQ_TD, DEQ_QD, EGT = sm["deq_timedelta"], sm["deq_qdepth"], sm["egress_global_timestamp"]
        PAY = self._payload_slot
        POFF = PAY + 1
        M48, M32, QMAX = 0xFFFFFFFFFFFF, 0xFFFFFFFF, (1 << 19) - 1
        join = b"".join

        v1 = self.gen.uses_v1
        V = self.gen.v1
        CI, CIF, CE, CEF = V["clone_i2e"], V["clone_i2e_fl"], V["clone_e2e"], V["clone_e2e_fl"]
        RESUB, RECIRC, TRUNC, PASSES = V["resubmit"], V["recirculate"], V["truncate"], V["passes"]
        H0, H1 = self.gen.headers_base, self.gen.headers_base + self.ir.headers_type.slots
        field_lists = self.gen.field_lists

        def preserved(s: list, fl: int) -> list[tuple[int, Any]]:
            """(slot, value) of the user metadata in field list ``fl - 1`` (NO_FIELD_LIST: none)."""
            return [(i, s[i]) for i in field_lists.get(fl - 1, ())]

        def clone_to(session: int, c: list, prio: int, now: int) -> None:
            """Enqueue copies of state ``c`` to clone session ``session``'s replicas (BMv2 mirroring)."""
            sess = sw.clone_sessions.get(session)
            if sess is None:                  # BMv2: an unconfigured session clones nothing
                return
            replicas, trunc = sess
            if trunc:
                c[TRUNC] = trunc if not c[TRUNC] or trunc < c[TRUNC] else c[TRUNC]
            for eport, rid in replicas:
                c[RID] = rid
                enqueue(eport, prio, tuple(c), c[PLEN], now)

        def ingress_one(port: int, data: bytes, preset: list | None = None, passes: int = 0) -> None:
            s = init[:]
            if preset:
                for i, x in preset:
                    s[i] = x
            now = sw.now_ns
            s[PASSES] = passes
            s[I_PORT] = port
            n = len(data)
            s[PLEN] = n
            s[IGT] = (now // 1000) & M48
            env.now_ns = now
            off, err, _ok = parser(s, data)
            if err:
                s[PERR] = err
                sw.parser_errors += 1
            verify(s)
            ingress(s)
            prio = s[PRIO]
            if v1 and (s[CI] or s[RESUB]):
                # BMv2 order at the end of ingress: clone (I2E) of the packet as received, parsed again,
                # then resubmit (the packet as received goes through ingress again; nothing else happens)
                if s[CI]:
                    c = init[:]
                    c[I_PORT] = port
                    c[PLEN] = n
                    for i, x in preserved(s, s[CIF]):
                        c[i] = x
                    off2, err2, _ok = parser(c, data)
                    if err2:
                        c[PERR] = err2
                    c[ITYPE] = INSTANCE_INGRESS_CLONE
                    c[PAY] = data
                    c[POFF] = off2
                    clone_to(s[CI] - 1, c, prio, now)
                if s[RESUB]:
                    if passes >= MAX_EXTRA_PASSES:
                        tm_drop(port, prio, "resubmit_limit")
                        return
                    ingress_one(port, data, preserved(s, s[RESUB]) + [(ITYPE, INSTANCE_RESUBMIT)], passes + 1)
                    return
            grp = s[MGRP]
            if grp:
                s[PAY] = data
                s[POFF] = off
                for eport, rid in sw.mcast.get(grp, ()):
                    s[RID] = rid
                    s[ITYPE] = INSTANCE_REPLICATION
                    enqueue(eport, prio, tuple(s), n, now)
                return
            eport = s[ESPEC]
            if eport == DROP_PORT:
                tm_drop(port, prio, "pipeline_drop")
                return
            # BMv2 sets instance_type to NORMAL when a unicast packet leaves ingress (simple_switch.cpp,
            # ingress_thread): egress sees 0 for a resubmitted or recirculated packet too
            s[ITYPE] = INSTANCE_NORMAL
            # queued as a tuple: it holds only ints, bools, bytes and tuples, so the garbage collector
            # stops tracking it (thousands of queued packets would otherwise make every collection slow)
            s[PAY] = data
            s[POFF] = off
            enqueue(eport, prio, tuple(s), n, now)

        def egress_one(port: int, prio: int, e: tuple, deq_depth: int, now: int) -> None:
            """Egress for a packet the traffic manager just dequeued at ``now``: ``e`` is its FIFO
            entry (state, enq_ns, enq_depth, size), ``deq_depth`` what is left in its queue."""
            sw.now_ns = now
            s = list(e[0])
            enq_ns = e[1]
            s[EPORT] = port
            s[ESPEC] = 0              # BMv2 simple_switch clears egress_spec when egress starts
            s[ENQ_TS] = (enq_ns // 1000) & M32
            s[ENQ_QD] = e[2] if e[2] < QMAX else QMAX
            s[DEQ_TD] = ((now - enq_ns) // 1000) & M32
            s[DEQ_QD] = deq_depth if deq_depth < QMAX else QMAX
            s[EGT] = (now // 1000) & M48
            env.now_ns = now
            egress(s)
            if v1 and s[CE]:
                # E2E clone: the headers as egress left them, metadata reset but for the field list;
                # made before the drop check (BMv2), enqueued once this egress pass is over
                c = init[:]
                c[H0:H1] = s[H0:H1]
                for i, x in preserved(s, s[CEF]):
                    c[i] = x
                c[ITYPE] = INSTANCE_EGRESS_CLONE
                c[PLEN] = s[PLEN]
                c[PAY] = s[PAY]
                c[POFF] = s[POFF]
                sw._deferred.append(lambda c=c, sess=s[CE] - 1: clone_to(sess, c, prio, sw.now_ns))
            if s[ESPEC] == DROP_PORT:      # mark_to_drop() in egress
                tm_drop(port, prio, "pipeline_drop")
                return
            payload = s[PAY][s[POFF]:]
            env.payload = payload
            compute(s)
            data = join(deparser(s)) + payload
            if v1:
                if s[RECIRC]:
                    # the deparsed packet goes back to ingress (port 0, metadata reset but for the field
                    # list, instance_type RECIRC) instead of leaving
                    if s[PASSES] >= MAX_EXTRA_PASSES:
                        tm_drop(port, prio, "recirculate_limit")
                        return
                    pre = preserved(s, s[RECIRC]) + [(ITYPE, INSTANCE_RECIRC)]
                    sw._deferred.append(lambda d=data, pre=pre, k=s[PASSES] + 1: ingress_one(0, d, pre, k))
                    return
                if s[TRUNC] and s[TRUNC] < len(data):
                    data = data[:s[TRUNC]]
            link = ports[port]
            if tm.plain_links:
                busy = link.busy_until_ns
                outputs.append(Departure(port, data, busy, busy))
                return
            if link.loss > 0 and tm.rng.random() < link.loss:
                tm_drop(port, prio, "emulated_loss")
                return
            busy = link.busy_until_ns
            outputs.append(Departure(port, data, busy, busy + link.delay_ns))

        self._ingress_one = ingress_one
        self._egress_one = egress_one

    def run(self, until_ns: int | None = None) -> list[Departure]:
        """Advance the clock, dequeuing and running egress, until ``until_ns`` or until idle.
        Returns the departures of this call (also appended to ``self.outputs``)."""
        start = len(self.outputs)
        self.now_ns = self.tm.drain(until_ns, self.now_ns, self._egress_one)
        while self._deferred:          # E2E clones and recirculated packets made by those egress passes
            work, self._deferred = self._deferred, []
            for fn in work:
                fn()
            self.now_ns = self.tm.drain(until_ns, self.now_ns, self._egress_one)
        if until_ns is not None:
            self.now_ns = max(self.now_ns, until_ns)
        return self.outputs[start:]

    def inject(self, port: int, data: bytes, at_ns: int | None = None) -> None:
        """Receive ``data`` on ``port`` at simulated time ``at_ns`` (default: now). Packets already
        queued that depart before that time are processed first."""
        if at_ns is not None:
            now = self.now_ns
            if at_ns < now:
                raise ValueError("time cannot go backwards")
            if self.tm.backlog:               # self.run(at_ns), without collecting its departures
                now = self.tm.drain(at_ns, now, self._egress_one)
            self.now_ns = at_ns if at_ns > now else now
        self._ingress_one(port, bytes(data))

    def send(self, port: int, data: bytes) -> list[Departure]:
        """Inject one packet now and run until idle; returns what left."""
        self.inject(port, data)
        return self.run()

    def process_batch(self, packets: Iterable[tuple[int, bytes]]) -> list[Departure]:
        """Fast path for benchmarks: inject every (port, data) at the current time, then run."""
        ing = self._ingress_one
        for port, data in packets:
            ing(port, data)
        return self.run()

    # ---- drops -----------------------------------------------------------------------------------
    def drops(self) -> dict[tuple[int, int, str], int]:
        """Drop counts by (port, priority, reason)."""
        return dict(self.tm.drops)

    def drop_total(self, reason: str | None = None) -> int:
        return sum(v for k, v in self.tm.drops.items() if reason is None or k[2] == reason)

    # ---- names and ids -----------------------------------------------------------------------------
    def _table(self, table: str | int) -> runtime.Table:
        name = self.ids.name("tables", table)
        t = self.tables.get(name)
        if t is None:
            raise SwitchError("NOT_FOUND", f"no table {table!r}")
        return t

    def _action(self, t: runtime.Table | None, action: str | int, prefer: tuple = ()) -> ir.ActionIR:
        name = self.ids.name("actions", action)
        # the table's own (or ``prefer``'s) first: a top-level action bound by tables of two controls has a copy
        # in each control, under one name (switch.frontend.inline.Inliner.localize)
        for a in (t.ir.actions if t is not None else list(prefer)) + self.ir.actions:
            if a.fqname == name:
                if t is not None and a not in t.ir.actions:
                    raise SwitchError("INVALID_ARGUMENT", f"action {name} is not an action of table {t.name}")
                return a
        raise SwitchError("NOT_FOUND", f"no action {action!r}")

    def _args(self, a: ir.ActionIR, params: dict | list | tuple | None) -> tuple:
        params = params or {}
        if isinstance(params, (list, tuple)):
            if len(params) != len(a.params):
                raise SwitchError("INVALID_ARGUMENT", f"action {a.fqname} takes {len(a.params)} parameters")
            vals = [to_int(v) for v in params]
        else:
            byname = {}
            for i, p in enumerate(a.params):
                byname[p.name] = i
                byname[i + 1] = i        # P4Info param ids start at 1
            vals = [None] * len(a.params)
            for k, v in params.items():
                if k not in byname:
                    raise SwitchError("INVALID_ARGUMENT", f"action {a.fqname} has no parameter {k!r}")
                vals[byname[k]] = to_int(v)
            if any(v is None for v in vals):
                raise SwitchError("INVALID_ARGUMENT", f"missing parameters for action {a.fqname}")
        out = []
        for v, p in zip(vals, a.params):
            if v < 0 or v >> p.type.width:
                raise SwitchError("INVALID_ARGUMENT", f"value {v} does not fit parameter {p.name} ({p.type})")
            out.append(v)
        return tuple(out)

    def _match(self, t: runtime.Table, match: dict | None) -> tuple:
        """Build the per-key match tuple from {field name or id: value}. Values: exact: v;
        lpm: (v, plen); ternary: (v, mask); range: (lo, hi); optional: v."""
        match = match or {}
        keys = t.ir.keys
        out: list = [None] * len(keys)
        index = {}
        for i, k in enumerate(keys):
            index[k.name] = i
            index[i + 1] = i
        for f, v in match.items():
            if f not in index:
                raise SwitchError("INVALID_ARGUMENT", f"table {t.name} has no match field {f!r}")
            i = index[f]
            k = keys[i]
            w = k.width
            full = (1 << w) - 1
            mk = k.match_kind
            if mk == "exact":
                m = ("exact", to_int(v))
            elif mk == "lpm":
                val, plen = v
                val, plen = to_int(val), int(plen)
                if not 0 <= plen <= w:
                    raise SwitchError("INVALID_ARGUMENT", f"prefix length {plen} out of range")
                if val & ((1 << (w - plen)) - 1):
                    raise SwitchError("INVALID_ARGUMENT", "lpm value has bits set beyond the prefix length")
                m = None if plen == 0 else ("lpm", val, plen)
            elif mk == "ternary":
                val, mask = (to_int(v[0]), to_int(v[1]))
                if val & ~mask & full:
                    raise SwitchError("INVALID_ARGUMENT", "ternary value has bits set outside the mask")
                m = None if mask == 0 else ("ternary", val, mask)
            elif mk == "range":
                lo, hi = to_int(v[0]), to_int(v[1])
                if lo > hi:
                    raise SwitchError("INVALID_ARGUMENT", "range low bound above high bound")
                m = None if (lo, hi) == (0, full) else ("range", lo, hi)
            elif mk == "optional":
                m = ("optional", to_int(v))
            else:
                raise SwitchError("INVALID_ARGUMENT", f"unknown match kind {mk}")
            for x in m[1:] if m else ():
                if x < 0 or x > full:
                    raise SwitchError("INVALID_ARGUMENT", f"value {x} does not fit match field {k.name} (bit<{w}>)")
            out[i] = m
        for i, k in enumerate(keys):
            if k.match_kind == "exact" and out[i] is None:
                raise SwitchError("INVALID_ARGUMENT", f"exact match field {k.name} is required")
        return tuple(out)

    # ---- table entries --------------------------------------------------------------------------
    def _entry(self, table, match, action, params, priority, member, group,
               oneshot: bool = False) -> tuple[runtime.Table, runtime.Entry]:
        """Validate an entry and build it (not inserted).  ``oneshot``: the entry will name members or a group
        made for it afterwards (a P4Runtime one-shot action set), so they are not looked up."""
        t = self._table(table)
        m = self._match(t, match)
        if t.has_prio:
            if not priority or priority <= 0:
                raise SwitchError("INVALID_ARGUMENT", f"table {t.name} needs an entry priority > 0")
        elif priority:
            raise SwitchError("INVALID_ARGUMENT", f"table {t.name} does not take a priority")
        e = runtime.Entry(m, priority or 0)
        if t.profile is not None and oneshot:
            pass
        elif t.profile is not None:
            if (member is None) == (group is None):
                raise SwitchError("INVALID_ARGUMENT", f"table {t.name} needs a member id or a group id")
            if group is not None and not t.profile.selector:
                raise SwitchError("INVALID_ARGUMENT", f"{t.profile.name} is not a selector: no groups")
            if member is not None and member not in t.profile.members:
                raise SwitchError("NOT_FOUND", f"no member {member} in {t.profile.name}")
            if group is not None and group not in t.profile.groups:
                raise SwitchError("NOT_FOUND", f"no group {group} in {t.profile.name}")
            e.member, e.group = member, group
        else:
            if action is None:
                raise SwitchError("INVALID_ARGUMENT", "an action is required")
            a = self._action(t, action)
            if t.ir.action_scopes.get(a.fqname) == "DEFAULT_ONLY":
                raise SwitchError("INVALID_ARGUMENT", f"action {a.fqname} is @defaultonly")
            e.action, e.args = a.index, self._args(a, params)
        return t, e

    def check_entry(self, table, match=None, action=None, params=None, priority: int = 0,
                    member: int | None = None, group: int | None = None, *, insert: bool = True,
                    oneshot: bool = False) -> None:
        """Raise the error :meth:`insert_entry` (``insert``) or :meth:`modify_entry` would raise, changing
        nothing, so a caller can validate a whole update before applying any part of it."""
        t, e = self._entry(table, match, action, params, priority, member, group, oneshot)
        if t.ir.const_entries:
            raise SwitchError("PERMISSION_DENIED", f"table {t.name} has const entries")
        if insert:
            t.check_insert(e)
        elif t.get(e.match, e.priority) is None:
            raise SwitchError("NOT_FOUND", f"no such entry in table {t.name}")

    def insert_entry(self, table, match=None, action=None, params=None, priority: int = 0,
                     member: int | None = None, group: int | None = None) -> None:
        t, e = self._entry(table, match, action, params, priority, member, group)
        if t.ir.const_entries:
            raise SwitchError("PERMISSION_DENIED", f"table {t.name} has const entries")
        t.insert(e)

    def modify_entry(self, table, match=None, action=None, params=None, priority: int = 0,
                     member: int | None = None, group: int | None = None) -> None:
        t, e = self._entry(table, match, action, params, priority, member, group)
        if t.ir.const_entries:
            raise SwitchError("PERMISSION_DENIED", f"table {t.name} has const entries")
        t.modify(e)

    def delete_entry(self, table, match=None, priority: int = 0) -> None:
        t = self._table(table)
        if t.ir.const_entries:
            raise SwitchError("PERMISSION_DENIED", f"table {t.name} has const entries")
        t.delete(self._match(t, match), priority or 0)

    def get_entry(self, table, match=None, priority: int = 0) -> runtime.Entry | None:
        t = self._table(table)
        return t.get(self._match(t, match), priority or 0)

    def entries(self, table) -> list[dict]:
        """Entries as written, P4Runtime style: match by field id with canonical bytes, don't-care
        fields omitted."""
        t = self._table(table)
        out = []
        for e in t.entries.values():
            fields = {}
            for i, (m, k) in enumerate(zip(e.match, t.ir.keys)):
                if m is None:
                    continue
                fields[i + 1] = (m[0],) + tuple(canonical_bytes(x, k.width) if j < 2 or m[0] != "lpm" else x
                                                for j, x in enumerate(m[1:], start=1))
            item = {"table_id": self.ids.id("tables", t.name), "match": fields, "priority": e.priority,
                    "packets": e.packets, "bytes": e.bytes}
            if e.action >= 0:
                a = self.ir.actions[e.action]
                item["action_id"] = self.ids.id("actions", a.fqname)
                item["params"] = {i + 1: canonical_bytes(v, p.type.width) for i, (v, p) in enumerate(zip(e.args, a.params))}
            else:
                item["member"], item["group"] = e.member, e.group
            out.append(item)
        return out

    def set_default_action(self, table, action, params=None) -> None:
        t = self._table(table)
        if t.ir.const_default:
            raise SwitchError("PERMISSION_DENIED", f"the default action of {t.name} is const")
        a = self._action(t, action)
        if t.ir.action_scopes.get(a.fqname) == "TABLE_ONLY":
            raise SwitchError("INVALID_ARGUMENT", f"action {a.fqname} is @tableonly")
        t.set_default(a.index, self._args(a, params))

    def reset_default_action(self, table) -> None:
        t = self._table(table)
        t.set_default(*t.initial_default)

    def direct_counter(self, table, match=None, priority: int = 0) -> tuple[int, int]:
        e = self.get_entry(table, match, priority)
        if e is None:
            raise SwitchError("NOT_FOUND", "no such entry")
        return e.packets, e.bytes

    # ---- action profiles ------------------------------------------------------------------------
    def _profile(self, name) -> runtime.ActionProfile:
        n = self.ids.name("action_profiles", name)
        p = self.instances.get(n)
        if not isinstance(p, runtime.ActionProfile):
            raise SwitchError("NOT_FOUND", f"no action profile {name!r}")
        return p

    def check_action(self, action, params=None) -> None:
        """Raise the error an action with these parameters would cause (unknown action, bad parameters)."""
        self._args(self._action(None, action), params)

    def profile_room(self, profile) -> int:
        """How many more members action profile ``profile`` holds."""
        p = self._profile(profile)
        return max(0, p.size - len(p.members))

    def insert_member(self, profile, member_id: int, action, params=None) -> None:
        p = self._profile(profile)
        if member_id in p.members:
            raise SwitchError("ALREADY_EXISTS", f"member {member_id} exists")
        if len(p.members) >= p.size:
            raise SwitchError("RESOURCE_EXHAUSTED", f"{p.name} is full")
        a = self._action(None, action, tuple(x for tb in p.tables for x in tb.ir.actions))
        p.members[member_id] = (a.index, self._args(a, params))
        p.changed()

    def modify_member(self, profile, member_id: int, action, params=None) -> None:
        p = self._profile(profile)
        if member_id not in p.members:
            raise SwitchError("NOT_FOUND", f"no member {member_id}")
        a = self._action(None, action, tuple(x for tb in p.tables for x in tb.ir.actions))
        p.members[member_id] = (a.index, self._args(a, params))
        p.changed()

    def delete_member(self, profile, member_id: int) -> None:
        p = self._profile(profile)
        if member_id not in p.members:
            raise SwitchError("NOT_FOUND", f"no member {member_id}")
        if any(member_id in g for g in p.groups.values()):
            raise SwitchError("FAILED_PRECONDITION", f"member {member_id} is in a group")
        del p.members[member_id]
        p.changed()

    def insert_group(self, profile, group_id: int, members: list[int], max_size: int = 0,
                     random_selection: bool = False) -> None:
        p = self._profile(profile)
        if not p.selector:
            raise SwitchError("INVALID_ARGUMENT", f"{p.name} is not an action selector")
        if group_id in p.groups:
            raise SwitchError("ALREADY_EXISTS", f"group {group_id} exists")
        self._set_group(p, group_id, members, max_size, random_selection)

    def modify_group(self, profile, group_id: int, members: list[int], max_size: int = 0,
                     random_selection: bool = False) -> None:
        p = self._profile(profile)
        if group_id not in p.groups:
            raise SwitchError("NOT_FOUND", f"no group {group_id}")
        self._set_group(p, group_id, members, max_size, random_selection)

    def _set_group(self, p, group_id, members, max_size, random_selection) -> None:
        for m in members:
            if m not in p.members:
                raise SwitchError("NOT_FOUND", f"no member {m}")
        if max_size and len(members) > max_size:
            raise SwitchError("RESOURCE_EXHAUSTED", "group larger than its max_size")
        p.groups[group_id] = list(members)
        p.max_group_size[group_id] = max_size
        (p.random_groups.add if random_selection else p.random_groups.discard)(group_id)
        p.changed()

    def delete_group(self, profile, group_id: int) -> None:
        p = self._profile(profile)
        if group_id not in p.groups:
            raise SwitchError("NOT_FOUND", f"no group {group_id}")
        del p.groups[group_id]
        p.changed()

    # ---- registers, counters, meters -------------------------------------------------------------
    def _inst(self, kind: str, name, cls):
        n = self.ids.name(kind, name)
        o = self.instances.get(n)
        if not isinstance(o, cls):
            raise SwitchError("NOT_FOUND", f"no {kind[:-1]} {name!r}")
        return o

    def register_read(self, name, index: int) -> int:
        r = self._inst("registers", name, runtime.Register)
        self._check_index(index, r.size)
        return r.values[index] & r.mask

    def register_write(self, name, index: int, value: int) -> None:
        r = self._inst("registers", name, runtime.Register)
        self._check_index(index, r.size)
        v = to_int(value) & r.mask
        if r.signed and v >> (r.width - 1):
            v -= 1 << r.width
        r.values[index] = v

    def counter_read(self, name, index: int) -> tuple[int, int]:
        c = self._inst("counters", name, runtime.Counter)
        self._check_index(index, c.size)
        return c.packets[index], c.bytes[index]

    def counter_write(self, name, index: int, packets: int = 0, bytes_: int = 0) -> None:
        c = self._inst("counters", name, runtime.Counter)
        self._check_index(index, c.size)
        c.packets[index], c.bytes[index] = packets, bytes_

    def meter_set(self, name, index: int, cir: int, cburst: int, pir: int, pburst: int) -> None:
        m = self._inst("meters", name, runtime.Meter)
        self._check_index(index, m.size)
        m.cells[index].set(runtime.MeterConfig(cir, cburst, pir, pburst), self.now_ns)

    @staticmethod
    def _check_index(i: int, size: int) -> None:
        if not 0 <= i < size:
            raise SwitchError("OUT_OF_RANGE", f"index {i} out of range (size {size})")

    # ---- multicast (packet replication engine) ---------------------------------------------------
    def set_mcast_group(self, group: int, ports: list[int] | list[tuple[int, int]]) -> None:
        self.mcast[group] = [(p, 0) if isinstance(p, int) else tuple(p) for p in ports]

    def delete_mcast_group(self, group: int) -> None:
        self.mcast.pop(group, None)

    def set_clone_session(self, session: int, ports: list[int] | list[tuple[int, int]],
                          packet_length_bytes: int = 0) -> None:
        """Clone session ``session``: clones go to these ports (or (port, egress_rid) pairs), truncated to
        ``packet_length_bytes`` when it is not 0 (P4Runtime CloneSessionEntry)."""
        self.clone_sessions[session] = ([(p, 0) if isinstance(p, int) else tuple(p) for p in ports],
                                        packet_length_bytes)

    def delete_clone_session(self, session: int) -> None:
        self.clone_sessions.pop(session, None)

    # ---- parser value sets ------------------------------------------------------------------------
    def _value_set(self, name: str) -> tuple[ir.ValueSetIR, set[int]]:
        v = self.value_sets.get(name)
        if v is None:
            raise SwitchError("NOT_FOUND", f"no value_set named {name!r}")
        return v

    def set_value_set(self, name: str, values: Iterable[int]) -> None:
        """Replace the members of value set ``name`` (as P4Runtime's ValueSetEntry MODIFY does)."""
        vs, members = self._value_set(name)
        new = set()
        for v in values:
            v = to_int(v, vs.width)
            if not 0 <= v < (1 << vs.width):
                raise SwitchError("INVALID_ARGUMENT", f"value_set {name}: {v} does not fit bit<{vs.width}>")
            new.add(v)
        if len(new) > vs.size:
            raise SwitchError("RESOURCE_EXHAUSTED", f"value_set {name} holds at most {vs.size} members, got {len(new)}")
        members.clear()
        members.update(new)

    def value_set_members(self, name: str) -> list[int]:
        return sorted(self._value_set(name)[1])

    # ---- digests ----------------------------------------------------------------------------------

class _Ids:
    """Name <-> P4Info id resolution for the API (accepts either)."""

    def __init__(self, p4info):
        self.by_id: dict[int, str] = {}
        self.by_name: dict[tuple[str, str], int] = {}
        for kind in ("tables", "actions", "action_profiles", "counters", "direct_counters", "meters",
                     "direct_meters", "registers", "digests"):
            for x in getattr(p4info, kind):
                self.by_id[x.preamble.id] = x.preamble.name
                self.by_name[(kind, x.preamble.name)] = x.preamble.id
                self.by_name.setdefault((kind, x.preamble.alias), x.preamble.id)

    def name(self, kind: str, key) -> str:
        if isinstance(key, int):
            if key not in self.by_id:
                raise SwitchError("NOT_FOUND", f"unknown id {key:#x}")
            return self.by_id[key]
        i = self.by_name.get((kind, key))
        return self.by_id[i] if i is not None else key

    def id(self, kind: str, name: str) -> int:
        return self.by_name[(kind, name)]

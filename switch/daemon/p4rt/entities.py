"""P4Runtime entities of one pipeline: every Write update and Read filter translated to the
:class:`switch.target.Switch` API, with read-write symmetry.

Symmetry: each table entry, group and multicast group is kept as the canonical message that was written
(match fields sorted by id, shortest byte strings, parameters sorted by id) and returned as written; counter,
meter and register values are read live from the switch.  Non-canonical byte strings (leading zeros) are
accepted when the value fits and read back canonical.

One-shot action sets (``action_profile_action_set``) become members and a group of the table's action profile
with negative ids, invisible to reads of the profile; ``action_selection_mode = RANDOM`` asks the selector for
per-packet random selection.  Every error is a :class:`~switch.errors.SwitchError` whose ``code`` is the
gRPC status name the update fails with.
"""
from __future__ import annotations

from collections import Counter
from typing import Iterator

from finsy.proto import p4i, p4r

from ...errors import SwitchError
from ...target import Switch
from .codec import ControllerHeader, decode, encode

INSERT, MODIFY, DELETE = p4r.Update.INSERT, p4r.Update.MODIFY, p4r.Update.DELETE
#: bits of an ``error`` value on this target (an error-typed match field has no bitwidth in p4c's P4Info)
ERROR_WIDTH = 32
_MT = {getattr(p4i.MatchField, k.upper()): k for k in ("exact", "lpm", "ternary", "range", "optional")}
_EXACT = p4i.MatchField.EXACT
_SCOPE_TABLE_ONLY, _SCOPE_DEFAULT_ONLY = p4i.ActionRef.TABLE_ONLY, p4i.ActionRef.DEFAULT_ONLY
RANDOM = p4r.ActionProfileActionSet.RANDOM


def _bad(msg: str) -> SwitchError:
    return SwitchError("INVALID_ARGUMENT", msg)


def _entity(**kw) -> p4r.Entity:
    return p4r.Entity(**kw)


class Entities:
    """Write/Read of P4Runtime entities against one :class:`Switch` (one pipeline)."""

    def __init__(self, sw: Switch, cpu_port: int | None = None):
        self.sw = sw
        info = sw.p4info
        self.tables = {t.preamble.id: t for t in info.tables}
        self.actions = {a.preamble.id: a for a in info.actions}
        self.profiles = {p.preamble.id: p for p in info.action_profiles}
        self.counters = {c.preamble.id: c for c in info.counters}
        self.meters = {m.preamble.id: m for m in info.meters}
        self.registers = {r.preamble.id: r for r in info.registers}
        self.digests = {d.preamble.id: d for d in info.digests}
        self.value_sets = {v.preamble.id: v for v in info.value_sets}
        self.direct_counter = {dc.direct_table_id: dc.preamble.id for dc in info.direct_counters}
        self.direct_meter = {dm.direct_table_id: dm.preamble.id for dm in info.direct_meters}
        self.packet_in = ControllerHeader.from_p4info(info, "packet_in")
        self.packet_out = ControllerHeader.from_p4info(info, "packet_out")
        self.cpu_port = cpu_port
        self.shadow: dict[int, dict[tuple, p4r.TableEntry]] = {t: {} for t in self.tables}
        # the program's initial (non-const) ``entries``: ordinary entries that Read shows and Write may modify or
        # delete, as P4Runtime 1.4 asks (const entries are read from the switch itself, see _table_entries)
        for tid, t in self.tables.items():
            if not t.is_const_table:
                for d in sw.entries(tid):
                    te = self._entry_msg(tid, d, False)
                    self.shadow[tid][self._key(list(te.match), te.priority)] = te
        self.oneshot: dict[tuple, tuple[str, int | None, list[int]]] = {}   # (tid, key) -> (profile, group, members)
        self.groups: dict[tuple[int, int], p4r.ActionProfileGroup] = {}
        self.refs: Counter = Counter()            # ("m"|"g", profile id, id) -> table entries using it
        self.mcast: dict[int, p4r.MulticastGroupEntry] = {}
        self.clones: dict[int, p4r.CloneSessionEntry] = {}
        self.digest_config: dict[int, p4r.DigestEntry.Config] = {}
        self._hidden = 0
        # digest index (in the IR) -> (P4Info id, [(field name, bitwidth or None for bool)])
        self.digest_fields: dict[int, tuple[int, list]] = {}
        by_name = {d.preamble.name: d for d in info.digests}
        for d in sw.ir.digests:
            pd = by_name.get(d.name)
            if pd is None:
                continue
            st = info.type_info.structs[pd.type_spec.struct.name]
            fields = [(m.name, None if m.type_spec.HasField("bool") else m.type_spec.bitstring.bit.bitwidth)
                      for m in st.members]
            self.digest_fields[d.index] = (pd.preamble.id, fields)

    # ==== helpers ================================================================================================
    def _table(self, tid: int):
        t = self.tables.get(tid)
        if t is None:
            raise _bad(f"unknown table id {tid:#x}")
        return t

    def _hid(self) -> int:
        self._hidden -= 1
        return self._hidden

    def _match(self, t, fms) -> tuple[list[p4r.FieldMatch], dict]:
        """Validate and canonicalise the match fields of an entry of table ``t``: (canonical FieldMatch list
        sorted by field id, {field id: value} for the Switch API)."""
        fields = {f.id: f for f in t.match_fields}
        out: dict[int, p4r.FieldMatch] = {}
        api: dict = {}
        tn = t.preamble.name
        for fm in fms:
            f = fields.get(fm.field_id)
            if f is None:
                raise _bad(f"table {tn} has no match field with id {fm.field_id}")
            if fm.field_id in out:
                raise _bad(f"table {tn}: match field {f.name} given twice")
            kind = fm.WhichOneof("field_match_type")
            want = _MT.get(f.match_type, f.other_match_type or "unknown")
            if kind != want:
                raise _bad(f"table {tn}: match field {f.name} is {want}, got {kind or 'nothing'}")
            # p4c's P4Info gives an error-typed key no bitwidth (its members are in type_info.error): its values
            # are the errors' numbers, as wide as the target keeps them
            w = f.bitwidth or ERROR_WIDTH
            what = f"table {tn} match field {f.name}"
            c = p4r.FieldMatch(field_id=fm.field_id)
            if kind == "exact":
                v = decode(fm.exact.value, w, what)
                c.exact.value = encode(v)
                api[fm.field_id] = v
            elif kind == "optional":
                v = decode(fm.optional.value, w, what)
                c.optional.value = encode(v)
                api[fm.field_id] = v
            elif kind == "lpm":
                v, plen = decode(fm.lpm.value, w, what), fm.lpm.prefix_len
                if plen == 0:
                    raise _bad(f"{what}: prefix length 0 is a don't-care match: omit the field")
                if not 0 < plen <= w:
                    raise _bad(f"{what}: prefix length {plen} out of range 1..{w}")
                if v & ((1 << (w - plen)) - 1):
                    raise _bad(f"{what}: value has bits set beyond the prefix length {plen}")
                c.lpm.value, c.lpm.prefix_len = encode(v), plen
                api[fm.field_id] = (v, plen)
            elif kind == "ternary":
                v, m = decode(fm.ternary.value, w, what), decode(fm.ternary.mask, w, what + " mask")
                if m == 0:
                    raise _bad(f"{what}: mask 0 is a don't-care match: omit the field")
                if v & ~m:
                    raise _bad(f"{what}: value has bits set outside the mask")
                c.ternary.value, c.ternary.mask = encode(v), encode(m)
                api[fm.field_id] = (v, m)
            elif kind == "range":
                lo, hi = decode(fm.range.low, w, what + " low"), decode(fm.range.high, w, what + " high")
                if lo > hi:
                    raise _bad(f"{what}: range low bound above high bound")
                if lo == 0 and hi == (1 << w) - 1:
                    raise _bad(f"{what}: the full range is a don't-care match: omit the field")
                c.range.low, c.range.high = encode(lo), encode(hi)
                api[fm.field_id] = (lo, hi)
            else:
                raise SwitchError("UNIMPLEMENTED", f"{what}: match kind {kind} is not supported")
            out[fm.field_id] = c
        for f in t.match_fields:
            if f.match_type == _EXACT and f.id not in out:
                raise _bad(f"table {tn}: exact match field {f.name} is required")
        return [out[k] for k in sorted(out)], api

    @staticmethod
    def _key(fms: list[p4r.FieldMatch], priority: int) -> tuple:
        return (priority, tuple(fm.SerializeToString(deterministic=True) for fm in fms))

    def _action(self, a: p4r.Action, table=None, *, default: bool = False, profile=None) -> tuple[int, dict, p4r.Action]:
        """Validate an action against the table (or the tables of a profile): (id, {param id: value}, canonical)."""
        ai = self.actions.get(a.action_id)
        if ai is None:
            raise _bad(f"unknown action id {a.action_id:#x}")
        an = ai.preamble.name
        if table is not None:
            scope = {r.id: r.scope for r in table.action_refs}
            if a.action_id not in scope:
                raise _bad(f"action {an} is not an action of table {table.preamble.name}")
            if default and scope[a.action_id] == _SCOPE_TABLE_ONLY:
                raise _bad(f"action {an} is @tableonly: it cannot be the default action")
            if not default and scope[a.action_id] == _SCOPE_DEFAULT_ONLY:
                raise _bad(f"action {an} is @defaultonly: it cannot be used in a table entry")
        if profile is not None:
            ok = any(a.action_id in {r.id for r in self.tables[tid].action_refs} for tid in profile.table_ids
                     if tid in self.tables)
            if not ok:
                raise _bad(f"action {an} is not an action of the tables of {profile.preamble.name}")
        params = {p.id: p for p in ai.params}
        vals: dict[int, int] = {}
        for p in a.params:
            pi = params.get(p.param_id)
            if pi is None:
                raise _bad(f"action {an} has no parameter with id {p.param_id}")
            if p.param_id in vals:
                raise _bad(f"action {an}: parameter {pi.name} given twice")
            vals[p.param_id] = decode(p.value, pi.bitwidth, f"action {an} parameter {pi.name}")
        missing = [pi.name for pid, pi in params.items() if pid not in vals]
        if missing:
            raise _bad(f"action {an}: missing parameter(s) {', '.join(missing)}")
        canon = p4r.Action(action_id=a.action_id,
                           params=[p4r.Action.Param(param_id=k, value=encode(vals[k])) for k in sorted(vals)])
        return a.action_id, vals, canon

    def _action_msg(self, index: int, args: tuple) -> p4r.Action:
        """Runtime (action index, args) -> canonical Action message."""
        a = self.sw.ir.actions[index]
        aid = self.sw.ids.id("actions", a.fqname)
        return p4r.Action(action_id=aid, params=[p4r.Action.Param(param_id=i + 1, value=encode(v))
                                                 for i, v in enumerate(args)])

    # ==== write ==================================================================================================
    def write(self, update: p4r.Update) -> None:
        ut = update.type
        if ut not in (INSERT, MODIFY, DELETE):
            raise _bad("update type must be INSERT, MODIFY or DELETE")
        kind = update.entity.WhichOneof("entity")
        if kind is None:
            raise _bad("empty Entity in update")
        fn = getattr(self, f"_w_{kind}", None)
        if fn is None:
            raise SwitchError("UNIMPLEMENTED", f"{kind} is not supported by this target")
        fn(ut, getattr(update.entity, kind))

    # -- table entries -----------------------------------------------------------------------------------------
    def _w_table_entry(self, ut, te: p4r.TableEntry) -> None:
        t = self._table(te.table_id)
        tn, tid = t.preamble.name, te.table_id
        if te.is_default_action:
            return self._w_default(ut, t, te)
        if te.is_const:
            raise _bad("is_const is read-only")
        if te.idle_timeout_ns:
            raise _bad(f"table {tn} does not support idle timeouts")
        if t.is_const_table:
            raise SwitchError("PERMISSION_DENIED", f"table {tn} has const entries and cannot be written")
        fms, match = self._match(t, te.match)
        key = self._key(fms, te.priority)
        shadow = self.shadow[tid]
        if ut == DELETE:
            if key not in shadow:
                raise SwitchError("NOT_FOUND", f"no such entry in table {tn}")
            self.sw.delete_entry(tn, match, te.priority)
            self._unref(shadow.pop(key), t)
            self._free_oneshot((tid, key))
            return
        if ut == INSERT and key in shadow:
            raise SwitchError("ALREADY_EXISTS", f"entry already exists in table {tn}")
        if ut == MODIFY and key not in shadow:
            raise SwitchError("NOT_FOUND", f"no such entry in table {tn}")
        canon = p4r.TableEntry(table_id=tid, match=fms, priority=te.priority, metadata=te.metadata,
                               controller_metadata=te.controller_metadata)
        # everything is validated before anything changes: a refused update leaves no trace (no entry, no hidden
        # one-shot member, no counter value)
        counter, meter = self._direct_config(t, te)
        kind = te.action.WhichOneof("type")
        kw: dict = {}
        oneshot_plan = None
        if kind is None:
            raise _bad(f"table {tn}: an action is required")
        if t.implementation_id:
            prof = self.profiles[t.implementation_id]
            if kind == "action":
                raise _bad(f"table {tn} uses action profile {prof.preamble.name}: give a member, a group or a "
                           f"one-shot action set")
            if kind == "action_profile_member_id":
                kw["member"] = te.action.action_profile_member_id
                canon.action.action_profile_member_id = kw["member"]
            elif kind == "action_profile_group_id":
                if not prof.with_selector:
                    raise _bad(f"{prof.preamble.name} is not an action selector: no groups")
                kw["group"] = te.action.action_profile_group_id
                canon.action.action_profile_group_id = kw["group"]
            else:
                oneshot_plan, aset = self._plan_oneshot(t, prof, te.action.action_profile_action_set)
                canon.action.action_profile_action_set.CopyFrom(aset)
        else:
            if kind != "action":
                raise _bad(f"table {tn} has no action profile: give an action")
            aid, params, ca = self._action(te.action.action, t)
            kw = {"action": aid, "params": params}
            canon.action.action.CopyFrom(ca)
        self.sw.check_entry(tn, match, priority=te.priority, insert=ut == INSERT, oneshot=oneshot_plan is not None,
                            **kw)
        new_oneshot = None
        try:
            if oneshot_plan is not None:
                # the hidden members and group come first (the entry refers to them); a refusal removes them
                new_oneshot, kw = self._make_oneshot(prof, *oneshot_plan)
            if ut == INSERT:
                self.sw.insert_entry(tn, match, priority=te.priority, **kw)
            else:
                self.sw.modify_entry(tn, match, priority=te.priority, **kw)
        except BaseException:
            if new_oneshot is not None:
                self._drop_oneshot(*new_oneshot)
            raise
        if counter is not None or meter is not None:
            e = self.sw.get_entry(tn, match, te.priority)
            if counter is not None:
                e.packets, e.bytes = counter
            if meter is not None:
                e.meter.set(meter, self.sw.now_ns)
        if ut == MODIFY:
            self._unref(shadow[key], t)
            self._free_oneshot((tid, key))
        if new_oneshot is not None:
            self.oneshot[(tid, key)] = new_oneshot
        shadow[key] = canon
        self._ref(canon, t)

    def _direct_config(self, t, te: p4r.TableEntry) -> tuple[tuple[int, int] | None, object]:
        """The validated direct counter data ((packets, bytes) or None) and direct meter config (or None) that
        a table entry write carries."""
        counter = meter = None
        if te.HasField("counter_data"):
            if t.preamble.id not in self.direct_counter:
                raise _bad(f"table {t.preamble.name} has no direct counter: the entry cannot carry counter_data")
            counter = (te.counter_data.packet_count, te.counter_data.byte_count)
        if te.HasField("meter_config"):
            if t.preamble.id not in self.direct_meter:
                raise _bad(f"table {t.preamble.name} has no direct meter: the entry cannot carry meter_config")
            meter = self._meter_cfg(te.meter_config)
        return counter, meter

    def _ref(self, te: p4r.TableEntry, t) -> None:
        k = te.action.WhichOneof("type")
        if k == "action_profile_member_id":
            self.refs[("m", t.implementation_id, te.action.action_profile_member_id)] += 1
        elif k == "action_profile_group_id":
            self.refs[("g", t.implementation_id, te.action.action_profile_group_id)] += 1

    def _unref(self, te: p4r.TableEntry, t) -> None:
        k = te.action.WhichOneof("type")
        if k == "action_profile_member_id":
            self.refs[("m", t.implementation_id, te.action.action_profile_member_id)] -= 1
        elif k == "action_profile_group_id":
            self.refs[("g", t.implementation_id, te.action.action_profile_group_id)] -= 1

    def _plan_oneshot(self, t, prof, aset: p4r.ActionProfileActionSet):
        """Validate a one-shot action set without creating anything: ((actions as [(action id, params, weight)],
        random selection?), canonical set)."""
        pn = prof.preamble.name
        if not aset.action_profile_actions:
            raise _bad(f"table {t.preamble.name}: empty one-shot action set")
        if aset.action_selection_mode == RANDOM and not prof.with_selector:
            raise _bad(f"{pn} is not an action selector: no random selection")
        canon = p4r.ActionProfileActionSet(action_selection_mode=aset.action_selection_mode,
                                           size_semantics=aset.size_semantics)
        plan = []
        for apa in aset.action_profile_actions:
            if apa.weight < 1:
                raise _bad(f"table {t.preamble.name}: one-shot action weight must be >= 1, got {apa.weight}")
            aid, params, ca = self._action(apa.action, t)
            self.sw.check_action(aid, params)
            c = canon.action_profile_actions.add(action=ca, weight=apa.weight)
            if apa.HasField("watch_port"):
                c.watch_port = apa.watch_port
            elif apa.HasField("watch"):
                c.watch = apa.watch
            plan.append((aid, params, apa.weight))
        if not prof.with_selector and (len(plan) != 1 or plan[0][2] != 1):
            raise _bad(f"{pn} is not an action selector: a one-shot set must hold one action of weight 1")
        room = self.sw.profile_room(pn)
        if len(plan) > room:
            raise SwitchError("RESOURCE_EXHAUSTED", f"{pn} has room for {room} more member(s); the one-shot set "
                                                    f"needs {len(plan)}")
        return (plan, aset.action_selection_mode == RANDOM), canon

    def _make_oneshot(self, prof, plan: list, random_selection: bool):
        """Create the hidden members (+ group for a selector) of a planned one-shot set: ((profile, group,
        members) to free it later, the Switch keyword naming it)."""
        pn = prof.preamble.name
        mids: list[int] = []
        members: list[int] = []
        try:
            for aid, params, weight in plan:
                mid = self._hid()
                self.sw.insert_member(pn, mid, aid, params)
                mids.append(mid)
                members += [mid] * weight
            if not prof.with_selector:
                return (pn, None, mids), {"member": mids[0]}
            gid = self._hid()
            self.sw.insert_group(pn, gid, members, 0, random_selection=random_selection)
            return (pn, gid, mids), {"group": gid}
        except BaseException:
            self._drop_oneshot(pn, None, mids)
            raise

    def _drop_oneshot(self, pn: str, gid: int | None, mids: list[int]) -> None:
        if gid is not None:
            self.sw.delete_group(pn, gid)
        for m in mids:
            self.sw.delete_member(pn, m)

    def _free_oneshot(self, k) -> None:
        o = self.oneshot.pop(k, None)
        if o is not None:
            self._drop_oneshot(*o)

    def _w_default(self, ut, t, te) -> None:
        tn = t.preamble.name
        if ut != MODIFY:
            raise _bad(f"table {tn}: the default entry can only be modified (MODIFY), not inserted or deleted")
        if te.match or te.priority:
            raise _bad(f"table {tn}: a default entry has no match fields and no priority")
        kind = te.action.WhichOneof("type")
        if kind is None:
            self.sw.reset_default_action(tn)
            return
        if kind != "action":
            raise SwitchError("UNIMPLEMENTED", f"table {tn}: default entries with action profiles")
        if t.const_default_action_id:
            raise SwitchError("PERMISSION_DENIED", f"the default action of table {tn} is const")
        aid, params, _ = self._action(te.action.action, t, default=True)
        self.sw.set_default_action(tn, aid, params)

    # -- action profiles ---------------------------------------------------------------------------------------
    def _profile(self, pid: int):
        p = self.profiles.get(pid)
        if p is None:
            raise _bad(f"unknown action profile id {pid:#x}")
        return p

    def _w_action_profile_member(self, ut, m: p4r.ActionProfileMember) -> None:
        prof = self._profile(m.action_profile_id)
        pn = prof.preamble.name
        if ut == DELETE:
            if self.refs[("m", m.action_profile_id, m.member_id)] > 0:
                raise SwitchError("FAILED_PRECONDITION", f"member {m.member_id} of {pn} is used by a table entry")
            self.sw.delete_member(pn, m.member_id)
            return
        aid, params, _ = self._action(m.action, profile=prof)
        if ut == INSERT:
            self.sw.insert_member(pn, m.member_id, aid, params)
        else:
            self.sw.modify_member(pn, m.member_id, aid, params)

    def _w_action_profile_group(self, ut, g: p4r.ActionProfileGroup) -> None:
        prof = self._profile(g.action_profile_id)
        pn = prof.preamble.name
        k = (g.action_profile_id, g.group_id)
        if ut == DELETE:
            if k not in self.groups:
                raise SwitchError("NOT_FOUND", f"no group {g.group_id} in {pn}")
            if self.refs[("g", g.action_profile_id, g.group_id)] > 0:
                raise SwitchError("FAILED_PRECONDITION", f"group {g.group_id} of {pn} is used by a table entry")
            self.sw.delete_group(pn, g.group_id)
            del self.groups[k]
            return
        if not prof.with_selector:
            raise _bad(f"{pn} is not an action selector: no groups")
        if g.max_size < 0:
            raise _bad(f"group {g.group_id}: max_size must be >= 0")
        members: list[int] = []
        seen = set()
        canon = p4r.ActionProfileGroup(action_profile_id=g.action_profile_id, group_id=g.group_id,
                                       max_size=g.max_size)
        for mm in g.members:
            if mm.member_id in seen:
                raise _bad(f"group {g.group_id}: member {mm.member_id} listed twice")
            seen.add(mm.member_id)
            if mm.weight < 1:
                raise _bad(f"group {g.group_id}: member {mm.member_id} weight must be >= 1, got {mm.weight}")
            members += [mm.member_id] * mm.weight
            canon.members.append(mm)
        if ut == INSERT:
            self.sw.insert_group(pn, g.group_id, members, g.max_size)
        else:
            if k not in self.groups:
                raise SwitchError("NOT_FOUND", f"no group {g.group_id} in {pn}")
            self.sw.modify_group(pn, g.group_id, members, g.max_size)
        self.groups[k] = canon

    # -- counters, meters, registers -----------------------------------------------------------------------------
    @staticmethod
    def _modify_only(ut, what: str) -> None:
        if ut != MODIFY:
            raise _bad(f"{what} can only be modified (MODIFY), not inserted or deleted")

    @staticmethod
    def _indexes(e, size: int, what: str) -> range:
        if not e.HasField("index"):
            return range(size)
        i = e.index.index
        if not 0 <= i < size:
            raise SwitchError("OUT_OF_RANGE", f"{what}: index {i} out of range (size {size})")
        return range(i, i + 1)

    def _w_counter_entry(self, ut, c: p4r.CounterEntry) -> None:
        self._modify_only(ut, "counters")
        ci = self.counters.get(c.counter_id)
        if ci is None:
            raise _bad(f"unknown counter id {c.counter_id:#x}")
        for i in self._indexes(c, ci.size, ci.preamble.name):
            self.sw.counter_write(ci.preamble.name, i, c.data.packet_count, c.data.byte_count)

    @staticmethod
    def _meter_cfg(cfg: p4r.MeterConfig):
        from ...backend.runtime import MeterConfig
        if min(cfg.cir, cfg.cburst, cfg.pir, cfg.pburst) < 0:
            raise _bad("meter rates and bursts must be >= 0")
        if cfg.cir > cfg.pir:
            raise _bad(f"meter cir {cfg.cir} above pir {cfg.pir}")
        return MeterConfig(cfg.cir, cfg.cburst, cfg.pir, cfg.pburst)

    def _w_meter_entry(self, ut, m: p4r.MeterEntry) -> None:
        self._modify_only(ut, "meters")
        mi = self.meters.get(m.meter_id)
        if mi is None:
            raise _bad(f"unknown meter id {m.meter_id:#x}")
        cfg = self._meter_cfg(m.config) if m.HasField("config") else None
        meter = self.sw.instances[mi.preamble.name]
        for i in self._indexes(m, mi.size, mi.preamble.name):
            meter.cells[i].set(cfg, self.sw.now_ns)

    def _register_width(self, r) -> int:
        bs = r.type_spec.bitstring
        return bs.bit.bitwidth or bs.int.bitwidth or bs.varbit.max_bitwidth

    def _w_register_entry(self, ut, r: p4r.RegisterEntry) -> None:
        self._modify_only(ut, "registers")
        ri = self.registers.get(r.register_id)
        if ri is None:
            raise _bad(f"unknown register id {r.register_id:#x}")
        if r.data.WhichOneof("data") != "bitstring":
            raise _bad(f"register {ri.preamble.name}: data must be a bitstring")
        v = decode(r.data.bitstring, self._register_width(ri), f"register {ri.preamble.name}")
        for i in self._indexes(r, ri.size, ri.preamble.name):
            self.sw.register_write(ri.preamble.name, i, v)

    def _entry_of(self, te: p4r.TableEntry, kind: str):
        """The runtime entry a DirectCounterEntry/DirectMeterEntry names."""
        t = self._table(te.table_id)
        res = self.direct_counter if kind == "counter" else self.direct_meter
        if te.table_id not in res:
            raise _bad(f"table {t.preamble.name} has no direct {kind}")
        fms, match = self._match(t, te.match)
        e = self.sw.get_entry(t.preamble.name, match, te.priority)
        if e is None:
            raise SwitchError("NOT_FOUND", f"no such entry in table {t.preamble.name}")
        return e

    def _w_direct_counter_entry(self, ut, d: p4r.DirectCounterEntry) -> None:
        self._modify_only(ut, "direct counters")
        e = self._entry_of(d.table_entry, "counter")
        e.packets, e.bytes = d.data.packet_count, d.data.byte_count

    def _w_direct_meter_entry(self, ut, d: p4r.DirectMeterEntry) -> None:
        self._modify_only(ut, "direct meters")
        e = self._entry_of(d.table_entry, "meter")
        e.meter.set(self._meter_cfg(d.config) if d.HasField("config") else None, self.sw.now_ns)

    # -- packet replication engine, digests ----------------------------------------------------------------------
    def _w_packet_replication_engine_entry(self, ut, p: p4r.PacketReplicationEngineEntry) -> None:
        kind = p.WhichOneof("type")
        if kind == "clone_session_entry":
            self._w_clone_session(ut, p.clone_session_entry)
            return
        if kind != "multicast_group_entry":
            raise _bad("empty PacketReplicationEngineEntry")
        g = p.multicast_group_entry
        gid = g.multicast_group_id
        if gid == 0:
            raise _bad("multicast group id 0 is invalid")
        if ut == DELETE:
            if gid not in self.mcast:
                raise SwitchError("NOT_FOUND", f"no multicast group {gid}")
            self.sw.delete_mcast_group(gid)
            del self.mcast[gid]
            return
        if ut == INSERT and gid in self.mcast:
            raise SwitchError("ALREADY_EXISTS", f"multicast group {gid} exists")
        if ut == MODIFY and gid not in self.mcast:
            raise SwitchError("NOT_FOUND", f"no multicast group {gid}")
        reps = []
        seen = set()
        for r in g.replicas:
            if r.WhichOneof("port_kind") == "port":
                port = decode(r.port, 9, f"multicast group {gid} replica port")
            else:
                port = r.egress_port
                if port >= 511:
                    raise _bad(f"multicast group {gid}: replica port {port} out of range")
            if (port, r.instance) in seen:
                raise _bad(f"multicast group {gid}: replica ({port}, {r.instance}) listed twice")
            seen.add((port, r.instance))
            reps.append((port, r.instance))
        self.sw.set_mcast_group(gid, reps)
        c = p4r.MulticastGroupEntry()
        c.CopyFrom(g)
        self.mcast[gid] = c

    def _w_clone_session(self, ut, c: p4r.CloneSessionEntry) -> None:
        """Clone (mirroring) sessions for v1model clone(): replicas and packet_length_bytes truncation."""
        sid = c.session_id
        if sid == 0:
            raise _bad("clone session id 0 is invalid")
        if ut == DELETE:
            if sid not in self.clones:
                raise SwitchError("NOT_FOUND", f"no clone session {sid}")
            self.sw.delete_clone_session(sid)
            del self.clones[sid]
            return
        if ut == INSERT and sid in self.clones:
            raise SwitchError("ALREADY_EXISTS", f"clone session {sid} exists")
        if ut == MODIFY and sid not in self.clones:
            raise SwitchError("NOT_FOUND", f"no clone session {sid}")
        reps = []
        for r in c.replicas:
            if r.WhichOneof("port_kind") == "port":
                port = decode(r.port, 9, f"clone session {sid} replica port")
            else:
                port = r.egress_port
                if port >= 511:
                    raise _bad(f"clone session {sid}: replica port {port} out of range")
            if (port, r.instance) in reps:
                raise _bad(f"clone session {sid}: replica ({port}, {r.instance}) listed twice")
            reps.append((port, r.instance))
        self.sw.set_clone_session(sid, reps, c.packet_length_bytes)
        keep = p4r.CloneSessionEntry()
        keep.CopyFrom(c)
        self.clones[sid] = keep

    def _w_value_set_entry(self, ut, v: p4r.ValueSetEntry) -> None:
        """P4Runtime 9.8: a value set is written whole with MODIFY (its members replace the old ones)."""
        self._modify_only(ut, "value_set entries")
        vs = self.value_sets.get(v.value_set_id)
        if vs is None:
            raise SwitchError("NOT_FOUND", f"unknown value_set id {v.value_set_id:#x}")
        name = vs.preamble.name
        w = vs.match[0].bitwidth
        values = []
        for mem in v.members:
            if len(mem.match) != 1 or mem.match[0].field_id != 1 or mem.match[0].WhichOneof("field_match_type") != "exact":
                raise _bad(f"value_set {name}: a member is one exact match of field 1")
            values.append(decode(mem.match[0].exact.value, w, f"value_set {name} member"))
        self.sw.set_value_set(name, values)

    def _w_digest_entry(self, ut, d: p4r.DigestEntry) -> None:
        if d.digest_id not in self.digests:
            raise _bad(f"unknown digest id {d.digest_id:#x}")
        if ut == DELETE:
            if d.digest_id not in self.digest_config:
                raise SwitchError("NOT_FOUND", f"digest {d.digest_id:#x} is not configured")
            del self.digest_config[d.digest_id]
            return
        if ut == INSERT and d.digest_id in self.digest_config:
            raise SwitchError("ALREADY_EXISTS", f"digest {d.digest_id:#x} is already configured")
        if ut == MODIFY and d.digest_id not in self.digest_config:
            raise SwitchError("NOT_FOUND", f"digest {d.digest_id:#x} is not configured")
        if d.config.max_list_size < 0 or d.config.max_timeout_ns < 0 or d.config.ack_timeout_ns < 0:
            raise _bad("digest config values must be >= 0")
        c = p4r.DigestEntry.Config()
        c.CopyFrom(d.config)
        self.digest_config[d.digest_id] = c

    # ==== read ===================================================================================================
    def read(self, entity: p4r.Entity) -> Iterator[p4r.Entity]:
        kind = entity.WhichOneof("entity")
        if kind is None:
            raise _bad("empty Entity in read request")
        fn = getattr(self, f"_r_{kind}", None)
        if fn is None:
            raise SwitchError("UNIMPLEMENTED", f"{kind} is not supported by this target")
        return fn(getattr(entity, kind))

    @staticmethod
    def _entry_msg(tid: int, d: dict, is_const: bool) -> p4r.TableEntry:
        """The canonical TableEntry of one entry as :meth:`Switch.entries` lists it."""
        te = p4r.TableEntry(table_id=tid, priority=d["priority"], is_const=is_const)
        for fid, m in sorted(d["match"].items()):
            fm = te.match.add(field_id=fid)
            if m[0] == "exact":
                fm.exact.value = m[1]
            elif m[0] == "optional":
                fm.optional.value = m[1]
            elif m[0] == "lpm":
                fm.lpm.value, fm.lpm.prefix_len = m[1], m[2]
            elif m[0] == "ternary":
                fm.ternary.value, fm.ternary.mask = m[1], m[2]
            else:
                fm.range.low, fm.range.high = m[1], m[2]
        if "action_id" in d:
            te.action.action.action_id = d["action_id"]
            for pid, v in sorted(d["params"].items()):
                te.action.action.params.add(param_id=pid, value=v)
        return te

    def _table_entries(self, t) -> Iterator[tuple[p4r.TableEntry, dict]]:
        """(canonical entry, Switch match) of every entry of table ``t``, const entries included."""
        tid = t.preamble.id
        if t.is_const_table:
            for d in self.sw.entries(tid):
                te = self._entry_msg(tid, d, True)
                yield te, self._match(t, te.match)[1]
            return
        for te in self.shadow[tid].values():
            yield te, self._match(t, te.match)[1]

    def _filter_tables(self, tid: int):
        if tid == 0:
            return [self.tables[k] for k in sorted(self.tables)]
        return [self._table(tid)]

    def _r_table_entry(self, f: p4r.TableEntry) -> Iterator[p4r.Entity]:
        tables = self._filter_tables(f.table_id)
        want_counter, want_meter = f.HasField("counter_data"), f.HasField("meter_config")
        if f.is_default_action:
            for t in tables:
                tb = self.sw.tables[t.preamble.name]
                te = p4r.TableEntry(table_id=t.preamble.id, is_default_action=True)
                if tb.default[0] >= 0:
                    te.action.action.CopyFrom(self._action_msg(*tb.default))
                yield _entity(table_entry=te)
            return
        key = None
        if f.match:
            if f.table_id == 0:
                raise _bad("a read with match fields needs a table id")
            fms, _ = self._match(tables[0], f.match)
            key = self._key(fms, f.priority)
        for t in tables:
            for te, match in self._table_entries(t):
                if key is not None and self._key(list(te.match), te.priority) != key:
                    continue
                if want_counter or want_meter:
                    out = p4r.TableEntry()
                    out.CopyFrom(te)
                    e = self.sw.get_entry(t.preamble.name, match, te.priority)
                    if want_counter and t.preamble.id in self.direct_counter:
                        out.counter_data.packet_count, out.counter_data.byte_count = e.packets, e.bytes
                    if want_meter and t.preamble.id in self.direct_meter and e.meter.config is not None:
                        self._cfg_msg(e.meter.config, out.meter_config)
                    te = out
                yield _entity(table_entry=te)

    @staticmethod
    def _cfg_msg(cfg, msg: p4r.MeterConfig) -> None:
        msg.cir, msg.cburst, msg.pir, msg.pburst = cfg.cir, cfg.cburst, cfg.pir, cfg.pburst

    def _r_action_profile_member(self, f: p4r.ActionProfileMember) -> Iterator[p4r.Entity]:
        pids = sorted(self.profiles) if f.action_profile_id == 0 else [self._profile(f.action_profile_id).preamble.id]
        for pid in pids:
            prof = self.sw.instances[self.profiles[pid].preamble.name]
            for mid in sorted(prof.members):
                if mid < 0 or (f.member_id and mid != f.member_id):
                    continue
                a, args = prof.members[mid]
                yield _entity(action_profile_member=p4r.ActionProfileMember(
                    action_profile_id=pid, member_id=mid, action=self._action_msg(a, args)))

    def _r_action_profile_group(self, f: p4r.ActionProfileGroup) -> Iterator[p4r.Entity]:
        if f.action_profile_id:
            self._profile(f.action_profile_id)
        for (pid, gid), g in sorted(self.groups.items()):
            if (f.action_profile_id and pid != f.action_profile_id) or (f.group_id and gid != f.group_id):
                continue
            yield _entity(action_profile_group=g)

    def _r_counter_entry(self, f: p4r.CounterEntry) -> Iterator[p4r.Entity]:
        if f.counter_id and f.counter_id not in self.counters:
            raise _bad(f"unknown counter id {f.counter_id:#x}")
        for cid in ([f.counter_id] if f.counter_id else sorted(self.counters)):
            ci = self.counters[cid]
            c = self.sw.instances[ci.preamble.name]
            for i in self._indexes(f, ci.size, ci.preamble.name):
                yield _entity(counter_entry=p4r.CounterEntry(
                    counter_id=cid, index=p4r.Index(index=i),
                    data=p4r.CounterData(packet_count=c.packets[i], byte_count=c.bytes[i])))

    def _r_meter_entry(self, f: p4r.MeterEntry) -> Iterator[p4r.Entity]:
        if f.meter_id and f.meter_id not in self.meters:
            raise _bad(f"unknown meter id {f.meter_id:#x}")
        for mid in ([f.meter_id] if f.meter_id else sorted(self.meters)):
            mi = self.meters[mid]
            m = self.sw.instances[mi.preamble.name]
            for i in self._indexes(f, mi.size, mi.preamble.name):
                out = p4r.MeterEntry(meter_id=mid, index=p4r.Index(index=i))
                if m.cells[i].config is not None:
                    self._cfg_msg(m.cells[i].config, out.config)
                yield _entity(meter_entry=out)

    def _r_value_set_entry(self, f: p4r.ValueSetEntry) -> Iterator[p4r.Entity]:
        if f.value_set_id and f.value_set_id not in self.value_sets:
            raise _bad(f"unknown value_set id {f.value_set_id:#x}")
        for vid in ([f.value_set_id] if f.value_set_id else sorted(self.value_sets)):
            out = p4r.ValueSetEntry(value_set_id=vid)
            for v in self.sw.value_set_members(self.value_sets[vid].preamble.name):
                mem = out.members.add()
                fm = mem.match.add()
                fm.field_id = 1
                fm.exact.value = encode(v)
            yield _entity(value_set_entry=out)

    def _r_register_entry(self, f: p4r.RegisterEntry) -> Iterator[p4r.Entity]:
        if f.register_id and f.register_id not in self.registers:
            raise _bad(f"unknown register id {f.register_id:#x}")
        for rid in ([f.register_id] if f.register_id else sorted(self.registers)):
            ri = self.registers[rid]
            for i in self._indexes(f, ri.size, ri.preamble.name):
                out = p4r.RegisterEntry(register_id=rid, index=p4r.Index(index=i))
                out.data.bitstring = encode(self.sw.register_read(ri.preamble.name, i))
                yield _entity(register_entry=out)

    def _direct_entries(self, te: p4r.TableEntry, res: dict):
        if te.table_id:
            t = self._table(te.table_id)
            if te.table_id not in res:
                raise _bad(f"table {t.preamble.name} has no direct {'counter' if res is self.direct_counter else 'meter'}")
            tables = [t]
        else:
            tables = [self.tables[k] for k in sorted(res) if k in self.tables]
        key = None
        if te.match:
            key = self._key(self._match(tables[0], te.match)[0], te.priority)
        for t in tables:
            for e, match in self._table_entries(t):
                if key is not None and self._key(list(e.match), e.priority) != key:
                    continue
                yield (p4r.TableEntry(table_id=e.table_id, match=e.match, priority=e.priority),
                       self.sw.get_entry(t.preamble.name, match, e.priority))

    def _r_direct_counter_entry(self, f: p4r.DirectCounterEntry) -> Iterator[p4r.Entity]:
        for te, e in self._direct_entries(f.table_entry, self.direct_counter):
            yield _entity(direct_counter_entry=p4r.DirectCounterEntry(
                table_entry=te, data=p4r.CounterData(packet_count=e.packets, byte_count=e.bytes)))

    def _r_direct_meter_entry(self, f: p4r.DirectMeterEntry) -> Iterator[p4r.Entity]:
        for te, e in self._direct_entries(f.table_entry, self.direct_meter):
            out = p4r.DirectMeterEntry(table_entry=te)
            if e.meter.config is not None:
                self._cfg_msg(e.meter.config, out.config)
            yield _entity(direct_meter_entry=out)

    def _r_packet_replication_engine_entry(self, f: p4r.PacketReplicationEngineEntry) -> Iterator[p4r.Entity]:
        kind = f.WhichOneof("type")
        if kind == "clone_session_entry":
            sid = f.clone_session_entry.session_id
            for k in sorted(self.clones):
                if not sid or k == sid:
                    yield _entity(packet_replication_engine_entry=p4r.PacketReplicationEngineEntry(
                        clone_session_entry=self.clones[k]))
            return
        if kind != "multicast_group_entry":
            raise _bad("PacketReplicationEngineEntry filter needs multicast_group_entry or clone_session_entry")
        gid = f.multicast_group_entry.multicast_group_id
        for k in sorted(self.mcast):
            if gid and k != gid:
                continue
            yield _entity(packet_replication_engine_entry=p4r.PacketReplicationEngineEntry(
                multicast_group_entry=self.mcast[k]))

    def _r_digest_entry(self, f: p4r.DigestEntry) -> Iterator[p4r.Entity]:
        if f.digest_id and f.digest_id not in self.digests:
            raise _bad(f"unknown digest id {f.digest_id:#x}")
        for did in sorted(self.digest_config):
            if f.digest_id and did != f.digest_id:
                continue
            yield _entity(digest_entry=p4r.DigestEntry(digest_id=did, config=self.digest_config[did]))

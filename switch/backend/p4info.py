"""P4Info (``p4.config.v1.P4Info``) from the typed IR, with p4c's id scheme.

Id = (resource type prefix << 24) | low 24 bits.  ``@id(N)`` is honoured first; the remaining
names of each resource type are sorted and hashed with Jenkins' one-at-a-time hash of the fully
qualified name, with linear probing on collisions (the order p4c uses, so ids match p4c's).
Aliases are the shortest unique dot-separated suffix of each name.
"""
from __future__ import annotations

from finsy.proto import p4i as p4info_pb2
from google.protobuf import text_format

from ..midend import ir
from ..midend import tir as T
from ..midend.tir import annotation

PREFIX = {"actions": 0x01, "tables": 0x02, "value_sets": 0x03, "controller_packet_metadata": 0x04,
          "action_profiles": 0x11, "counters": 0x12, "direct_counters": 0x13, "meters": 0x14,
          "direct_meters": 0x15, "registers": 0x16, "digests": 0x17}


def jenkins_one_at_a_time(data: bytes) -> int:
    h = 0
    for b in data:
        h = (h + b) & 0xFFFFFFFF
        h = (h + (h << 10)) & 0xFFFFFFFF
        h ^= h >> 6
    h = (h + (h << 3)) & 0xFFFFFFFF
    h ^= h >> 11
    h = (h + (h << 15)) & 0xFFFFFFFF
    return h


def assign_ids(kind: str, names: list[str], fixed: dict[str, int], taken: set[int]) -> dict[str, int]:
    """p4c's scheme for one resource type: @id first, then sorted names by hash + linear probing."""
    prefix = PREFIX[kind]
    out: dict[str, int] = {}
    for n, i in fixed.items():
        out[n] = i if i >> 24 else (prefix << 24) | i
        taken.add(out[n])
    for n in sorted(set(names) - set(out)):
        v = jenkins_one_at_a_time(n.encode())
        start = v
        while True:
            cid = (prefix << 24) | (v & 0xFFFFFF)
            if cid not in taken:
                break
            v = (v + 1) & 0xFFFFFFFF
            if v == start:
                raise ValueError(f"no id left for {n}")
        out[n] = cid
        taken.add(cid)
    return out


def aliases(names: list[str]) -> dict[str, str]:
    parts = {n: n.split(".") for n in names}
    out = {}
    for n, p in parts.items():
        for k in range(1, len(p) + 1):
            suf = ".".join(p[-k:])
            if sum(1 for q in parts.values() if ".".join(q[-k:]) == suf) == 1:
                out[n] = suf
                break
        else:
            out[n] = n
    return out


def _annot_id(annots) -> int | None:
    a = annotation(annots, "id")
    if a and a.args and isinstance(a.args[0], int) and not isinstance(a.args[0], bool):
        return a.args[0]
    return None


def _annot_strings(annots) -> list[str]:
    out = []
    for a in annots:
        if a.name in ("name", "id", "defaultonly", "tableonly"):
            continue
        if a.args and all(isinstance(x, str) for x in a.args):
            out.append("@" + a.name + "(" + ", ".join(f'"{x}"' for x in a.args) + ")")
        elif not a.args:
            out.append("@" + a.name)
    return out


def _direct_calls(node) -> list[ir.ActionIR]:
    """The actions a control body calls directly (not through a table), in source order."""
    from ..midend.analysis import children
    out = []
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, T.Call) and n.kind == "action":
            out.append(n.target)
        stack.extend(reversed(list(children(n))))
    return out


def p4c_action_order(p: ir.ProgramIR) -> list[ir.ActionIR]:
    """The actions P4Info lists, in p4c's order: control by control (V1Switch's order), first the top-level
    actions the control uses, in the order of their first use (p4c's front end copies each into the control, ahead
    of its own declarations: LocalizeAllActions; the inliner's own copies of those a table binds count as top-level
    ones), then the control's own actions in declaration order; only
    actions a table lists or the control's body calls directly (p4c removes the others; a call inside an action
    is inlined into it), each once."""
    local_ids = {id(a) for b in p.blocks.values() for a in b.actions}
    out: list[ir.ActionIR] = []
    seen: set[str] = set()
    for b in p.blocks.values():
        if b.kind != "control":
            continue
        uses = [a for t in b.tables for a in t.actions] + _direct_calls(b.apply)
        used = {id(a) for a in uses}
        own = [a for a in b.actions if id(a) in used and not a.decl.localized]
        for a, top in b.inlined_actions:        # inlined by the inliner: placed by their source position
            if top:
                uses.append(a)
                continue
            after = [i for i, x in enumerate(own) if x.decl.loc.file == a.decl.loc.file
                     and (x.decl.loc.line, x.decl.loc.col) > (a.decl.loc.line, a.decl.loc.col)]
            own.insert(after[0] if after else len(own), a)
        for a in [a for a in uses if id(a) not in local_ids or a.decl.localized] + own:
            if a.fqname not in seen:
                seen.add(a.fqname)
                out.append(a)
    return out


def _calls_extern_function(node) -> bool:
    from ..midend.analysis import children
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, T.Call) and n.kind == "efunc":
            return True
        stack.extend(children(n))
    return False


def _p4c_writes_type_info(p: ir.ProgramIR, in_tables: set[int], listed: set[int]) -> bool:
    """Whether p4c's P4Info has a ``type_info`` (empty or not): its serializer creates it on the first type it
    converts, which happens for any table (its match fields), any action parameter it lists, any extern instance,
    any controller header field, and any extern function called in a control's body or in an action it keeps
    (``listed``: p4c removes unused actions first), whether or not a type is then recorded there."""
    if p.tables or p.instances or any(ht.fields for _, ht, _ in p.controller_headers) or p.digests:
        return True
    if any(a.params for b in p.blocks.values() for a in b.actions if id(a) in in_tables):
        return True
    for b in p.blocks.values():
        if b.kind == "control" and (_calls_extern_function(b.apply)
                                    or any(a.body is not None and id(a) in listed and _calls_extern_function(a.body)
                                           for a in b.actions)):
            return True
    return False


def _bytes(value: int, width: int) -> bytes:
    """A value as p4c writes it in P4Info (initial_default_action arguments): big-endian, padded to the width."""
    return int(value).to_bytes((width + 7) // 8, "big")


class P4InfoBuilder:
    """P4Info of a program, entities in p4c's order: each kind in the order p4c's serializer visits the program
    (top-level extern instances, then the V1Switch blocks in order, each block's declarations in source order)
    and actions as :func:`p4c_action_order` says."""

    def __init__(self, prog: ir.ProgramIR):
        self.prog = prog

    def build(self) -> p4info_pb2.P4Info:
        p = self.prog
        info = p4info_pb2.P4Info()
        info.pkg_info.arch = "v1model"
        taken: set[int] = set()
        used_actions = p4c_action_order(p)
        by_kind: dict[str, list] = {"actions": used_actions, "tables": p.tables}
        for kind, ext in (("counters", "counter"), ("direct_counters", "direct_counter"), ("meters", "meter"),
                          ("direct_meters", "direct_meter"), ("registers", "register")):
            by_kind[kind] = [i for i in p.instances if i.extern == ext]
        by_kind["action_profiles"] = [i for i in p.instances if i.extern in ("action_profile", "action_selector")]
        by_kind["value_sets"] = list(p.value_sets)
        ids: dict[str, dict[str, int]] = {}
        all_names = []
        for kind, objs in by_kind.items():
            fixed = {o.fqname: _annot_id(o.annots) for o in objs if _annot_id(o.annots) is not None}
            ids[kind] = assign_ids(kind, [o.fqname for o in objs], fixed, taken)
            all_names += [o.fqname for o in objs]
        # p4c names a controller header's entity by its annotation but hashes its id from the header type's name
        by_type = assign_ids("controller_packet_metadata", [ht.name for _, ht, _ in p.controller_headers], {}, taken)
        ids["controller_packet_metadata"] = {n: by_type[ht.name] for n, ht, _ in p.controller_headers}
        ids["digests"] = assign_ids("digests", [d.name for d in p.digests], {}, taken)
        all_names += [n for n, _, _ in p.controller_headers] + [d.name for d in p.digests]
        al = aliases(sorted(set(all_names)))
        self.ids = ids

        def pre(msg, kind, name, annots=()):
            msg.preamble.id = ids[kind][name]
            msg.preamble.name = name
            msg.preamble.alias = al.get(name, name)
            for s in _annot_strings(annots):
                msg.preamble.annotations.append(s)

        for t in p.tables:
            m = info.tables.add()
            pre(m, "tables", t.fqname, t.annots)
            for i, k in enumerate(t.keys):
                f = m.match_fields.add()
                f.id = i + 1
                f.name = k.name
                if isinstance(getattr(k.expr, "type", None), ir.ErrorT):
                    # p4c: an error key has no bitwidth; its members are listed in type_info
                    for member in p.errors.members:
                        info.type_info.error.members.append(member)
                else:
                    f.bitwidth = k.width
                if k.match_kind in ("exact", "lpm", "ternary", "range", "optional"):
                    f.match_type = getattr(p4info_pb2.MatchField, k.match_kind.upper())
                else:
                    f.other_match_type = k.match_kind
            for a in t.actions:
                r = m.action_refs.add()
                r.id = ids["actions"][a.fqname]
                r.scope = getattr(p4info_pb2.ActionRef, t.action_scopes[a.fqname])
                if r.scope == p4info_pb2.ActionRef.DEFAULT_ONLY:
                    r.annotations.append("@defaultonly")
                elif r.scope == p4info_pb2.ActionRef.TABLE_ONLY:
                    r.annotations.append("@tableonly")
            if t.default_action is not None:
                # p4c: the default action at pipeline load (P4Runtime 1.4), with its arguments' values
                da = ids["actions"][t.default_action.fqname]
                if t.const_default:
                    m.const_default_action_id = da
                m.initial_default_action.action_id = da
                for i, (prm, v) in enumerate(zip(t.default_action.params, t.default_args)):
                    arg = m.initial_default_action.arguments.add()
                    arg.param_id = i + 1
                    arg.value = _bytes(v, prm.type.width)
            if t.implementation is not None:
                m.implementation_id = ids["action_profiles"][t.implementation.fqname]
            if t.direct_counter is not None:
                m.direct_resource_ids.append(ids["direct_counters"][t.direct_counter.fqname])
            if t.direct_meter is not None:
                m.direct_resource_ids.append(ids["direct_meters"][t.direct_meter.fqname])
            m.size = t.size
            if t.const_entries:
                m.is_const_table = True
            if t.entries:
                m.has_initial_entries = True      # const or not (P4Runtime 1.4), as p4c sets it
        in_tables = {id(a) for t in p.tables for a in [*t.actions, t.default_action]}
        for a in used_actions:
            m = info.actions.add()
            pre(m, "actions", a.fqname, a.annots)
            if id(a) not in in_tables:
                continue        # called directly only: p4c's front end binds every parameter (RemoveActionParameters)
            for i, prm in enumerate(a.params):
                x = m.params.add()
                x.id = i + 1
                x.name = prm.name
                x.bitwidth = prm.type.width
        for inst in by_kind["action_profiles"]:
            m = info.action_profiles.add()
            pre(m, "action_profiles", inst.fqname, inst.annots)
            for t in inst.tables:
                m.table_ids.append(ids["tables"][t.fqname])
            m.with_selector = inst.extern == "action_selector"
            m.size = inst.args[1] if m.with_selector else inst.args[0]
        units = {0: p4info_pb2.CounterSpec.PACKETS, 1: p4info_pb2.CounterSpec.BYTES, 2: p4info_pb2.CounterSpec.BOTH}
        munits = {0: p4info_pb2.MeterSpec.PACKETS, 1: p4info_pb2.MeterSpec.BYTES}
        for inst in by_kind["counters"]:
            m = info.counters.add()
            pre(m, "counters", inst.fqname, inst.annots)
            m.spec.unit = units[inst.args[1]]
            m.size = inst.args[0]
        for inst in by_kind["direct_counters"]:
            m = info.direct_counters.add()
            pre(m, "direct_counters", inst.fqname, inst.annots)
            m.spec.unit = units[inst.args[0]]
            if inst.tables:
                m.direct_table_id = ids["tables"][inst.tables[0].fqname]
        for inst in by_kind["meters"]:
            m = info.meters.add()
            pre(m, "meters", inst.fqname, inst.annots)
            m.spec.unit = munits[inst.args[1]]
            m.size = inst.args[0]
        for inst in by_kind["direct_meters"]:
            m = info.direct_meters.add()
            pre(m, "direct_meters", inst.fqname, inst.annots)
            m.spec.unit = munits[inst.args[0]]
            if inst.tables:
                m.direct_table_id = ids["tables"][inst.tables[0].fqname]
        for inst in by_kind["registers"]:
            m = info.registers.add()
            pre(m, "registers", inst.fqname, inst.annots)
            t = inst.type_args[0]
            if isinstance(t, ir.Bits) and t.signed:
                m.type_spec.bitstring.int.bitwidth = t.width
            else:
                m.type_spec.bitstring.bit.bitwidth = t.width
            m.size = inst.args[0]
        for vs in p.value_sets:
            # a value set of bit<W>: one unnamed EXACT match field with id 1, as p4c writes it
            m = info.value_sets.add()
            pre(m, "value_sets", vs.fqname, vs.annots)
            f = m.match.add()
            f.id = 1
            f.bitwidth = vs.width
            f.match_type = p4info_pb2.MatchField.EXACT
            m.size = vs.size
        for name, ht, annots in p.controller_headers:
            m = info.controller_packet_metadata.add()
            pre(m, "controller_packet_metadata", name, annots)
            for i, (fname, ft) in enumerate(ht.fields):
                x = m.metadata.add()
                x.id = i + 1
                x.name = fname
                x.bitwidth = ft.width
        for d in p.digests:
            m = info.digests.add()
            pre(m, "digests", d.name, [])
            m.type_spec.struct.name = d.name
            st = info.type_info.structs[d.name]
            for fname, ft in d.type.fields:
                mem = st.members.add()
                mem.name = fname
                if isinstance(ft, ir.BoolT):
                    mem.type_spec.bool.SetInParent()
                else:
                    mem.type_spec.bitstring.bit.bitwidth = ir.bit_width(ft)
        if _p4c_writes_type_info(p, in_tables, {id(a) for a in used_actions}):
            info.type_info.SetInParent()
        return info


HEADER = "# proto-file: p4/config/v1/p4info.proto\n# proto-message: p4.config.v1.P4Info\n\n"


def to_text(info: p4info_pb2.P4Info) -> str:
    return HEADER + text_format.MessageToString(info)


def from_text(text: str) -> p4info_pb2.P4Info:
    return text_format.Parse(text, p4info_pb2.P4Info())

"""Forwarding pipeline configs: the device config (P4 source text, raw or wrapped in the deprecated
``p4.tmp.P4DeviceConfig`` that ONOS and the p4lang tutorials send) and the check of a pushed P4Info against
the one this target compiles from the source.

P4Info choice: our P4Info generation follows p4c's id scheme, so a P4Info made by p4c (or by
``python -m switch.compile``) for the same source is identical in everything the wire protocol uses.  A pushed
P4Info that differs in an id, name, bit width, match type or parameter is rejected with INVALID_ARGUMENT naming
the first differing object (entries written with its ids would otherwise hit the wrong tables).  An empty P4Info
is accepted and ours is served.  The pushed P4Info is what GetForwardingPipelineConfig returns, byte for byte.
"""
from __future__ import annotations

from google.protobuf import descriptor_pb2, message_factory, unknown_fields
from google.protobuf.message import DecodeError

from finsy.proto import p4i

from ...errors import P4Error, SwitchError
from ..device import Device, Pipeline
from .entities import Entities


def _tmp_device_config_class():
    """``p4.tmp.P4DeviceConfig`` (p4lang/PI's p4/tmp/p4config.proto), built from a descriptor at import time
    since no installed package ships its stub: ``bool reassign = 1; Extras extras = 2; bytes device_data = 3``."""
    fd = descriptor_pb2.FileDescriptorProto(name="dlcp/p4/tmp/p4config.proto", package="p4.tmp", syntax="proto3")
    m = fd.message_type.add(name="P4DeviceConfig")
    ex = m.nested_type.add(name="Extras")
    kv = ex.nested_type.add(name="KvEntry", options=descriptor_pb2.MessageOptions(map_entry=True))
    F = descriptor_pb2.FieldDescriptorProto
    kv.field.add(name="key", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    kv.field.add(name="value", number=2, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    ex.field.add(name="kv", number=1, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED,
                 type_name=".p4.tmp.P4DeviceConfig.Extras.KvEntry")
    m.field.add(name="reassign", number=1, type=F.TYPE_BOOL, label=F.LABEL_OPTIONAL)
    m.field.add(name="extras", number=2, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                type_name=".p4.tmp.P4DeviceConfig.Extras")
    m.field.add(name="device_data", number=3, type=F.TYPE_BYTES, label=F.LABEL_OPTIONAL)
    from google.protobuf import descriptor_pool
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("p4.tmp.P4DeviceConfig"))


P4DeviceConfig = _tmp_device_config_class()


def source_of(device_config: bytes) -> str:
    """The P4 source text in a device config: the ``P4DeviceConfig`` wrapper is tried first (it must parse, have
    no unknown fields and carry data), then the bytes are taken as the source itself."""
    if not device_config:
        raise SwitchError("INVALID_ARGUMENT", "empty p4_device_config: send the P4 source text of the program")
    data = device_config
    try:
        w = P4DeviceConfig.FromString(device_config)
        if w.device_data and not len(unknown_fields.UnknownFieldSet(w)):
            data = w.device_data
    except (DecodeError, ValueError):
        pass
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SwitchError("INVALID_ARGUMENT", f"p4_device_config is neither P4 source text (UTF-8) nor a "
                                              f"p4.tmp.P4DeviceConfig wrapping it: byte {e.start} invalid") from None


_KINDS = ("tables", "actions", "action_profiles", "counters", "direct_counters", "meters", "direct_meters",
          "registers", "digests", "controller_packet_metadata")


def _shape(kind: str, obj) -> tuple:
    """What the wire protocol depends on for one P4Info object (besides its id and name)."""
    if kind == "tables":
        return (tuple((f.id, f.name, f.bitwidth, f.match_type, f.other_match_type) for f in obj.match_fields),
                tuple(sorted((r.id, r.scope) for r in obj.action_refs)), obj.implementation_id,
                tuple(sorted(obj.direct_resource_ids)), obj.const_default_action_id)
    if kind == "actions":
        return tuple((p.id, p.name, p.bitwidth) for p in obj.params)
    if kind == "controller_packet_metadata":
        return tuple((m.id, m.name, m.bitwidth) for m in obj.metadata)
    if kind == "registers":
        return (obj.size, obj.type_spec.SerializeToString(deterministic=True))
    if kind in ("counters", "meters"):
        return (obj.size, obj.spec.unit)
    if kind == "action_profiles":
        return (tuple(sorted(obj.table_ids)), obj.with_selector)
    return ()


def p4info_difference(pushed, ours) -> str | None:
    """None when ``pushed`` matches ``ours`` on ids, names and shapes; else a sentence naming the first
    differing object."""
    for kind in _KINDS:
        a = {o.preamble.name: o for o in getattr(pushed, kind)}
        b = {o.preamble.name: o for o in getattr(ours, kind)}
        what = kind.rstrip("s").replace("_", " ") if kind != "controller_packet_metadata" else "controller header"
        for name in sorted(set(a) | set(b)):
            if name not in b:
                return f"{what} {name!r} is in the P4Info but not in the program"
            if name not in a:
                return f"{what} {name!r} of the program is missing from the P4Info"
            if a[name].preamble.id != b[name].preamble.id:
                return (f"{what} {name!r} has id {a[name].preamble.id:#010x} in the P4Info but "
                        f"{b[name].preamble.id:#010x} compiled from the program (p4c's id scheme)")
            if _shape(kind, a[name]) != _shape(kind, b[name]):
                return f"{what} {name!r} differs between the P4Info and the program (fields, widths or refs)"
    return None


def build_pipeline(device: Device, device_config: bytes, p4info=None, cookie: int | None = None,
                   name: str = "p4_device_config") -> Pipeline:
    """Compile a pushed config into a :class:`Pipeline` (not installed).  Errors: INVALID_ARGUMENT with the
    compiler's ``file:line:col: message`` or the P4Info difference."""
    source = source_of(device_config)
    try:
        sw = device.compile(source, name=name)
    except P4Error as e:
        raise SwitchError("INVALID_ARGUMENT", f"cannot compile the device config: {e}") from None
    served = sw.p4info
    if p4info is not None and p4info.ByteSize() > 0:
        diff = p4info_difference(p4info, sw.p4info)
        if diff is not None:
            raise SwitchError("INVALID_ARGUMENT", f"P4Info does not match the device config: {diff}")
        served = p4i.P4Info()
        served.CopyFrom(p4info)
    pl = Pipeline(switch=sw, p4info=served, device_config=bytes(device_config), source=source, cookie=cookie)
    pl.runtime = Entities(sw, device.cpu_port)
    return pl

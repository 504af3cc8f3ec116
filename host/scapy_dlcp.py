"""Scapy dissector for DLCP, built from :data:`host.wire.FIELDS` so it can never drift from the wire format.

Importing this module binds the layer to UDP destination (and source) port :data:`host.wire.UDP_PORT`, so
captured packets (pcap from the switch, tcpdump) dissect as ``Ether/IP/UDP/DLCP/Raw``::

    from host.scapy_dlcp import DLCP
    pkt = Ether(raw_bytes); pkt[DLCP].seq
"""

from __future__ import annotations

from scapy.fields import BitEnumField, BitField, FlagsField
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_layers

from host import wire

_ENUMS = {
    "msg_type": {int(m): m.name.lower() for m in wire.MsgType},
    "dtype": {int(d): d.name.lower() for d in wire.DType},
}
_FLAG_NAMES = ["DE", "ECE", "RTX", "LAST", "r4", "r5", "r6", "r7"]  # bit 0 first, as wire.Flag


def _scapy_field(f: wire.Field):
    default = wire.VERSION if f.name == "version" else (1 if f.name == "total" else 0)
    if f.name in _ENUMS:
        return BitEnumField(f.name, default, f.bits, _ENUMS[f.name])
    if f.name == "flags":
        return FlagsField(f.name, default, f.bits, _FLAG_NAMES)
    return BitField(f.name, default, f.bits)


class DLCP(Packet):
    """The DLCP header (`host.wire.HEADER_LEN` bytes); what follows is the payload (Raw)."""

    name = "DLCP"
    fields_desc = [_scapy_field(f) for f in wire.FIELDS]


bind_layers(UDP, DLCP, dport=wire.UDP_PORT)
bind_layers(UDP, DLCP, sport=wire.UDP_PORT)

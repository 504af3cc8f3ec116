"""dlcp.p4's P4Runtime controller headers on the embedded target, as BMv2 runs them: a frame entering on the CPU
port carries the packet_out header in front (the target prepends it from the PacketOut's metadata); a frame
leaving on the CPU port gets the packet_in header (the target strips it into the PacketIn's metadata)."""
from __future__ import annotations

from scapy.all import IP

from .dlcp_switch import (
    HOST_PORT, PORT_FORWARDED, add_route, forwarded, nhop_mac, packets, router_mac, send_one, slot, udp_packet,
)

CPU_PORT = 255  # dlcp.p4's CPU_PORT default, BMv2's and dlcp-switch's --cpu-port in the docs


def packet_out_header(egress_port: int, do_forwarding: int) -> bytes:
    """packet_out_h: egress_port (9 bits), do_forwarding (1), _pad (6)."""
    return ((egress_port << 7) | (do_forwarding << 6)).to_bytes(2, "big")


def test_packet_out_direct_leaves_the_given_port_unchanged(sw):
    frame = bytes(udp_packet("10.0.1.9", payload=b"direct"))
    out = forwarded(sw, packet_out_header(4, 0) + frame, port=CPU_PORT)
    assert out.port == 4 and out.data == frame  # no routing, no rewrites, header gone
    assert packets(sw, PORT_FORWARDED, slot(4, 0)) == 1


def test_packet_out_direct_needs_no_parsable_frame(sw):
    junk = b"\x01\x02\x03"  # shorter than Ethernet: a parser error that a direct PacketOut ignores
    out = forwarded(sw, packet_out_header(2, 0) + junk, port=CPU_PORT)
    assert out.port == 2 and out.data == junk


def test_packet_out_forwarded_is_routed_like_any_frame(sw):
    add_route(sw, "10.0.1.0", 24, 3, 7)
    frame = udp_packet("10.0.1.9", payload=b"routed")
    out = forwarded(sw, packet_out_header(0, 1) + bytes(frame), port=CPU_PORT)
    got = IP(out.data[14:])
    assert out.port == 3 and out.data[:12] == bytes.fromhex(nhop_mac(7).replace(":", "") +
                                                              router_mac(3).replace(":", ""))
    assert got.ttl == frame[IP].ttl - 1 and bytes(got.payload) == bytes(frame[IP].payload)


def test_frame_to_the_cpu_port_carries_packet_in_with_its_ingress_port(sw):
    add_route(sw, "10.9.9.0", 24, CPU_PORT, 9)
    frame = udp_packet("10.9.9.9", payload=b"to-controller")
    out = forwarded(sw, frame, port=HOST_PORT)
    assert out.port == CPU_PORT
    header = int.from_bytes(out.data[:2], "big")
    assert header >> 7 == HOST_PORT and header & 0x7F == 0  # ingress_port, _pad
    assert IP(out.data[16:]).dst == "10.9.9.9" and out.data.endswith(b"to-controller")


def test_frames_on_other_ports_have_no_controller_header(sw):
    add_route(sw, "10.0.1.0", 24, 3, 7)
    out = forwarded(sw, udp_packet("10.0.1.9"), port=HOST_PORT)
    assert out.data[12:14] == b"\x08\x00"  # Ethernet right at the start: no packet_in in front
    assert send_one(sw, b"\x00" * 2 + bytes(udp_packet("10.0.1.9")), port=HOST_PORT) == []  # not packet_out

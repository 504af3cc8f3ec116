"""dlcp.p4 load balancing over an equal-cost group: DLCP packets of one flow are sprayed per packet (round-robin
per group), other traffic is hashed per flow on the 5-tuple, and lb_mode[0] = 1 hashes DLCP per flow as well."""
from __future__ import annotations

from collections import Counter

import pytest
from scapy.all import Ether

from host.scapy_dlcp import DLCP

from .dlcp_switch import (
    HOST_PORT, NHOP_PACKETS, Member, add_ecmp_route, dlcp_flow, dlcp_packet, nhop_mac, packets, tcp_packet, udp_packet,
)

GROUP = 3


def ecmp_switch(sw, n: int) -> list[Member]:
    members = [Member(port=10 + i, nhop_id=100 + i) for i in range(n)]
    add_ecmp_route(sw, "10.0.8.0", 24, GROUP, members)
    return members


def spread(sw, frames) -> Counter:
    """Inject the frames in order (running after each, so no queue fills up); packets out per port."""
    ports = Counter()
    for f in frames:
        out = sw.send(HOST_PORT, f)
        assert len(out) == 1
        ports[out[0].port] += 1
        member_mac = bytes.fromhex(nhop_mac(100 + out[0].port - 10).replace(":", ""))
        assert out[0].data[:6] == member_mac                                # the member's own rewrite
    return ports


@pytest.mark.parametrize("n", [2, 4])
def test_one_dlcp_flow_is_sprayed_over_every_member(sw, n):
    members = ecmp_switch(sw, n)
    frames = dlcp_flow("10.0.8.5", 1000, sport=41000)
    ports = spread(sw, frames)
    assert set(ports) == {m.port for m in members}
    assert max(ports.values()) / min(ports.values()) <= 1.2
    assert sum(ports.values()) == 1000
    for m in members:                                   # the per-next-hop counters show the same spread
        assert packets(sw, NHOP_PACKETS, m.nhop_id) == ports[m.port]


def test_spraying_keeps_every_payload_and_each_member_sees_increasing_seqs(sw):
    ecmp_switch(sw, 4)
    seen: dict[int, list[int]] = {}
    for i, frame in enumerate(dlcp_flow("10.0.8.5", 40)):
        out = sw.send(HOST_PORT, frame)
        seen.setdefault(out[0].port, []).append(Ether(out[0].data)[DLCP].seq)
    assert sorted(s for v in seen.values() for s in v) == list(range(40))
    assert all(v == sorted(v) for v in seen.values()) and len(seen) == 4


def test_lb_mode_1_hashes_dlcp_per_flow(sw):
    members = ecmp_switch(sw, 4)
    sw.register_write("lb_mode", 0, 1)
    ports = spread(sw, dlcp_flow("10.0.8.5", 200, sport=41000))
    assert len(ports) == 1
    # different flows still use every member
    flows = spread(sw, [bytes(dlcp_packet("10.0.8.5", sport=41000 + i)) for i in range(64)])
    assert set(flows) == {m.port for m in members}
    sw.register_write("lb_mode", 0, 0)                 # back to spraying
    ports = spread(sw, dlcp_flow("10.0.8.5", 8, sport=41000))
    assert set(ports) == {m.port for m in members}


def test_tcp_and_udp_flows_stay_on_one_member(sw):
    members = ecmp_switch(sw, 4)
    for make in (lambda i: tcp_packet("10.0.8.5", sport=5001, dport=80, payload=i),
                 lambda i: udp_packet("10.0.8.5", sport=7000, dport=9000, payload=bytes(i))):
        ports = spread(sw, [bytes(make(size)) for size in range(0, 1400, 35)])   # 40 packets, sizes differ
        assert len(ports) == 1
    # and many flows are spread over all members, each flow pinned
    per_flow = {}
    for sport in range(20000, 20064):
        ports = spread(sw, [bytes(tcp_packet("10.0.8.5", sport=sport, payload=k)) for k in range(3)])
        assert len(ports) == 1
        per_flow[sport] = next(iter(ports))
    assert set(per_flow.values()) == {m.port for m in members}


def test_spraying_interleaved_with_tcp_still_sprays_and_pins(sw):
    """The round-robin position advances only with sprayed packets: TCP between DLCP packets changes nothing."""
    members = ecmp_switch(sw, 2)
    dlcp_ports, tcp_ports = Counter(), Counter()
    tcp = bytes(tcp_packet("10.0.8.5", sport=5555))
    for frame in dlcp_flow("10.0.8.5", 200):
        dlcp_ports += spread(sw, [frame])
        tcp_ports += spread(sw, [tcp])
    assert dlcp_ports == Counter({m.port: 100 for m in members})
    assert len(tcp_ports) == 1

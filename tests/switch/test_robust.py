"""Robustness: random bytes never make the switch raise; truncated packets take the parser-error
path (ingress runs with parser_error set, as in BMv2) and the router program drops them, counted."""
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st
from scapy.all import IP, UDP, Ether

from switch.target import Switch

PROGRAMS = Path(__file__).parent / "programs"


@pytest.fixture(scope="module")
def router():
    sw = Switch(str(PROGRAMS / "l3_router.p4"))
    sw.insert_entry("RouterIngress.ipv4_lpm", {"hdr.ipv4.dstAddr": (0, 0)}, "RouterIngress.set_nhop",
                    {"dmac": 1, "smac": 2, "port": 3})
    return sw


@pytest.fixture(scope="module")
def stacks():
    return Switch(str(PROGRAMS / "stack_counter.p4"))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80), st.integers(0, 510))
def test_random_bytes_never_raise(router, stacks, data, port):
    for sw in (router, stacks):
        out = sw.send(port, data)
        assert len(out) <= 1


def test_truncated_packets_are_counted_and_dropped():
    sw = Switch(str(PROGRAMS / "l3_router.p4"))
    sw.insert_entry("RouterIngress.ipv4_lpm", {"hdr.ipv4.dstAddr": (0, 0)}, "RouterIngress.set_nhop",
                    {"dmac": 1, "smac": 2, "port": 3})
    full = bytes(Ether() / IP(dst="10.0.0.1") / UDP())
    assert len(sw.send(1, full)) == 1
    for cut in (5, 14 + 10, 14 + 20 + 4):
        assert sw.send(1, full[:cut]) == []
    assert sw.parser_errors == 3
    assert sw.drops() == {(1, 0, "pipeline_drop"): 3}

"""The conformance programs run as a user runs them: a ``dlcp-switch`` process on veth ports, each program pushed
by a finsy controller (SetForwardingPipelineConfig with the source as the device config), its control-plane
state written over P4Runtime (a clone session) or the management service (custom CRC parameters), real frames
in on port 0 and out of the other ports' interfaces.

The expected outputs are the in-process suite's (test_conformance.py: worked out from the specification and
BMv2's documented behaviour) with one change the wire imposes: a frame on a real interface has at least 14 bytes
(the kernel refuses shorter ones), so short test packets get a filler tail, long enough for the input and every
output to be a real frame, that the programs here never parse.
By the P4-16 packet model the unparsed tail is payload and comes out unchanged after the deparsed headers (or,
for a clone or a recirculated packet, after the headers of that copy), so each expected output gains the same
tail.  Programs whose verdict depends on the packet's length (PacketTooShort cases, truncate to fewer than 14
bytes) stay in the in-process suite only."""
from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
from finsy import P4CloneSessionEntry, P4TableAction, P4TableEntry, P4TableMatch

from switch.daemon.mgmt import MgmtClient
from switch.daemon.portio import Port

from p4rt_local import connect
from switchd import Daemon, sh, wait_up
from test_conformance import CASES, CATALOGUE, CHECK, ENTRIES, HERE, crc_fields, crc_packet, v1_paths

pytestmark = [pytest.mark.slow, pytest.mark.netns]

PORTS = (0, 1, 2, 7)
# every program of the in-process CASES but the two with PacketTooShort cases (parser_features, error_key)
PROGRAMS = ["functions.p4", "subcontrol.p4", "subcontrol_shared.p4", "switch_values.p4", "action_params.p4",
            "arguments.p4", "for_loops.p4", "macros.p4", "for_nested_return.p4", "header_eq.p4", "value_set.p4",
            "subparser.p4", "subparser_twice.p4", "header_union.p4", "struct_stack_ops.p4", "compound_assign.p4",
            "top_level_actions.p4", "entry_priority.p4", "entry_priority_initial.p4", "action_bound_twice.p4",
            "empty_actions.p4", "lookahead_bits.p4"]
assert not set(PROGRAMS) - set(CASES) and set(CASES) - set(PROGRAMS) == {"parser_features.p4", "error_key.p4"}
FILL = 0xA5
MIN_FRAME = 14


def padded(pkt: bytes, want: list[tuple[int, bytes]]) -> tuple[bytes, list[tuple[int, bytes]]]:
    """The packet and its expected outputs with a tail long enough for every one of them to be a real frame."""
    tail = bytes([FILL]) * max(0, MIN_FRAME - min([len(pkt)] + [len(out) for _, out in want]))
    return pkt + tail, sorted((port, out + tail) for port, out in want)


@pytest.fixture(scope="module")
def rig(root_required):
    """A daemon on ports 0, 1, 2, 7 (veth pairs in the root namespace, unique names, IPv6 off so nothing but
    the test's frames cross them) and the test's own AF_PACKET ports on the far ends."""
    tag = f"cf{os.getpid() % 100000}"
    pairs = {p: (f"{tag}s{p}", f"{tag}t{p}") for p in PORTS}
    for near, _ in pairs.values():
        sh("ip", "link", "del", near, check=False)
    ports: dict[int, Port] = {}
    try:
        for near, far in pairs.values():
            sh("ip", "link", "add", near, "type", "veth", "peer", "name", far)
            for ifn in (near, far):
                Path(f"/proc/sys/net/ipv6/conf/{ifn}/disable_ipv6").write_text("1")
                sh("ip", "link", "set", ifn, "up")
        wait_up(*[ifn for pair in pairs.values() for ifn in pair])
        with Daemon(*[a for p, (near, _) in pairs.items() for a in ("-i", f"{p}@{near}")], "-I", str(HERE)) as d:
            ports = {p: Port(p, far) for p, (_, far) in pairs.items()}
            yield d, ports
    finally:
        for p in ports.values():
            p.close()
        for near, _ in pairs.values():
            sh("ip", "link", "del", near, check=False)


def exchange(ports: dict[int, Port], pkt: bytes, expect: int, quiet: float = 0.15) -> list[tuple[int, bytes]]:
    """Send ``pkt`` into switch port 0; what comes out of the other ports, sorted: waits for ``expect`` frames
    (at most 5 s), then ``quiet`` seconds more for any frame that should not be there."""
    for p in ports.values():                      # nothing left over from an earlier packet
        p.recv_into([])
    assert ports[0].send_batch([pkt]) == []
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 5.0
    settle = None
    while time.monotonic() < deadline:
        for port, p in ports.items():
            if port != 0:
                p.recv_into(got)
        if len(got) >= expect:
            settle = settle or time.monotonic() + quiet
            if time.monotonic() >= settle:
                break
        time.sleep(0.002)
    return sorted(got)


def push_and_check(rig, program: str, cases, tmp_path, entities=()) -> None:
    """Push ``program`` with finsy, insert ``entities`` over P4Runtime, then each (packet, expected outputs)."""
    d, ports = rig

    async def go():
        async with connect(d.addr, HERE / program, tmp_path) as sw:
            if entities:
                await sw.insert(list(entities))
            for pkt, want in cases:
                pkt, want = padded(pkt, want)
                assert exchange(ports, pkt, len(want)) == want, f"{program}: in {pkt.hex()}"
    asyncio.run(asyncio.wait_for(go(), 120))


@pytest.mark.parametrize("program", PROGRAMS)
def test_program_through_the_daemon(rig, program, tmp_path):
    entries = [P4TableEntry(t, match=P4TableMatch(m), action=P4TableAction(a, **p))
               for t, m, a, p in ENTRIES.get(program, [])]
    push_and_check(rig, program, CASES[program], tmp_path, entries)


def test_v1model_packet_paths_through_the_daemon(rig, tmp_path):
    """Resubmit, recirculate, I2E and E2E clones to a clone session written over P4Runtime.  The truncate(2)
    case stays in process: a 2-byte frame cannot leave on a real interface."""
    cases = [(pkt, want) for pkt, want in v1_paths(None)
             if not any(len(out) < MIN_FRAME and len(out) < len(pkt) for _, out in want)]
    assert len(cases) == 5
    push_and_check(rig, "v1model_paths.p4", cases, tmp_path, [P4CloneSessionEntry(5, replicas=[(7, 1)])])


def test_crc_custom_through_the_daemon(rig, tmp_path):
    """Custom CRC calculations listed and set through the management service (BMv2's set_crc32_parameters)."""
    d, ports = rig

    async def go():
        async with connect(d.addr, HERE / "crc_custom.p4", tmp_path):
            with MgmtClient(d.addr) as m:
                calcs = m.crc_calculations()
                assert [(c.name, c.width, c.location) for c in calcs] == [
                    ("calc_0", 32, "p4_device_config:24:63"), ("calc_1", 32, "p4_device_config:34:9"),
                    ("calc_2", 32, "p4_device_config:35:9"), ("calc_3", 16, "p4_device_config:36:9"),
                    ("calc_4", 16, "p4_device_config:43:9")]
                assert (calcs[1].polynomial, calcs[1].reflect_data) == (0x04C11DB7, True)      # BMv2's default
                ((port, out),) = exchange(ports, crc_packet(2, CHECK), 1)
                assert port == 1 and crc_fields(out) == (0xCBF43926, 0xCBF43926, 0xBB3D, 0xBB3D)
                w, poly, init, xo, ri, ro, check32 = CATALOGUE["CRC-32/ISCSI"]
                m.set_crc32_parameters("calc_1", poly, init, xo, ri, ro)
                w, poly, init, xo, ri, ro, check16 = CATALOGUE["CRC-16/KERMIT"]
                m.set_crc16_parameters("calc_4", poly, init, xo, ri, ro)
                ((port, out),) = exchange(ports, crc_packet(2, CHECK), 1)
                assert crc_fields(out) == (check32, 0xCBF43926, 0xBB3D, check16)
                assert m.crc_calculations()[1].polynomial == 0x1EDC6F41
                with pytest.raises(Exception, match="NOT_FOUND.*no custom CRC calculation 'calc_7'"):
                    m.set_crc32_parameters("calc_7", 1, 0, 0, True, True)
                with pytest.raises(Exception, match="INVALID_ARGUMENT.*calc_1 is crc32_custom, not crc16_custom"):
                    m.set_crc16_parameters("calc_1", 1, 0, 0, True, True)
    asyncio.run(asyncio.wait_for(go(), 120))

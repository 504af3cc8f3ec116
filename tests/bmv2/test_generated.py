"""Generated cases (hypothesis): random table entries and random packets on BMv2 and on dlcp-switch.

* tests/switch/programs/l3_router.p4: LPM routes (any prefix length, to attached ports, to the port the packet
  came in on, to a port with no interface), a ternary+range ACL with priorities (permit, deny, set a priority)
  and its direct counter, TTL, IPv4 checksum verification and update, IPv4 options and fragments (a parser
  error there), UDP, TCP and other protocols;
* p4src/dlcp.p4: random routes, DLCP priority rules (ternary on the DLCP fields), DSCP rules, thresholds and
  queue-depth estimates, and DLCP, UDP and TCP packets with random header fields.

Each example writes its entries to both switches, sends its packets as one batch, compares the frames that
came out (sorted: a batch may leave in another order through priority queues), then every counter and register,
and deletes every entry on each switch on its own (what one side took and the other refused is gone too), then
checks that neither kept one.  The entries are P4Runtime's canonical form (a don't-care match is omitted; what
each server does with a non-canonical full range is test_full_range_match's).

Bounded: ``BMV2_EXAMPLES`` examples per program (default 25; about 1 s each on l3_router.p4 and 5 s on dlcp.p4,
whose registers BMv2 reads through its CLI), generated only: no shrinking, which would run the two switches
hundreds of times more on a failure; the failing example is reported as it was generated, with every
difference it showed."""
from __future__ import annotations

import asyncio
import ipaddress
import os
import threading
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
from finsy import P4TableAction, P4TableEntry, P4TableMatch
from finsy.proto import p4r
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from scapy.all import IP, TCP, UDP, Ether, Raw

from controller.errors import WriteRejected
from host import wire
from host.scapy_dlcp import DLCP

from .conftest import tally
from .test_dlcp import DLCP_P4, INCLUDE, same_state
from .twin import ROOT, Deviation, Pair

pytestmark = pytest.mark.bmv2

EXAMPLES = int(os.environ.get("BMV2_EXAMPLES", "25"))
L3 = ROOT / "tests" / "switch" / "programs" / "l3_router.p4"
OUT_PORTS = (0, 1, 2, 3, 4, 7, 5)      # 5 has no interface on either switch
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                    phases=(Phase.explicit, Phase.generate), suppress_health_check=list(HealthCheck))


class Loop:
    """An event loop on its own thread holding the P4Runtime sessions across hypothesis examples (each example
    is a synchronous call)."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float = 120.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def pushed(twin, program: Path, tmp: Path, include: tuple[Path, ...]):
    """(loop, pair, stack): ``program`` on both switches, sessions open on ``loop``."""
    loop = Loop()
    stack = AsyncExitStack()
    pair: Pair = loop.run(stack.enter_async_context(twin.session(program, tmp, include)))
    return loop, pair, stack


def check_example(loop: Loop, pair: Pair, group: str, entries: list, frames: list[bytes], port: int,
                  registers: list[tuple[str, int, int]] = (), one_by_one: bool = False) -> None:
    """Write ``entries`` (and register cells), send ``frames`` into ``port`` (as one batch, or one at a time
    where the program's decisions depend on the queue a batch builds), compare, delete the entries again."""
    t = tally(group)
    before = len(t.differences)
    try:
        loop.run(pair.insert(entries))
        if registers:
            loop.run(pair.register_write(list(registers)))
        what = f"{len(entries)} entries {[str(e)[:200] for e in entries]}, frames {[f.hex() for f in frames]}"
        for batch in ([[f] for f in frames] if one_by_one else [frames]):
            got = pair.exchange(port, batch)
            t.compare(what, got["bmv2"], got["dlcp-switch"])
        loop.run(same_state(pair, group))
    finally:
        loop.run(pair.clear_tables())
        if registers:
            loop.run(pair.register_write([(n, i, 0) for n, i, _ in registers]))
        # the next example starts from no entries on either switch (what one switch kept would show up as a
        # difference in every later example)
        left = loop.run(pair.table_entries())
        assert left == {side: [] for side in left}, f"entries left after the example's delete: {left}"
    assert t.differences[before:] == []


# ---- addresses: a small space, so that generated routes and packets meet -------------------------------------------
addr = st.builds(lambda a, b: f"10.0.{a}.{b}", st.integers(0, 3), st.sampled_from([0, 1, 2, 7, 128, 255]))


def prefix(a: str, plen: int) -> str:
    return str(ipaddress.ip_network(f"{a}/{plen}", strict=False))


routes = st.lists(st.tuples(addr, st.sampled_from([0, 8, 16, 22, 24, 30, 31, 32]), st.sampled_from(OUT_PORTS)),
                  max_size=6).map(lambda rs: list({prefix(a, p): (prefix(a, p), port) for a, p, port in rs}.values()))


@st.composite
def acl_entries(draw):
    out, seen = [], set()
    for prio in draw(st.lists(st.integers(1, 20), max_size=4, unique=True)):
        a, mask = draw(addr), draw(st.sampled_from(["255.255.255.255", "255.255.255.0", "255.255.0.0", "0.0.0.0"]))
        a = str(ipaddress.ip_address(int(ipaddress.ip_address(a)) & int(ipaddress.ip_address(mask))))
        proto_mask = draw(st.sampled_from([0xFF, 0]))
        key = (a, mask, draw(st.sampled_from([6, 17, 1])) & proto_mask, proto_mask)   # canonical: value & mask
        lo = draw(st.sampled_from([0, 53, 80, 1000]))
        hi = lo + draw(st.sampled_from([0, 1, 100, 65535 - lo]))
        if key in seen:
            continue
        seen.add(key)
        act = draw(st.sampled_from(["acl_permit", "acl_deny", "acl_set_prio"]))
        args = {"prio": draw(st.integers(0, 7))} if act == "acl_set_prio" else {}
        match = {"srcAddr": (key[0], key[1]), "dstAddr": (key[0], key[1]), "protocol": (key[2], key[3])}
        if (lo, hi) != (0, 0xFFFF):       # the whole range is a don't-care match, which P4Runtime omits
            match["dport"] = (lo, hi)     # (test_full_range_match: what each server does when it is not)
        out.append(P4TableEntry("acl", match=P4TableMatch(match), action=P4TableAction(act, **args), priority=prio))
    return out


@st.composite
def l3_packet(draw, tag: int):
    ttl = draw(st.sampled_from([0, 1, 2, 64, 255]))
    ip = IP(src=draw(addr), dst=draw(addr), ttl=ttl, tos=draw(st.integers(0, 255)),
            frag=draw(st.sampled_from([0, 0, 0, 1])), flags=draw(st.sampled_from([0, 2])))
    if draw(st.integers(0, 9)) == 0:
        ip.options = b"\x01\x01\x01\x01"
    proto = draw(st.sampled_from(["udp", "tcp", "icmp"]))
    dport = draw(st.sampled_from([0, 53, 80, 1000, 1100, 65535]))
    l4 = UDP(sport=1234, dport=dport) if proto == "udp" else TCP(sport=1234, dport=dport) if proto == "tcp" else b""
    pkt = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:fe") / ip
    if proto == "icmp":
        pkt[IP].proto = 1
    else:
        pkt = pkt / l4
    raw = bytearray(bytes(pkt / Raw(tag.to_bytes(2, "big") + bytes(16))))
    if draw(st.integers(0, 9)) == 0:
        raw[24] ^= 0x40                               # a wrong IPv4 checksum
    return bytes(raw)


def test_generated_l3_router(twin, tmp_path: Path):
    loop, pair, stack = pushed(twin, L3, tmp_path, (L3.parent,))

    @SETTINGS
    @given(routes=routes, acl=acl_entries(), data=st.data(), port=st.sampled_from([0, 1, 2]))
    def example(routes, acl, data, port):
        entries = [P4TableEntry("ipv4_lpm", match=P4TableMatch(dstAddr=p),
                                action=P4TableAction("set_nhop", dmac=0x0A0000000000 + out, smac=0x0E0000000000 + out,
                                                     port=out)) for p, out in routes] + acl
        frames = [data.draw(l3_packet(i)) for i in range(data.draw(st.integers(1, 8)))]
        check_example(loop, pair, "generated l3_router.p4", entries, frames, port)

    try:
        example()
    finally:
        loop.run(stack.aclose())
        loop.close()


@st.composite
def dlcp_frame(draw, tag: int):
    dst = draw(addr)
    ip = IP(src="10.0.9.1", dst=dst, ttl=draw(st.sampled_from([1, 2, 64])), tos=draw(st.integers(0, 255)))
    kind = draw(st.sampled_from(["dlcp", "dlcp", "udp", "tcp"]))
    if kind == "dlcp":
        l4 = UDP(sport=draw(st.integers(40000, 40003)), dport=wire.UDP_PORT, chksum=0) / DLCP(
            msg_type=draw(st.sampled_from([int(m) for m in wire.MsgType])),
            flags=draw(st.sampled_from([0, int(wire.Flag.DROP_ELIGIBLE)])), priority=draw(st.integers(0, 7)),
            mag_class=draw(st.integers(0, 7)), layer=draw(st.integers(0, 255)), seq=tag, total=1 << 20, count=4)
    elif kind == "udp":
        l4 = UDP(sport=draw(st.integers(1, 3)), dport=9000)
    else:
        l4 = TCP(sport=draw(st.integers(5000, 5003)), dport=80, flags="A")
    return bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:fe") / ip / l4 / Raw(tag.to_bytes(2, "big")
                                                                                           + bytes(16)))


def test_generated_dlcp(twin, tmp_path: Path):
    loop, pair, stack = pushed(twin, DLCP_P4, tmp_path, INCLUDE)

    @SETTINGS
    @given(routes=routes, data=st.data())
    def example(routes, data):
        entries = []
        for i, (p, out) in enumerate(routes):
            entries.append(P4TableEntry("ipv4_lpm", match=P4TableMatch(dst_addr=p), action=P4TableAction(
                "set_nhop", dmac=0x0A0000000000 + out, smac=0x0E0000000000 + out, port=out, nhop_id=i)))
        rules = data.draw(st.lists(st.tuples(st.integers(0, 15), st.sampled_from([0xF, 0])), max_size=3))
        for prio, (mt, mask) in enumerate(dict.fromkeys((mt & mask, mask) for mt, mask in rules), start=1):
            act = data.draw(st.sampled_from(["trust", "set"]))
            entries.append(P4TableEntry("dlcp_priority", match=P4TableMatch(msg_type=(mt, mask)), priority=prio,
                                        action=P4TableAction("trust_dlcp_priority") if act == "trust" else
                                        P4TableAction("set_priority", prio=data.draw(st.integers(0, 7)))))
        for dscp in data.draw(st.lists(st.integers(0, 63), max_size=3, unique=True)):
            entries.append(P4TableEntry("dscp_priority", match=P4TableMatch(dscp=dscp),
                                        action=P4TableAction("set_priority", prio=data.draw(st.integers(0, 7)))))
        regs = [(name, data.draw(st.sampled_from([8, 9, 10, 16, 17, 18, 19])), data.draw(st.sampled_from([1, 5, 40])))
                for name in data.draw(st.lists(st.sampled_from(["drop_threshold", "queue_depth"]), max_size=3))]
        regs = list({(n, i): (n, i, v) for n, i, v in regs}.values())
        frames = [data.draw(dlcp_frame(i)) for i in range(data.draw(st.integers(1, 4)))]
        check_example(loop, pair, "generated dlcp.p4", entries, frames, 1, regs, one_by_one=True)

    try:
        example()
    finally:
        loop.run(stack.aclose())
        loop.close()


FULL_RANGE = ("BMv2's P4Runtime server (PI) takes a range match over the whole range, which P4Runtime requires "
              "omitted (a don't-care match), when its bounds come as canonical shortest byte strings: its check "
              "(match_key_helpers.cpp, range_match_is_dont_care) measures the field by the low bound's length")


def test_full_range_match(twin, tmp_path: Path):
    """A range match over the whole range of l3_router.p4's 16-bit dport is a don't-care match, which a client
    must omit (P4Runtime, "Match Format"): dlcp-switch refuses it with INVALID_ARGUMENT in either encoding; BMv2
    refuses it padded to the field's width (low 0x0000, high 0xffff) but takes it in the canonical encoding
    P4Runtime otherwise asks for (low 0x00, high 0xffff): a documented deviation (FULL_RANGE)."""
    async def go():
        t = tally("control plane")
        before = len(t.differences)
        async with twin.session(L3, tmp_path, (L3.parent,)) as pair:
            for form, low, high in (("canonical", b"\x00", b"\xff\xff"), ("padded", b"\x00\x00", b"\xff\xff")):
                outcome = {}
                for side, c in pair.clients.items():
                    acl = c.schema.tables["acl"]
                    entry = p4r.Entity(table_entry=p4r.TableEntry(
                        table_id=acl.id, priority=1,
                        match=[p4r.FieldMatch(field_id=acl.match_fields["dport"].id,
                                              range=p4r.FieldMatch.Range(low=low, high=high))],
                        action=p4r.TableAction(action=p4r.Action(action_id=c.schema.actions["acl_permit"].id))))
                    try:
                        await c.write([p4r.Update(type=p4r.Update.INSERT, entity=entry)])
                        outcome[side] = "accepted"
                    except WriteRejected as e:
                        outcome[side] = f"refused ({e.rejected[0].code})"
                await pair.clear_tables()
                t.compare(f"INSERT acl dport 0..65535 ({form}: low {low.hex()}, high {high.hex()})",
                          outcome["bmv2"], outcome["dlcp-switch"],
                          Deviation(FULL_RANGE, "accepted", "refused (INVALID_ARGUMENT)") if form == "canonical"
                          else None)
        return t.differences[before:]
    assert asyncio.run(asyncio.wait_for(go(), 120)) == []

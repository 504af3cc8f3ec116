"""The table indexes (a dict per prefix length for LPM, tuple space search for ternary/range) choose the same
entry as the definition of a match: among the entries that match, the longest prefix (LPM) or the highest
priority, the oldest entry on a tie.  Random tables with inserts, modifies and deletes; random packets through
the whole pipeline (cache included), every answer compared with a brute-force reference written here."""
from __future__ import annotations

import random

import pytest

from switch.target import Switch

PROGRAM = r"""
#include <core.p4>
#include <v1model.p4>
header eth_t { bit<48> dst; bit<48> src; bit<16> type; }
header k_t { bit<8> vrf; bit<8> b; bit<16> r; bit<32> a; }
struct headers_t { eth_t eth; k_t k; }
struct meta_t { bit<8> unused; }
parser P(packet_in pkt, out headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    state start { pkt.extract(h.eth); pkt.extract(h.k); transition accept; }
}
control V(inout headers_t h, inout meta_t m) { apply { } }
control I(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    action mark(bit<48> id) { h.eth.src = id; sm.egress_spec = 1; }
    action miss() { h.eth.src = 0; sm.egress_spec = 1; }
    table lpm1 { key = { h.k.a: lpm; } actions = { mark; miss; } default_action = miss(); size = 4096; }
    table lpm2 { key = { h.k.vrf: exact; h.k.a: lpm; } actions = { mark; miss; } default_action = miss(); size = 4096; }
    table tern {
        key = { h.k.a: ternary; h.k.b: ternary; h.k.r: range; }
        actions = { mark; miss; } default_action = miss(); size = 4096;
    }
    table lpm_tern {
        key = { h.k.a: lpm; h.k.b: ternary; }
        actions = { mark; miss; } default_action = miss(); size = 4096;
    }
    apply {
        if (h.eth.type == 1) { lpm1.apply(); }
        else if (h.eth.type == 2) { lpm2.apply(); }
        else if (h.eth.type == 3) { tern.apply(); }
        else { lpm_tern.apply(); }
    }
}
control E(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control C(inout headers_t h, inout meta_t m) { apply { } }
control D(packet_out pkt, in headers_t h) { apply { pkt.emit(h.eth); pkt.emit(h.k); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


def frame(kind: int, vrf: int, b: int, r: int, a: int) -> bytes:
    return (bytes(12) + kind.to_bytes(2, "big") + bytes([vrf, b]) + r.to_bytes(2, "big") + a.to_bytes(4, "big"))


def _prefix(rng: random.Random) -> tuple[int, int]:
    plen = rng.choice((0, 1, 4, 8, 8, 12, 16, 16, 24, 24, 30, 32))
    # few distinct high bits, so that prefixes nest and overlap
    v = (rng.getrandbits(4) << 28 | rng.getrandbits(28)) & ~((1 << (32 - plen)) - 1) & 0xFFFFFFFF
    return v, plen


class Reference:
    """Brute force: every entry, in insertion order, with its id; the winner by the rule of the table kind."""

    def __init__(self, kind: str):
        self.kind = kind
        self.entries: dict[tuple, tuple[int, int]] = {}      # key -> (rank, id), insertion ordered

    def matches(self, key: tuple, pkt: dict) -> bool:
        if self.kind == "lpm1":
            (v, plen), = key[0]
            return pkt["a"] >> (32 - plen) == v >> (32 - plen) if plen else True
        if self.kind == "lpm2":
            vrf, (v, plen) = key[0]
            return vrf == pkt["vrf"] and (pkt["a"] >> (32 - plen) == v >> (32 - plen) if plen else True)
        if self.kind == "tern":
            (av, am), (bv, bm), (lo, hi) = key[0]
            return pkt["a"] & am == av and pkt["b"] & bm == bv and lo <= pkt["r"] <= hi
        (v, plen), (bv, bm) = key[0]
        return (pkt["a"] >> (32 - plen) == v >> (32 - plen) if plen else True) and pkt["b"] & bm == bv

    def lookup(self, pkt: dict) -> int:
        best = None
        for key, (rank, eid) in self.entries.items():     # dict order = insertion order: ties keep the first
            if self.matches(key, pkt) and (best is None or rank > best[0]):
                best = (rank, eid)
        return 0 if best is None else best[1]


def _api_match(kind: str, key) -> dict:
    if kind == "lpm1":
        (v, plen), = key
        return {"h.k.a": (v, plen)} if plen else {}
    if kind == "lpm2":
        vrf, (v, plen) = key
        return {"h.k.vrf": vrf, **({"h.k.a": (v, plen)} if plen else {})}
    if kind == "tern":
        (av, am), (bv, bm), (lo, hi) = key
        m = {}
        if am:
            m["h.k.a"] = (av, am)
        if bm:
            m["h.k.b"] = (bv, bm)
        if (lo, hi) != (0, 0xFFFF):
            m["h.k.r"] = (lo, hi)
        return m
    (v, plen), (bv, bm) = key
    m = {"h.k.a": (v, plen)} if plen else {}
    if bm:
        m["h.k.b"] = (bv, bm)
    return m


def _prefix_of(kind: str, key) -> tuple[int, int]:
    """The (value, prefix length) of the lpm field of a key of an LPM table."""
    return key[1] if kind == "lpm2" else key[0]


def _random_key(kind: str, rng: random.Random):
    if kind == "lpm1":
        return (_prefix(rng),)
    if kind == "lpm2":
        return (rng.randrange(3), _prefix(rng))
    if kind == "tern":
        am = rng.choice((0, 0xF0000000, 0xFFFF0000, 0xFFFFFFFF, 0x0F0F0000))
        bm = rng.choice((0, 0xFF, 0x0F, 0x80))
        lo = rng.randrange(0, 0x8000)
        return ((rng.getrandbits(32) & am, am), (rng.getrandbits(8) & bm, bm), (lo, lo + rng.randrange(0x8000)))
    bm = rng.choice((0, 0xFF, 0x0F))
    return (_prefix(rng), (rng.getrandbits(8) & bm, bm))


@pytest.mark.parametrize("kind,etype", [("lpm1", 1), ("lpm2", 2), ("tern", 3), ("lpm_tern", 4)])
@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "fast"])
def test_index_matches_brute_force(tmp_path, kind, etype, fuse):
    rng = random.Random(f"{kind}-{fuse}")
    f = tmp_path / "t.p4"
    f.write_text(PROGRAM)
    sw = Switch(str(f), fuse=fuse, queue_capacity=1 << 16)
    ref = Reference(kind)
    prio_table = kind in ("tern", "lpm_tern")
    table = f"I.{kind}"
    next_id = 1
    for step in range(6):
        # a round of changes: inserts, then modifies and deletes of random existing entries
        for _ in range(60):
            key = _random_key(kind, rng)
            prio = rng.randrange(1, 40) if prio_table else 0
            k = (key, prio)
            if k in ref.entries:
                continue
            rank = prio if prio_table else _prefix_of(kind, key)[1]
            try:
                sw.insert_entry(table, _api_match(kind, key), "I.mark", {"id": next_id}, priority=prio)
            except Exception as e:                               # a duplicate after canonicalisation
                assert getattr(e, "code", "") == "ALREADY_EXISTS", e
                continue
            ref.entries[k] = (rank, next_id)
            next_id += 1
        for k in rng.sample(list(ref.entries), min(15, len(ref.entries))):
            key, prio = k
            if rng.random() < 0.5:
                sw.delete_entry(table, _api_match(kind, key), priority=prio)
                del ref.entries[k]
            else:
                rank, _ = ref.entries[k]
                sw.modify_entry(table, _api_match(kind, key), "I.mark", {"id": next_id}, priority=prio)
                ref.entries[k] = (rank, next_id)
                next_id += 1
        # packets: addresses near the entries' prefixes (so they match) and random ones; each sent twice, so the
        # second answer comes from the lookup cache
        pkts = []
        keys = [k[0] for k in ref.entries]
        for _ in range(150):
            a = rng.getrandbits(32)
            if keys and rng.random() < 0.7:
                kk = rng.choice(keys)
                if kind == "tern":
                    v, m = kk[0]
                else:
                    v, plen = _prefix_of(kind, kk)
                    m = (0xFFFFFFFF << (32 - plen)) & 0xFFFFFFFF
                a = v | (rng.getrandbits(32) & ~m & 0xFFFFFFFF)
            pkts.append({"vrf": rng.randrange(3), "b": rng.getrandbits(8), "r": rng.getrandbits(16), "a": a})
        out = sw.process_batch([(0, frame(etype, **p)) for p in pkts + pkts])
        got = [int.from_bytes(o.data[6:12], "big") for o in out]
        want = [ref.lookup(p) for p in pkts] * 2
        assert len(got) == len(want)
        bad = [i for i in range(len(got)) if got[i] != want[i]]
        assert not bad, f"step {step}: packet {pkts[bad[0] % len(pkts)]}: got entry {got[bad[0]]}, want {want[bad[0]]}"

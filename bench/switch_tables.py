"""Table scale of the embedded P4 target: inserts and lookups as tables grow (issues 35 and 36).

What a controller and the packet path see through the public API of ``switch.target.Switch``, on a small v1model
program with one table of each kind (exact, LPM with an exact VRF field, ternary):

* inserts: ``insert_entry`` of N exact, LPM or ternary entries, microseconds per insert; candidate N = 10,000,
  baseline N = 10.  With inserts in O(1) or O(log n) the per-insert cost hardly changes (speedup near 1);
  quadratic inserts make the large table a thousand times slower per insert.
* lookups: packets per second through the whole pipeline with every packet to a different destination, so the
  lookup cache never hits and every packet is a real table lookup (exact: random sources among the entries);
  candidate: a table of 10,000 exact entries, LPM routes or ternary entries (4 mask shapes), baseline: 10 of
  them.  Lookups independent of the
  number of entries give a speedup near 1 (LPM: the cost follows the number of distinct prefix lengths, ternary
  the number of distinct mask tuples).

``--against DIR``: every case measured with this tree's ``switch`` package and with the one in DIR (another
checkout, e.g. ``git worktree add /tmp/old <commit>``), alternating, each in its own process: the before/after
comparison of a change to the table structures.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if os.environ.get("SWITCH_TABLES_CODE"):        # --against: import switch from another checkout
    sys.path.insert(0, os.environ["SWITCH_TABLES_CODE"])
else:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import Report  # noqa: E402

PROGRAM = r"""
#include <core.p4>
#include <v1model.p4>
header eth_t { bit<48> dst; bit<48> src; bit<16> type; }
header ip_t { bit<8> vrf; bit<8> proto; bit<32> src; bit<32> dst; }
struct headers_t { eth_t eth; ip_t ip; }
struct meta_t { bit<8> unused; }
parser P(packet_in pkt, out headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    state start { pkt.extract(h.eth); pkt.extract(h.ip); transition accept; }
}
control V(inout headers_t h, inout meta_t m) { apply { } }
control I(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    action fwd(bit<9> port) { sm.egress_spec = port; }
    action drop() { mark_to_drop(sm); }
    table hosts { key = { h.ip.src: exact; } actions = { fwd; drop; } default_action = drop(); size = 65536; }
    table routes {
        key = { h.ip.vrf: exact; h.ip.dst: lpm; }
        actions = { fwd; drop; } default_action = drop(); size = 65536;
    }
    table acl {
        key = { h.ip.dst: ternary; h.ip.proto: ternary; }
        actions = { fwd; drop; } default_action = drop(); size = 65536;
    }
    apply {
        if (h.eth.type == 0x0001) { hosts.apply(); }
        else if (h.eth.type == 0x0002) { routes.apply(); }
        else { acl.apply(); }
    }
}
control E(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control C(inout headers_t h, inout meta_t m) { apply { } }
control D(packet_out pkt, in headers_t h) { apply { pkt.emit(h.eth); pkt.emit(h.ip); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""

PACKETS = 4000


def _switch():
    from switch.target import Switch
    d = tempfile.mkdtemp(prefix="bench-tables-")
    p = Path(d) / "tables.p4"
    p.write_text(PROGRAM)
    return Switch(str(p), priority_queues=1, queue_capacity=1 << 16)


def _frame(kind: int, dst: int, proto: int = 17, src: int = 1) -> bytes:
    return (bytes(12) + kind.to_bytes(2, "big") + bytes([0, proto]) + src.to_bytes(4, "big")
            + dst.to_bytes(4, "big") + b"payload.")


def _timed_inserts(table: str, inserts: list[tuple[dict, dict]]) -> dict:
    """``insert_entry(table, match, "I.fwd", **rest)`` for each (match, rest) into a fresh switch, timed."""
    sw = _switch()
    t0 = time.process_time()
    for match, rest in inserts:
        sw.insert_entry(table, match, "I.fwd", **rest)
    dt = time.process_time() - t0
    return {"us_per_insert": dt / len(inserts) * 1e6, "entries": len(inserts)}


def case_insert(n: int) -> dict:
    return _timed_inserts("I.hosts", [({"h.ip.src": i + 1}, {"params": {"port": 1 + i % 4}}) for i in range(n)])


def case_insert_lpm(n: int) -> dict:
    return _timed_inserts("I.routes", [({"h.ip.vrf": 0, "h.ip.dst": (v, plen)}, {"params": {"port": 1}})
                                       for v, plen in _routes(n, random.Random(n))])


def case_insert_ternary(n: int) -> dict:
    return _timed_inserts("I.acl", [({"h.ip.dst": (v, mask), "h.ip.proto": (proto, 0xFF)},
                                     {"params": {"port": 2}, "priority": prio})
                                    for prio, (v, mask, proto) in enumerate(_acl(n, random.Random(n)), start=1)])


def case_exact(n: int) -> dict:
    """Exact lookups, every packet a different source (cache misses once the key set exceeds the cache)."""
    rng = random.Random(n)
    sw = _switch()
    for i in range(n):
        sw.insert_entry("I.hosts", {"h.ip.src": i + 1}, "I.fwd", {"port": 1 + i % 4})
    frames = [(0, _frame(1, 0, src=1 + rng.randrange(n))) for _ in range(PACKETS)]
    return _pps(sw, frames, n)


def _routes(n: int, rng: random.Random) -> list[tuple[int, int]]:
    """n distinct prefixes of lengths 8..32 (what a routing table holds), as (value, prefix length)."""
    out: set[tuple[int, int]] = set()
    while len(out) < n:
        plen = rng.choice((8, 16, 20, 24, 24, 24, 28, 32))
        v = rng.getrandbits(32) & ~((1 << (32 - plen)) - 1) & 0xFFFFFFFF
        out.add((v, plen))
    return sorted(out)


def case_lpm(n: int) -> dict:
    rng = random.Random(n)
    sw = _switch()
    routes = _routes(n, rng)
    for v, plen in routes:
        sw.insert_entry("I.routes", {"h.ip.vrf": 0, "h.ip.dst": (v, plen)}, "I.fwd", {"port": 1})
    # every packet to a different address inside a route (so each one is a hit, and a cache miss)
    frames = []
    for i in range(PACKETS):
        v, plen = routes[i % len(routes)]
        frames.append((0, _frame(2, v | (rng.getrandbits(32 - plen) if plen < 32 else 0))))
    return _pps(sw, frames, n)


def _acl(n: int, rng: random.Random) -> list[tuple[int, int, int]]:
    """n distinct ternary entries (value, mask, protocol) with 4 mask shapes on the address."""
    entries: set[tuple[int, int, int]] = set()
    while len(entries) < n:
        mask = rng.choice((0xFF000000, 0xFFFF0000, 0xFFFFFF00, 0xFFFFFFFF))
        entries.add((rng.getrandbits(32) & mask, mask, rng.choice((6, 17))))
    return sorted(entries)


def case_ternary(n: int) -> dict:
    rng = random.Random(n)
    sw = _switch()
    entries = _acl(n, rng)
    for prio, (v, mask, proto) in enumerate(entries, start=1):
        sw.insert_entry("I.acl", {"h.ip.dst": (v, mask), "h.ip.proto": (proto, 0xFF)}, "I.fwd", {"port": 2},
                        priority=prio)
    frames = []
    for i in range(PACKETS):
        v, mask, proto = entries[i % len(entries)]
        frames.append((0, _frame(3, v | (rng.getrandbits(32) & ~mask & 0xFFFFFFFF), proto)))
    return _pps(sw, frames, n)


def _pps(sw, frames, n: int) -> dict:
    # the inserts just made thousands of objects: collect them now, or the first full collection (a one-off,
    # tens of milliseconds) lands in the timed batch and measures the collector instead of the lookups
    gc.collect()
    t0 = time.process_time()
    out = sw.process_batch(frames)
    dt = time.process_time() - t0
    if len(out) != len(frames):
        raise RuntimeError(f"{len(frames) - len(out)} of {len(frames)} packets missed the table")
    return {"cpu_pps": len(frames) / dt, "entries": n}


CASES = {
    "insert 10000 exact vs 10": (lambda: case_insert(10000), lambda: case_insert(10), "us_per_insert", False),
    "insert 10000 lpm vs 10": (lambda: case_insert_lpm(10000), lambda: case_insert_lpm(10), "us_per_insert", False),
    "insert 10000 ternary vs 10": (lambda: case_insert_ternary(10000), lambda: case_insert_ternary(10),
                                   "us_per_insert", False),
    "exact lookups 10000 vs 10": (lambda: case_exact(10000), lambda: case_exact(10), "cpu_pps", True),
    "lpm lookups 10000 vs 10 routes": (lambda: case_lpm(10000), lambda: case_lpm(10), "cpu_pps", True),
    "ternary lookups 10000 vs 10": (lambda: case_ternary(10000), lambda: case_ternary(10), "cpu_pps", True),
}
ONE = {"insert_4000": lambda: case_insert(4000), "insert_10000": lambda: case_insert(10000),
       "insert_lpm_10000": lambda: case_insert_lpm(10000), "insert_ternary_10000": lambda: case_insert_ternary(10000),
       "exact_10000": lambda: case_exact(10000), "lpm_4000": lambda: case_lpm(4000),
       "lpm_10000": lambda: case_lpm(10000), "lpm_10": lambda: case_lpm(10), "ternary_1000": lambda: case_ternary(1000),
       "ternary_10000": lambda: case_ternary(10000), "ternary_10": lambda: case_ternary(10)}


def _in_process(code: Path | None, name: str) -> dict:
    env = dict(os.environ)
    if code is not None:
        env["SWITCH_TABLES_CODE"] = str(code)
    r = subprocess.run([sys.executable, __file__, "--one", name], env=env, capture_output=True, text=True,
                       timeout=600, cwd=ROOT)
    if r.returncode != 0:
        raise RuntimeError(f"{name} with {code or 'this tree'} failed:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--against", type=Path, metavar="DIR", help="compare with the switch package of DIR")
    ap.add_argument("--one", choices=sorted(ONE), help=argparse.SUPPRESS)
    ap.add_argument("--repetitions", type=int, default=3)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(ONE[a.one]()))
        return 0
    if a.against:
        rep = Report("switch_tables_against", params={"other": str(a.against), "packets": PACKETS})
        for name, metric, hib in (("insert_4000", "us_per_insert", False), ("lpm_4000", "cpu_pps", True),
                                  ("lpm_10", "cpu_pps", True), ("ternary_1000", "cpu_pps", True)):
            rep.compare(name, candidate=lambda n=name: _in_process(None, n),
                        baseline=lambda n=name: _in_process(a.against.resolve(), n), metric=metric,
                        higher_is_better=hib, repetitions=a.repetitions, warmup=0,
                        candidate_name="this tree", baseline_name=str(a.against))
        rep.write()
        return 0
    rep = Report("switch_tables", params={"packets": PACKETS})
    for case, (cand, base, metric, hib) in CASES.items():
        rep.compare(case, candidate=cand, baseline=base, metric=metric, higher_is_better=hib,
                    repetitions=a.repetitions, candidate_name="large table", baseline_name="small table")
    rep.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())

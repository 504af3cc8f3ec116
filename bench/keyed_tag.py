"""The keyed tag's cost (``python bench/keyed_tag.py``): the same transfers with a key (every packet tagged with
the MAC of ``host/transport/_tag.h`` by the sender, checked by the receiver) and without one, side by side in one run.

Cases (each a candidate/baseline pair of :mod:`harness`; candidate = keyed, baseline = unkeyed):

* point-to-point on loopback, two processes (127.x addresses), MTU 9000 and MTU 1500: the CPU-bound case, where
  any per-byte cost shows in the goodput;
* point-to-point between two network namespaces whose veth links to a bridge are shaped to 1 Gb/s by tbf
  (``testbed.netns.Star``), MTU 1500: the link-bound case;
* the hash alone: the C lane's tag over 64 MiB of MTU-1500 packets, against copying the same bytes (what the
  receive path does to every payload anyway).

Metrics: ``gbps`` (receiver goodput) and, from the same runs, ``cpu_ms_per_mb``: the CPU time of both processes
(all threads, user and kernel) per MB moved. The tag's cost per MB is the difference of the two
``cpu_ms_per_mb`` medians (written to the results as ``tag_cpu_ms_per_mb`` per case).

Worker mode (``--worker``) is what runs in each process.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KEY_HEX = "000102030405060708090a0b0c0d0e0f"  # a benchmark's key need not be secret


def _worker(args: argparse.Namespace) -> None:
    sys.modules["torch"] = None  # type: ignore[assignment]  # numpy is enough here; importing torch costs seconds
    sys.path.insert(0, str(ROOT))
    import numpy as np

    from harness import await_release

    from host.transport import Endpoint, Options
    from host.transport.cc import params_for_mode
    from host.transport.chunking import payload_capacity

    addrs = args.addrs.split(",")
    me = args.rank
    n = args.bytes // 4
    data = np.random.default_rng(7).standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)  # pages touched now (see bench/transport.py)
    key = bytes.fromhex(KEY_HEX) if args.keyed else None
    ep = Endpoint(me, dict(enumerate(addrs)), 1, 1, Options(mtu=args.mtu, peer_timeout=20,
                                                            cc=params_for_mode("on", payload_capacity(args.mtu))),
                  key=key)
    await_release()
    t0, c0 = time.monotonic(), time.process_time()
    result: dict = {"rank": me}
    for i in range(args.transfers):
        if me == 0:
            ep.send(1, data, transfer_id=i + 1).wait(60)
        else:
            res = ep.recv(0, i + 1, out=out, timeout=60)
            assert res.report.zero_filled == 0
    result["seconds"] = time.monotonic() - t0
    result["cpu_s"] = time.process_time() - c0
    st = ep.stats()
    result["rejected_tag"] = st["rejected_by_field"].get("tag", 0)
    ep.close()
    if me == 1 and not np.array_equal(out, data):
        raise SystemExit("rank 1: data corrupted")
    print(json.dumps(result), flush=True)


def _run(keyed: bool, addrs: list[str], cmd_for, nbytes: int, mtu: int, transfers: int) -> dict:
    """One sender and one receiver process, released together; goodput and CPU per MB of the pair."""
    from harness import run_released
    cmds = []
    for i in range(2):
        argv = [sys.executable, str(Path(__file__).resolve()), "--worker", "--rank", str(i), "--addrs",
                ",".join(addrs), "--bytes", str(nbytes), "--mtu", str(mtu), "--transfers", str(transfers)]
        if keyed:
            argv.append("--keyed")
        cmds.append(cmd_for(i, argv))
    results = run_released(cmds, 300, f"keyed_tag ({'keyed' if keyed else 'unkeyed'})")
    mb = nbytes * transfers / 1e6
    rx = results[1]
    if any(r["rejected_tag"] for r in results):
        raise RuntimeError(f"genuine packets were rejected for their tag: {results}")
    return {"gbps": nbytes * transfers * 8 / rx["seconds"] / 1e9,
            "cpu_ms_per_mb": 1e3 * sum(r["cpu_s"] for r in results) / mb}


def _hash_only(mb: int, keyed: bool) -> dict:
    """The C tag over ``mb`` MiB cut into MTU-1500 packets (keyed), or a copy of the same bytes (baseline)."""
    sys.path.insert(0, str(ROOT))
    import numpy as np

    from host import wire
    from host.transport import _txlane
    from host.transport.chunking import payload_capacity

    plen = payload_capacity(1500)
    buf = np.random.default_rng(1).integers(0, 256, mb << 20, dtype=np.uint8)
    dst = np.empty_like(buf)
    hdr = bytes(wire.HEADER_LEN)
    key = bytes.fromhex(KEY_HEX)
    mv, dv = memoryview(buf), memoryview(dst)
    t0 = time.process_time()
    for off in range(0, len(buf), plen):
        if keyed:
            _txlane.packet_tag(key, hdr, mv[off: off + plen])
        else:
            dv[off: off + plen] = mv[off: off + plen]
    dt = time.process_time() - t0
    return {"cpu_ms_per_mb": 1e3 * dt / (len(buf) / 1e6)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--rank", type=int)
    ap.add_argument("--addrs")
    ap.add_argument("--bytes", type=int, default=32 << 20)
    ap.add_argument("--mtu", type=int, default=9000)
    ap.add_argument("--transfers", type=int, default=4)
    ap.add_argument("--keyed", action="store_true")
    ap.add_argument("--repetitions", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="smaller transfers, 3 repetitions")
    ap.add_argument("--only", default="", help="run only the cases whose name contains this text")
    args = ap.parse_args()
    if args.worker:
        _worker(args)
        return

    from harness import Report
    from testbed.netns import Star

    reps = 3 if args.quick else args.repetitions
    nbytes = (16 if args.quick else 32) << 20
    transfers = 2 if args.quick else 4
    rate = "1gbit"
    rep = Report("keyed_tag", params={"bytes_per_transfer": nbytes, "transfers_per_run": transfers,
                                      "repetitions": reps, "candidate": "keyed (NH + SipHash-2-4 tag on every packet)",
                                      "baseline": "unkeyed (tag field 0, not checked)", "shaped_rate": rate})
    costs: dict[str, float] = {}

    def case(name: str, mtu: int, shaped: bool) -> None:
        if args.only not in name:
            return
        if shaped:
            net = Star(2, rate=rate, mtu=mtu)
            addrs = [h.ip for h in net.hosts]
            cmd_for = net.cmd
        else:
            net = None
            base = f"127.{os.getpid() % 250 + 1}.78"
            addrs = [f"{base}.1", f"{base}.2"]

            def cmd_for(i, argv):
                return argv
        params = {"mtu": mtu, "shaped": rate if shaped else None}
        try:
            res = rep.compare(name, candidate=lambda: _run(True, addrs, cmd_for, nbytes, mtu, transfers),
                              baseline=lambda: _run(False, addrs, cmd_for, nbytes, mtu, transfers), metric="gbps",
                              higher_is_better=True, repetitions=reps, warmup=1, candidate_name="keyed",
                              baseline_name="unkeyed", params=params)
            cpu = {role: iter([m["cpu_ms_per_mb"] for m in res["repetitions"][role]]) for role in res["repetitions"]}
            c = rep.compare(name + " cpu", candidate=lambda: {"cpu_ms_per_mb": next(cpu["candidate"])},
                            baseline=lambda: {"cpu_ms_per_mb": next(cpu["baseline"])}, metric="cpu_ms_per_mb",
                            higher_is_better=False, repetitions=reps, warmup=0, candidate_name="keyed",
                            baseline_name="unkeyed", params=params)
            costs[name] = c["median"]["candidate"] - c["median"]["baseline"]
        finally:
            if net is not None:
                net.close()

    case("p2p loopback, MTU 9000", 9000, False)
    case("p2p loopback, MTU 1500", 1500, False)
    case("p2p 1Gb/s tbf veth, MTU 1500", 1500, True)
    hash_case = "hash only, 64 MiB at MTU 1500 vs memcpy"
    if args.only in hash_case:
        c = rep.compare(hash_case, candidate=lambda: _hash_only(64, True),
                        baseline=lambda: _hash_only(64, False), metric="cpu_ms_per_mb", higher_is_better=False,
                        repetitions=reps, warmup=1, candidate_name="tag", baseline_name="memcpy")
        costs["hash only (per MB hashed)"] = c["median"]["candidate"]
    rep.params["tag_cpu_ms_per_mb"] = {k: round(v, 4) for k, v in costs.items()}
    print("tag cost, CPU ms per MB (keyed - unkeyed, both ends):", json.dumps(rep.params["tag_cpu_ms_per_mb"]))
    rep.write()


if __name__ == "__main__":
    main()

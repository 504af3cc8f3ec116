"""DLCP transport throughput vs a TCP stream over the same links (``python bench/transport.py``).

Cases (each a candidate/baseline pair of :mod:`harness`):

* point-to-point, 2 namespaces on a bridge, links shaped to 1 Gb/s by tbf, MTU 1500 and 9000;
* all-to-all between 4 namespaces (every host sends one tensor to every other at once), shaped, MTU 9000, with
  the transport's default congestion control and with FAST's delay law (``CCParams.fast_alpha``, the backend's
  ``congestion_control="fast"``), which gives flows through one queue equal shares;
* point-to-point on loopback without shaping (two processes, 127.x addresses), MTU 9000.

The candidate is DLCP (``host.transport.Endpoint``, loss bound 0 = fully reliable); the baseline is a Python TCP
sender/receiver pair moving the same bytes (``sendall`` of a memoryview, ``recv_into`` a preallocated buffer),
so both sides pay the same interpreter costs. Both receive from every sender at once, in one thread per sender
(a DLCP receive posted late would stage its data and copy it again). Every host runs in its own process; after all have set up, the
parent releases them together and each receiver reports the goodput it saw (bytes / time from release to the
last byte). Metric ``gbps``: per-flow goodput for point-to-point, mean per-host receive goodput for all-to-all.
Each case also reports ``cpu_ms_per_mb`` (case name + " cpu", the same runs): the CPU time of every host process
(all threads, user and kernel) from release to done, per MB moved, which is what limits the all-to-all when four
hosts share two cores.

Worker mode (``--worker``) is what runs inside the namespaces.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TCP_PORT = 19500


# --- worker side (one process per host) --------------------------------------------------------------------------

def _worker(args: argparse.Namespace) -> None:
    sys.modules["torch"] = None  # type: ignore[assignment]  # numpy is enough here; importing torch costs seconds
    sys.path.insert(0, str(ROOT))
    from harness import await_release
    import numpy as np

    addrs = args.addrs.split(",")
    me = args.rank
    peers = [r for r in range(len(addrs)) if r != me] if args.all_to_all else ([1] if me == 0 else [])
    senders = [r for r in range(len(addrs)) if r != me] if args.all_to_all else ([0] if me == 1 else [])
    n = args.bytes // 4
    data = np.random.default_rng(me).standard_normal(n).astype(np.float32)
    outs = {r: np.empty(n, np.float32) for r in senders}
    for o in outs.values():  # touch the pages now: a training loop reuses its buffers, and on this VM the first
        o.fill(0)  # write to a fresh page (zeroing a 2 MB huge page) cost ~40% of a receiver's CPU, both protocols
    result: dict = {"rank": me}
    if args.proto == "dlcp":
        from host.transport import Endpoint, Options
        from host.transport.cc import params_for_mode
        from host.transport.chunking import payload_capacity
        cc = params_for_mode("on" if args.cc == "default" else args.cc, payload_capacity(args.mtu))
        ep = Endpoint(me, {r: a for r, a in enumerate(addrs)}, 1, 1, Options(mtu=args.mtu, peer_timeout=20, cc=cc))
        await_release()
        t0, c0 = time.monotonic(), time.process_time()
        ends = []
        errors: list[BaseException] = []

        def recv_from(r: int) -> None:  # one receiving thread per sender, as the TCP side below
            try:
                res = ep.recv(r, 1, out=outs[r], timeout=60)
                ends.append(time.monotonic())
                assert res.report.zero_filled == 0
            except BaseException as e:  # re-raised in the main thread
                errors.append(e)

        receivers = [threading.Thread(target=recv_from, args=(r,)) for r in senders]
        for t in receivers:
            t.start()
        handles = [ep.send(r, data, transfer_id=1) for r in peers]
        for t in receivers:
            t.join()
        if errors:
            raise errors[0]
        for h in handles:
            h.wait(60)
        result["cpu_s"] = time.process_time() - c0
        st = ep.stats()
        result.update(retransmissions=st["retransmissions"], peers=st["peers"], rx_datagrams=st["rx_datagrams"])
        ep.close()
    else:
        lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lsock.bind((addrs[me], TCP_PORT))
        lsock.listen(16)
        await_release()
        t0, c0 = time.monotonic(), time.process_time()
        ends = []

        def send(r: int) -> None:
            for _ in range(200):
                try:
                    s = socket.create_connection((addrs[r], TCP_PORT), source_address=(addrs[me], 0))
                    break
                except ConnectionRefusedError:
                    time.sleep(0.01)
            s.sendall(memoryview(data).cast("B"))
            s.shutdown(socket.SHUT_WR)
            s.recv(1)
            s.close()

        def recv_one() -> None:
            c, addr = lsock.accept()
            r = addrs.index(addr[0])
            mv = memoryview(outs[r]).cast("B")
            got = 0
            while got < len(mv):
                k = c.recv_into(mv[got:])
                if not k:
                    raise RuntimeError("short TCP stream")
                got += k
            ends.append(time.monotonic())
            c.close()

        threads = [threading.Thread(target=send, args=(r,)) for r in peers]
        threads += [threading.Thread(target=recv_one) for _ in senders]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        result["cpu_s"] = time.process_time() - c0
        lsock.close()
    for r in senders:
        ok = np.array_equal(outs[r], np.random.default_rng(r).standard_normal(n).astype(np.float32))
        if not ok:
            raise SystemExit(f"rank {me}: data from {r} corrupted")
    if ends:
        dur = max(ends) - t0
        result.update(seconds=dur, gbps=len(senders) * args.bytes * 8 / dur / 1e9)
    print(json.dumps(result), flush=True)


# --- parent side -------------------------------------------------------------------------------------------------

def _run(proto: str, addrs: list[str], cmd_for, nbytes: int, mtu: int, all_to_all: bool,
         cc: str = "default") -> dict:
    """Start one worker per host, release them together, collect their JSON lines."""
    from harness import run_released
    cmds = []
    for i in range(len(addrs)):
        argv = [sys.executable, str(Path(__file__).resolve()), "--worker", "--proto", proto, "--rank", str(i),
                "--addrs", ",".join(addrs), "--bytes", str(nbytes), "--mtu", str(mtu), "--cc", cc]
        if all_to_all:
            argv.append("--all-to-all")
        cmds.append(cmd_for(i, argv))
    results = run_released(cmds, 120, f"{proto} workers")
    if os.environ.get("DLCP_BENCH_DEBUG"):
        print(proto, results, file=sys.stderr)
    rx = [r for r in results if "gbps" in r]
    moved_mb = len(addrs) * (len(addrs) - 1) * nbytes / 1e6 if all_to_all else nbytes / 1e6
    metrics = {"gbps": sum(r["gbps"] for r in rx) / len(rx), "per_receiver_gbps": [round(r["gbps"], 3) for r in rx],
               "cpu_ms_per_mb": 1e3 * sum(r["cpu_s"] for r in results) / moved_mb}
    if proto == "dlcp":
        metrics["retransmissions"] = sum(r.get("retransmissions", 0) for r in results)
    return metrics


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--proto", choices=["dlcp", "tcp"])
    ap.add_argument("--rank", type=int)
    ap.add_argument("--addrs")
    ap.add_argument("--bytes", type=int, default=64 << 20)
    ap.add_argument("--mtu", type=int, default=9000)
    ap.add_argument("--all-to-all", action="store_true")
    ap.add_argument("--cc", choices=["default", "fast"], default="default", help="DLCP congestion control")
    ap.add_argument("--repetitions", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="smaller tensors, 2 repetitions")
    ap.add_argument("--only", default="", help="run only the cases whose name contains this text")
    args = ap.parse_args()
    if args.worker:
        _worker(args)
        return

    from harness import Report
    from testbed.netns import Star

    reps = 2 if args.quick else args.repetitions
    p2p_bytes = (32 if args.quick else 64) << 20
    a2a_bytes = (8 if args.quick else 16) << 20
    rate = "1gbit"
    rep = Report("transport", params={"link_rate": rate, "p2p_bytes": p2p_bytes, "a2a_bytes_per_pair": a2a_bytes,
                                      "repetitions": reps, "baseline": "Python TCP stream (sendall/recv_into)",
                                      "candidate": "DLCP endpoint, loss_bound=0"})

    def case(name: str, n_hosts: int, mtu: int, nbytes: int, all_to_all: bool, link: str,
             cc: str = "default") -> None:
        """``link``: "tbf" (namespaces on a bridge, links shaped to ``rate``), "veth" (the same, unshaped) or
        "loopback" (addresses of 127/8 in this namespace)."""
        if args.only not in name:
            return
        shaped = link == "tbf"
        if link in ("tbf", "veth"):
            net = Star(n_hosts, rate=rate if shaped else None, mtu=mtu)
            addrs = [h.ip for h in net.hosts]
            cmd_for = net.cmd
        else:
            net = None
            base = f"127.{os.getpid() % 250 + 1}.77"
            addrs = [f"{base}.{i + 1}" for i in range(n_hosts)]

            def cmd_for(i, argv):
                return argv
        params = {"hosts": n_hosts, "mtu": mtu, "bytes": nbytes, "shaped": rate if shaped else None, "cc": cc}
        try:
            res = rep.compare(name, candidate=lambda: _run("dlcp", addrs, cmd_for, nbytes, mtu, all_to_all, cc),
                              baseline=lambda: _run("tcp", addrs, cmd_for, nbytes, mtu, all_to_all), metric="gbps",
                              higher_is_better=True, repetitions=reps, warmup=1, candidate_name="dlcp",
                              baseline_name="tcp", params=params)
            # the same runs' CPU (every host process, all threads, user + kernel) per MB moved: where the CPU is
            # short (4 hosts on 2 cores), this is what limits the goodput
            cpu = {role: iter([m["cpu_ms_per_mb"] for m in res["repetitions"][role]]) for role in res["repetitions"]}
            rep.compare(name + " cpu", candidate=lambda: {"cpu_ms_per_mb": next(cpu["candidate"])},
                        baseline=lambda: {"cpu_ms_per_mb": next(cpu["baseline"])}, metric="cpu_ms_per_mb",
                        higher_is_better=False, repetitions=reps, warmup=0, candidate_name="dlcp",
                        baseline_name="tcp", params=params)
        finally:
            if net is not None:
                net.close()

    case("p2p 1Gb/s tbf, MTU 9000", 2, 9000, p2p_bytes, False, "tbf")
    case("p2p 1Gb/s tbf, MTU 1500", 2, 1500, p2p_bytes, False, "tbf")
    case("all-to-all 4 hosts 1Gb/s tbf, MTU 9000", 4, 9000, a2a_bytes, True, "tbf")
    case("all-to-all 4 hosts 1Gb/s tbf, MTU 9000, FAST cc", 4, 9000, a2a_bytes, True, "tbf", cc="fast")
    case("p2p loopback unshaped, MTU 9000", 2, 9000, p2p_bytes, False, "loopback")
    case("p2p veth unshaped, MTU 9000", 2, 9000, p2p_bytes, False, "veth")
    rep.write()


if __name__ == "__main__":
    main()

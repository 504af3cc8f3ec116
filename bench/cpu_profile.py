"""Where the CPU of an all-reduce goes (``python bench/cpu_profile.py``): dlcp against gloo, per thread, per call.

The same processes run dlcp and gloo all-reduces of float32 tensors in alternating rounds (as ``collectives.py``
does; each call after a gloo barrier), and around every call read each of their threads' CPU time
(``/proc/self/task/*/schedstat``: the scheduler's nanosecond clock of time on a CPU) and voluntary and involuntary
context switches (``status``). Per backend and case the result is, per call and summed over the ranks:

* ``seconds``: the call's wall time (slowest rank), the comparison's metric;
* per thread (Python's thread name, or the kernel's for a C++ thread such as gloo's ``gloo_tcp_loop``; numbered
  threads folded: ``dlcp-io``): ``cpu_ms`` and the ``wakeups`` (voluntary switches: each is a sleep that a later
  wake-up ended) and ``preempted`` (involuntary switches: the thread was runnable and lost its CPU);
* their totals.

The caller's thread reads ``/proc`` around each call, and that costs it CPU inside the window: the median cost of
an empty window (``probe_ms``) is taken off the caller's figure.

A thread's time while another backend's call runs is not counted (every call has its own window), so idle
threads of the other backend do not blur the figures. Cases: P=2 on loopback (one private namespace) and on
unshaped veth links between namespaces (``veth``), 64 KiB, 1 MiB and 16 MiB; each twice, on an otherwise idle
machine and with one busy process per core beside the ranks (``busy``), which is what a training host's data
loaders and model do to a transport's threads. These ranks run one torch thread (``torch.set_num_threads(1)``,
as the project's other benchmarks and the testbed's workers do).

``dlcp_transport`` in each case's params: dlcp's datagrams, GRO and GSO buffers, ACKs and retransmissions per
call, summed over the ranks. The ``20Mb/s`` cases run on the demo's links (20 Mb/s tbf, MTU 1500), idle only:
a transfer is hundreds of paced datagrams, each received, checked and acknowledged on its own. On ``20Mb/s``
tbf lets a GSO run through at once (a GRO buffer per run at the receiver); on ``20Mb/s-paced`` datagrams arrive
one at a time, as on the testbed's links: with the defaults, under which both holds apply there (the ACK hold: a
pass ending with fewer than 4 new packets of a transfer holds its ACK, up to 3 ms; the receive hold: the I/O
thread sleeps through arrivals for up to 1.5 ms while a transfer is mid-arrival; both only while a transfer's
packets come at least 200 us apart: ``Options.ack_hold``, ``rx_hold``, ``hold_gap``); with the ACK hold alone
(``DLCP_RX_HOLD_MS=0``); and with neither (``DLCP_ACK_HOLD_MS=0``, ``DLCP_RX_HOLD_MS=0``).

The ``x8 torch-default`` cases are a training script as its user writes it: torch's own intra-op threads (no
``set_num_threads``, no ``OMP_NUM_THREADS``) and 8 all-reduces back to back in each window (as DDP issues its
buckets); times and CPU are per call. That is where torch's OpenMP pool meets the transport: a collective that ran
its reductions and copies through torch's kernels left the pool's threads spinning through the next calls
(``host/elementwise.py``).

``--quick``: fewer repetitions. ``--only TEXT``: cases whose name contains TEXT.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIZES = [64 << 10, 1 << 20, 16 << 20]
NETS = ["loopback", "veth"]
LOADS = ["idle", "busy"]
#: The demo's links (20 Mb/s, MTU 1500: bench/collectives.SHAPED): sizes, idle only (a call takes about 0.45 s
#: per MiB, so the run stays short).
SLOW_NET, SLOW_SIZES = "20Mb/s", [64 << 10, 1 << 20]
#: Datagrams one at a time (bench/collectives.SHAPED): 1 MiB, with the defaults and with each of these
#: environments (name suffix, variables).
PACED_NET, PACED_SIZES = "20Mb/s-paced", [1 << 20]
PACED_VARIANTS = [("", None), (" no-rx-hold", {"DLCP_RX_HOLD_MS": "0"}),
                  (" no-holds", {"DLCP_ACK_HOLD_MS": "0", "DLCP_RX_HOLD_MS": "0"})]
#: dlcp's transport counters per call, summed over the ranks (host.backend.transport_stats): how many datagrams,
#: GRO/GSO buffers, ACKs and retransmissions the CPU above pays for, and the I/O threads' wake-ups for datagrams
#: and on their own timeouts, and the socket wake-ups the native wait handled whole (no Python).
EVENTS = ("tx_datagrams", "rx_datagrams", "tx_gso_sends", "rx_gro_buffers", "acks_sent", "acks_rx",
          "retransmissions", "rto_timeouts", "io_wakes_socket", "io_wakes_timeout", "io_native_wakes")
#: The user's-defaults cases: sizes, calls per window (back to back), on loopback, under each load.
DEFAULT_THREADS_SIZES = [1 << 20, 16 << 20]
BACK_TO_BACK = 8


def _reps(nbytes: int, quick: bool, net: str = "") -> int:
    if net in (SLOW_NET, PACED_NET):
        return 4 // (2 if quick else 1)
    return (12 if nbytes <= 1 << 20 else 6) // (2 if quick else 1)


def _threads() -> dict[int, str]:
    """This process's threads: native id -> a name (Python's thread name, numbers folded; else the kernel's)."""
    import threading

    names = {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}
    out = {}
    for tid in map(int, os.listdir("/proc/self/task")):
        name = names.get(tid)
        if name is None:
            try:
                name = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
            except OSError:
                continue
        out[tid] = re.sub(r"(-r?\d+)+$", "", re.sub(r"-pg\d+", "-pg", name))
    return out


def _snapshot() -> dict[int, tuple[str, int, int, int]]:
    """Per thread: (name, CPU ns, voluntary switches, involuntary switches)."""
    snap = {}
    for tid, name in _threads().items():
        try:
            cpu_ns = int(Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[0])
            status = Path(f"/proc/self/task/{tid}/status").read_text()
        except OSError:  # the thread ended
            continue
        vol = int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", status, re.M).group(1))
        inv = int(re.search(r"^nonvoluntary_ctxt_switches:\s+(\d+)", status, re.M).group(1))
        snap[tid] = (name, cpu_ns, vol, inv)
    return snap


def _delta(before: dict, after: dict, into: dict[str, list[float]]) -> None:
    """Add each thread's CPU ms, wake-ups and preemptions between the two snapshots to ``into[name]``."""
    for tid, (name, cpu, vol, inv) in after.items():
        _, cpu0, vol0, inv0 = before.get(tid, (name, 0, 0, 0))
        acc = into.setdefault(name, [0.0, 0.0, 0.0])
        acc[0] += (cpu - cpu0) / 1e6
        acc[1] += vol - vol0
        acc[2] += inv - inv0


def _worker(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT))
    import torch
    import torch.distributed as dist

    if not args.torch_default:
        torch.set_num_threads(1)
    plan = json.loads(args.plan)  # [[nbytes, reps, calls per window], ...]
    dist.init_process_group("dlcp")
    gloo = dist.new_group(backend="gloo")
    # Reading /proc costs the reading thread (the caller's) CPU inside the window; measured on empty windows and
    # taken off the caller's figure.
    probe: dict[str, list[float]] = {}
    for _ in range(20):
        _delta(_snapshot(), _snapshot(), probe)
    probe_ms = probe.get("MainThread", [0.0])[0] / 20
    from host.backend import transport_stats

    out: dict = {"times": [], "threads": [], "probe_ms": probe_ms, "transport": []}
    for nbytes, reps, calls in plan:
        x = torch.randn(nbytes // 4)
        times = {"dlcp": [], "gloo": []}
        threads: dict[str, dict[str, list[float]]] = {"dlcp": {}, "gloo": {}}
        events = dict.fromkeys(EVENTS, 0)
        for rnd in range(reps + 1):
            order = [("dlcp", None), ("gloo", gloo)]
            for label, g in (order if rnd % 2 == 0 else order[::-1]):
                dist.barrier(group=gloo)
                c0 = transport_stats() if label == "dlcp" else None
                s0 = _snapshot()
                t0 = time.perf_counter()
                for _ in range(calls):
                    dist.all_reduce(x, group=g)
                dt = time.perf_counter() - t0
                s1 = _snapshot()
                if rnd:  # round 0 warms up
                    times[label].append(dt / calls)
                    _delta(s0, s1, threads[label])
                    threads[label]["MainThread"][0] -= probe_ms
                    if c0 is not None:
                        c1 = transport_stats()
                        for k in EVENTS:
                            events[k] += c1.get(k, 0) - c0.get(k, 0)
        t = torch.tensor(times["dlcp"] + times["gloo"], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)  # a call ends when the slowest rank is done
        per_rank = [None] * dist.get_world_size()
        dist.all_gather_object(per_rank, {b: {k: [v / (reps * calls) for v in acc] for k, acc in threads[b].items()}
                                          for b in threads}, group=gloo)
        summed: dict[str, dict[str, list[float]]] = {"dlcp": {}, "gloo": {}}
        for rank_threads in per_rank:
            for b, names in rank_threads.items():
                for k, v in names.items():
                    acc = summed[b].setdefault(k, [0.0, 0.0, 0.0])
                    for i in range(3):
                        acc[i] += v[i]
        ev = [None] * dist.get_world_size()
        dist.all_gather_object(ev, {k: v / (reps * calls) for k, v in events.items()}, group=gloo)
        out["times"].append(t.tolist())
        out["threads"].append(summed)
        out["transport"].append({k: round(sum(e[k] for e in ev), 2) for k in EVENTS})
    if dist.get_rank() == 0:
        Path(args.out).write_text(json.dumps(out))
    dist.barrier(group=gloo)
    dist.destroy_process_group()


def _busy(n: int) -> list[subprocess.Popen]:
    """``n`` processes that spin on a core each (a training host's other work)."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--out")
    ap.add_argument("--plan")
    ap.add_argument("--quick", action="store_true", help="half the repetitions")
    ap.add_argument("--only", action="append", default=[], help="run only cases whose name contains this text")
    ap.add_argument("--torch-default", action="store_true", help=argparse.SUPPRESS)  # (the worker: torch's threads)
    args = ap.parse_args()
    if args.worker:
        sys.path.insert(0, str(ROOT))  # (this checkout's host package, not another one installed in the venv)
        from host.procexit import exit_process

        _worker(args)
        exit_process()

    from collectives import size_label, spawn_world
    from harness import Report

    nets = NETS if os.geteuid() == 0 else ["loopback"]
    world = 2
    rep = Report("cpu_profile", params={
        "world": world, "sizes": SIZES, "networks": nets, "loads": LOADS, "op": "all_reduce float32",
        "busy": f"{os.cpu_count()} processes spinning in Python (one per core) beside the ranks",
        "per_thread": "cpu_ms, wakeups (voluntary context switches), preempted (involuntary), per call, summed "
                      "over the ranks; threads named by Python's thread name or the kernel's; the caller's CPU "
                      "less what reading /proc costs it (probe_ms, measured on empty windows)"})
    groups = [(load, net, SIZES, 1, False, "", None) for load in LOADS for net in nets]
    groups += [(load, "loopback", DEFAULT_THREADS_SIZES, BACK_TO_BACK, True, "", None) for load in LOADS]
    if os.geteuid() == 0:
        groups.append(("idle", SLOW_NET, SLOW_SIZES, 1, False, "", None))
        groups += [("idle", PACED_NET, PACED_SIZES, 1, False, suffix, env) for suffix, env in PACED_VARIANTS]
    for load, net, sizes, calls, torch_default, suffix, env in groups:
        def case(nbytes: int) -> str:
            return f"{net} {load} P={world} all_reduce {size_label(nbytes)}" + (
                f" x{calls} torch-default" if torch_default else "") + suffix

        plan = [[s, _reps(s, args.quick, net), calls] for s in sizes
                if not args.only or any(o in case(s) for o in args.only)]
        if not plan:
            continue
        hogs = _busy(os.cpu_count() or 1) if load == "busy" else []
        try:
            overrides = {**({"OMP_NUM_THREADS": None} if torch_default else {}), **(env or {})}
            got = spawn_world(net, world, ["--plan", json.dumps(plan)] + ["--torch-default"] * torch_default,
                              script=Path(__file__), env_overrides=overrides or None)
        finally:
            for h in hogs:
                h.kill()
                h.wait()
        for (nbytes, reps, _), t, threads, events in zip(plan, got["times"], got["threads"], got["transport"]):
            name = case(nbytes)
            it_c, it_b = iter(t[:reps]), iter(t[reps:])
            params = {"bytes": nbytes, "network": net, "load": load, "world": world, "calls_per_window": calls,
                      "environment": env or {},
                      "torch_threads": "torch's default" if torch_default else 1, "dlcp_transport": events,
                      "probe_ms": round(got["probe_ms"], 4),
                      "threads": {b: {k: {"cpu_ms": round(v[0], 4), "wakeups": round(v[1], 2),
                                          "preempted": round(v[2], 2)} for k, v in sorted(threads[b].items())
                                      if v[0] >= 0.001 or v[1] >= 0.05}
                                  for b in threads}}
            for b in ("dlcp", "gloo"):
                params[f"cpu_ms_{b}"] = round(sum(v[0] for v in threads[b].values()), 4)
                params[f"wakeups_{b}"] = round(sum(v[1] for v in threads[b].values()), 2)
            rep.compare(name, candidate=lambda: {"seconds": next(it_c)}, baseline=lambda: {"seconds": next(it_b)},
                        metric="seconds", higher_is_better=False, repetitions=reps, warmup=0,
                        candidate_name="dlcp", baseline_name="gloo", params=params)
            print(f"{name:40} dlcp {statistics.median(t[:reps]) * 1e3:8.2f} ms cpu {params['cpu_ms_dlcp']:7.2f} ms"
                  f" wake {params['wakeups_dlcp']:6.1f} | gloo {statistics.median(t[reps:]) * 1e3:8.2f} ms cpu "
                  f"{params['cpu_ms_gloo']:7.2f} ms wake {params['wakeups_gloo']:6.1f}", flush=True)
    rep.write()


if __name__ == "__main__":
    main()

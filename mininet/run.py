"""Run one testbed job: build the network, program the switches, start background traffic and the workers,
collect results, tear everything down.

:func:`run_spec` is what ``dlcp-testbed run SPEC`` calls. Stages, each visible on the console:

1. plan the topology (:mod:`testbed.topos`) and build it in Mininet with one switch process per switch
   (:mod:`testbed.nodes`); hosts get static ARP entries;
2. program the switches with the controller library (:mod:`controller`, no shelling out): pipeline, routes with
   every equal-cost next hop, priority maps, thresholds, and per-link rate/delay/loss/queue depth in the traffic
   manager (the kernel here has no netem);
3. start background flows (iperf3 TCP, or UDP at a rate) between the ``b*`` hosts;
4. start one worker per ``h*`` host with torchrun's environment and wait, with a progress bar fed by rank 0;
5. read switch counters (drops and ECN marks per priority) and write ``results.json`` plus PNG plots.

Before anything is built, :func:`testbed.guard.claim` checks that no other run holds the switches' gRPC ports or
interface names (a run refuses to start rather than program another run's switch) and records this run, and every
process it starts, in the state directory, so ``dlcp-testbed clean`` can remove what a killed orchestrator left.

Teardown always runs (success, failure, Ctrl-C, SIGTERM): workers and iperf3 are killed, switch processes stopped,
Mininet's namespaces and interfaces removed, any of this run's ``<switch>-eth*`` interfaces still present deleted,
and the run's record dropped.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterator

from .netns import static_arp
from .spec import RunSpec, spec_to_json
from .steps import step_times
from .tails import quantile, tail_summary
from .topos import Plan, plan as make_plan

__all__ = ["run_spec", "Testbed", "RunError", "summarise", "leftovers"]

MASTER_PORT = 29500
#: P4Runtime port of a plan's first switch (the others follow it).
GRPC_BASE_PORT = 9559
#: How long a run waits for another live testbed run holding its switches' names and ports to finish.
CLAIM_WAIT_S = 900.0


class RunError(RuntimeError):
    """A run failed; the message says at which stage and why (worker logs are quoted)."""


def _ip_links() -> list[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line]


def leftovers(p: Plan) -> list[str]:
    """Interfaces of this plan's switches still present in the root namespace (should be none after teardown)."""
    prefixes = tuple(f"{s.name}-eth" for s in p.switches)
    return [n for n in _ip_links() if n.startswith(prefixes)]


def _sweep(p: Plan) -> None:
    for name in leftovers(p):
        subprocess.run(["ip", "link", "del", name], capture_output=True)


class Testbed:
    """A built, programmed network for one run. Use as a context manager; exit always tears down."""

    def __init__(self, spec: RunSpec, out_dir: Path, console=None, grpc_base_port: int = GRPC_BASE_PORT):
        self.spec = spec
        self.out_dir = out_dir
        self.plan = make_plan(spec.topology, grpc_base_port)
        self.record = None  # testbed.guard.RunRecord while this run holds its switches' names and ports
        self.net = None
        self.procs: list[subprocess.Popen] = []
        self.console = console
        self.network = None  # controller.Network once programmed
        self.background: list[tuple[int, subprocess.Popen, subprocess.Popen, list[Any]]] = []
        self.flapper = None  # testbed.flap.PathFlapper while a degraded path flaps

    def say(self, msg: str) -> None:
        if self.console is not None:
            self.console.print(msg)

    # -- build and teardown ---------------------------------------------------------------------------
    def __enter__(self) -> "Testbed":
        from mininet.net import Mininet
        from mininet.log import setLogLevel

        from .nodes import Bmv2Switch, DlcpHost, DlcpSwitch

        setLogLevel("warning")
        import logging

        logging.getLogger("finsy").setLevel(logging.ERROR)  # its gNMI/pipeline notices are not for this console
        from .guard import PortTaken, claim

        names = [(s.name, s.grpc_port) for s in self.plan.switches]
        try:
            try:
                self.record = claim(names, self.out_dir)
            except PortTaken as e:
                if not e.waitable:
                    raise
                # another testbed run holds the names: take turns with it rather than fail
                self.say(f"[bold]waiting[/]: {e}")
                self.record = claim(names, self.out_dir, wait_s=CLAIM_WAIT_S)
        except PortTaken as e:
            raise RunError(f"cannot start: {e}") from None
        cls = DlcpSwitch if self.spec.switch == "embedded" else Bmv2Switch
        topo = self.plan.topo(cls, {"log_dir": str(self.out_dir / "switches"),
                                    "priority_queues": self.spec.priority_queues},
                              mtu=self.spec.topology.mtu)
        self.say(f"[bold]network[/]: {self.plan.kind}, {len(self.plan.switches)} switch(es) ({self.spec.switch}), "
                 f"{len(self.plan.hosts)} hosts")
        try:
            self.net = Mininet(topo, host=DlcpHost, controller=None, autoSetMacs=False, autoStaticArp=False)
            for h in self.net.hosts:  # each host's namespace lives as long as its shell
                self.record.add_proc(h.pid, f"host {h.name} shell")
            self.net.start()
            for s in self.net.switches:
                if getattr(s, "proc", None) is not None:
                    self.record.add_proc(s.proc.pid, f"switch {s.name}")
            self._static_arp()
            self._configure_tcp()
            self.say("[bold]controller[/]: programming switches")
            from .netfile import program

            self.network = program(self.plan, self.spec, self.out_dir)
        except BaseException:
            self.close()
            raise
        return self

    def _static_arp(self) -> None:
        """Every host knows every other host's MAC (:func:`testbed.netns.static_arp`: the switches do not answer
        ARP). Not Mininet's ``staticArp``: it discards ``arp -s``'s failures, and the switch tests' namespaces,
        which are not Mininet hosts, need the same entries; one helper writes them all, and a failure is an error."""
        for h in self.net.hosts:
            for other in self.plan.hosts:
                if other.name != h.name:
                    _host_cmd(h, shlex.join(static_arp(other.ip, other.mac, h.defaultIntf().name)))

    def _configure_tcp(self) -> None:
        """The spec's ``tcp`` settings in every host's namespace: congestion control and ECN by sysctl (both are
        per network namespace), ``rto_min`` on every route. A congestion control this kernel lacks is an error
        naming what it has."""
        tcp = self.spec.tcp
        if tcp.congestion_control is not None:
            have = _available_congestion_control()
            if tcp.congestion_control not in have:
                raise RunError(f"tcp.congestion_control: this kernel has no {tcp.congestion_control!r} (available: "
                               f"{', '.join(have)}: net.ipv4.tcp_available_congestion_control limited to "
                               f"tcp_allowed_congestion_control)")
        for h in self.net.hosts:
            if tcp.congestion_control is not None:
                _host_cmd(h, f"sysctl -qw net.ipv4.tcp_congestion_control={tcp.congestion_control}")
            if tcp.ecn is not None:
                _host_cmd(h, f"sysctl -qw net.ipv4.tcp_ecn={1 if tcp.ecn else 0}")
            if tcp.rto_min_ms is not None:
                for route in h.cmd("ip -4 route show").splitlines():
                    if route.strip():
                        _host_cmd(h, f"ip route replace {route.strip()} rto_min {tcp.rto_min_ms}ms")

    def job_env(self) -> dict[str, str]:
        """Environment that marks the workers' TCP with ``job_dscp`` (the LD_PRELOAD shim, built on first use)."""
        if self.spec.job_dscp is None:
            return {}
        return {"LD_PRELOAD": str(dscp_preload(self.out_dir)), "DLCP_JOB_DSCP": str(self.spec.job_dscp)}

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.stop_flapping()
        self.stop_background()
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    p.kill()
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self.procs.clear()
        self.network = None  # the controller opens a session per operation: nothing to close
        if self.net is not None:
            try:
                self.net.stop()
            finally:
                self.net = None
        if self.record is not None:  # the names are ours: what is left of them is this run's
            _sweep(self.plan)
            self.record.release()
            self.record = None

    # -- traffic -------------------------------------------------------------------------------------
    def popen(self, host: str, cmd: list[str], env: dict[str, str] | None = None, **kw) -> subprocess.Popen:
        h = self.net.get(host)
        # Mininet runs it through `mnexec -d`, which calls setsid(): the process leads its own group, so the
        # teardown's killpg reaches it and its children. (start_new_session would make mnexec fork to setsid,
        # and the pid we hold would not be the worker's.)
        p = h.popen(cmd, env={**os.environ, **(env or {})}, **kw)
        self.procs.append(p)
        if self.record is not None:
            self.record.add_proc(p.pid, f"{cmd[0]} {' '.join(cmd[1:3])} in {host}")
        return p

    def start_flapping(self) -> None:
        """Start flapping the degraded path when the spec asks for it (``topology.degraded.flap_ms``)."""
        d = self.spec.topology.degraded
        if d is not None and d.flap_ms > 0 and self.network is not None:
            from .flap import PathFlapper

            self.flapper = PathFlapper(self.network, self.plan.links, d.flap_ms).start()
            self.say(f"[bold]path[/]: {d.spine} degraded and normal in turn every {d.flap_ms:g} ms")

    def stop_flapping(self) -> list[dict[str, Any]]:
        """Stop flapping; the changes made (empty when the path did not flap)."""
        if self.flapper is None:
            return []
        changes = self.flapper.stop()
        self.flapper = None
        return changes

    def start_background(self) -> None:
        """One iperf3 server (``-1 -J``: one test, a JSON report into ``background-<i>-server.json``) and client
        (its own JSON report into ``background-<i>.json``) per background entry, until :meth:`stop_background`;
        a bursty entry (``on_ms``/``off_ms``) runs :mod:`testbed.onoff`'s receiver and sender instead, whose
        receiver writes the same report."""
        for i, f in enumerate(self.spec.background):
            dst = self.plan.host(f.dst)
            port = 5201 + i
            if f.on_ms > 0:
                self._start_onoff(i, f, dst.ip, port)
                continue
            log = open(self.out_dir / f"background-{i}-server.json", "w")
            server = self.popen(f.dst, ["iperf3", "-s", "-1", "-J", "-p", str(port)], stdout=log,
                                stderr=subprocess.STDOUT)
            time.sleep(0.3)
            cmd = ["iperf3", "-c", dst.ip, "-p", str(port), "-t", "86400", "-P", str(f.flows), "-i", "0", "-J"]
            if f.kind == "udp":
                rate = f.rate or self.spec.topology.link.rate
                cmd += ["-u", "-b", str(int(rate)), "-l", "1400"]
            out = open(self.out_dir / f"background-{i}.json", "w")
            client = self.popen(f.src, cmd, stdout=out, stderr=subprocess.STDOUT)
            self.background.append((i, client, server, [out, log]))
            self.say(f"[bold]background[/]: {f.kind} x{f.flows} {f.src} -> {f.dst}")

    def _start_onoff(self, i: int, f, dst_ip: str, port: int) -> None:
        """A bursty background entry: :mod:`testbed.onoff` receiver in ``dst``, sender in ``src``."""
        udp = ["--udp"] if f.kind == "udp" else []
        log = open(self.out_dir / f"background-{i}.log", "w")
        server = self.popen(f.dst, [sys.executable, "-m", "testbed.onoff", "serve", "--port", str(port), "--out",
                                    str(self.out_dir / f"background-{i}-server.json"), *udp],
                            stdout=log, stderr=subprocess.STDOUT, cwd=str(_project_root()))
        time.sleep(0.5)
        rate = f.rate or self.spec.topology.link.rate
        client = self.popen(f.src, [sys.executable, "-m", "testbed.onoff", "send", "--host", dst_ip, "--port",
                                    str(port), "--flows", str(f.flows), "--on-ms", str(f.on_ms), "--off-ms",
                                    str(f.off_ms), *udp, *(["--rate", str(int(rate))] if udp else [])],
                            stdout=log, stderr=subprocess.STDOUT, cwd=str(_project_root()))
        self.background.append((i, client, server, [log]))
        self.say(f"[bold]background[/]: {f.kind} x{f.flows} {f.src} -> {f.dst}, bursts of {f.on_ms:g} ms every "
                 f"{f.on_ms + f.off_ms:g} ms")

    def stop_background(self) -> list[dict[str, Any]]:
        """Interrupt each iperf3 client, then its server (SIGINT: they end the test and print their JSON
        reports), and read the flow's goodput from the server's report: the bytes it received over the time the
        flow ran (the client's own figures do not include what the receiver got)."""
        out = []
        for i, client, server, files in self.background:
            for p in (client, server):  # the client ends the test; the server then reports what it received
                if p.poll() is None:
                    try:
                        os.killpg(p.pid, signal.SIGINT)
                    except ProcessLookupError:
                        pass
                    try:
                        p.wait(timeout=5)
                    except subprocess.TimeoutExpired:
                        pass
            for f in files:
                f.close()
            out.append({"flow": i, **background_goodput(self.out_dir / f"background-{i}-server.json")})
        self.background.clear()
        return out

    def run_acid(self, progress=None) -> dict[str, Any]:
        """A²CiD²: one ``python -m host.acid train`` rank per worker host with torchrun's environment (the library
        on a dlcp process group; pairing on its store in h1, exchanges over the DLCP transport through the
        switches). Returns rank 0's record of the run."""
        spec = self.spec
        record = self.out_dir / "acid.json"
        deadline = time.monotonic() + spec.timeout_s
        master = self.plan.host("h1").ip
        workers = []
        for r in range(spec.workers):
            host = f"h{r + 1}"
            env = {"MASTER_ADDR": master, "MASTER_PORT": str(MASTER_PORT), "RANK": str(r),
                   "WORLD_SIZE": str(spec.workers), "LOCAL_RANK": "0", "OMP_NUM_THREADS": "1",
                   "PYTHONUNBUFFERED": "1", "DLCP_ADDR": self.plan.host(host).ip,
                   "GLOO_SOCKET_IFNAME": self.net.get(host).defaultIntf().name}
            log = open(self.out_dir / f"worker-{r}.log", "w")
            cmd = [sys.executable, "-m", "host.acid", "train", "--data", "acid", "--budget", "total",
                   "--steps", str(spec.steps), "--lr", str(spec.lr), "--momentum", str(spec.momentum),
                   "--seed", str(spec.seed), "--rate", str(spec.rate_com),
                   "--step-seconds", str(spec.acid_step_seconds), "--log-interval", "0.25",
                   "--backend", "dlcp", "--exchange-backend", "same", "--progress", "--out", str(record)]
            workers.append((self.popen(host, cmd, env=env, stdout=subprocess.PIPE if r == 0 else log,
                                       stderr=log if r else subprocess.STDOUT, text=True,
                                       cwd=str(_project_root())), log))
        with open(self.out_dir / "worker-0.log", "a") as log0:
            for line in _lines_until(workers[0][0].stdout, deadline):  # the deadline holds while it prints nothing
                log0.write(line)
                if progress is not None and line.startswith("step "):
                    progress(min(spec.steps, int(line.split()[1].split("/")[0])))
        for r, (p, log) in enumerate(workers):
            try:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise RunError(f"A²CiD² worker {r} did not finish within timeout_s={spec.timeout_s:.0f} s; "
                               f"log: {self.out_dir / f'worker-{r}.log'}") from None
            log.close()
            if p.returncode != 0:
                tail = "\n".join((self.out_dir / f"worker-{r}.log").read_text(errors="replace").splitlines()[-15:])
                raise RunError(f"A²CiD² worker {r} (host h{r + 1}) failed with status {p.returncode}:\n{tail}")
        if not record.exists():
            raise RunError(f"A²CiD² rank 0 wrote no record; log: {self.out_dir / 'worker-0.log'}")
        if progress is not None:
            progress(spec.steps)
        return json.loads(record.read_text())

    def run_workers(self, progress=None) -> list[dict[str, Any]]:
        spec = self.spec
        spec_file = self.out_dir / "spec.json"
        spec_file.write_text(spec_to_json(spec))
        master = self.plan.host("h1").ip
        workers = []
        for r in range(spec.workers):
            host = f"h{r + 1}"
            env = {"MASTER_ADDR": master, "MASTER_PORT": str(MASTER_PORT), "RANK": str(r),
                   "WORLD_SIZE": str(spec.workers), "LOCAL_RANK": "0", "OMP_NUM_THREADS": "1",
                   "PYTHONUNBUFFERED": "1", "DLCP_ADDR": self.plan.host(host).ip,
                   # gloo picks its interface from the hostname, which resolves in the root namespace
                   "GLOO_SOCKET_IFNAME": self.net.get(host).defaultIntf().name, **self.job_env()}
            log = open(self.out_dir / f"worker-{r}.log", "w")
            stdout = subprocess.PIPE if r == 0 else log
            p = self.popen(host, [sys.executable, "-m", "testbed.worker", str(spec_file),
                                  str(self.out_dir / f"worker-{r}.json")], env=env, stdout=stdout,
                           stderr=log if r else subprocess.STDOUT, text=True, cwd=str(_project_root()))
            workers.append((p, log))
        deadline = time.monotonic() + spec.timeout_s
        rank0 = workers[0][0]
        with open(self.out_dir / "worker-0.log", "a") as log0:
            # A reader thread, so the deadline holds even when rank 0 prints nothing at all.
            for line in _lines_until(rank0.stdout, deadline):
                log0.write(line)
                if progress is not None and line.startswith("step "):
                    progress(int(line.split()[1].split("/")[0]))
        results = []
        for r, (p, log) in enumerate(workers):
            try:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise RunError(f"worker {r} did not finish within timeout_s={spec.timeout_s:.0f} s; "
                               f"log: {self.out_dir / f'worker-{r}.log'}") from None
            log.close()
            if p.returncode != 0:
                tail = "\n".join((self.out_dir / f"worker-{r}.log").read_text(errors="replace").splitlines()[-15:])
                raise RunError(f"worker {r} (host h{r + 1}) failed with status {p.returncode}:\n{tail}")
            results.append(json.loads((self.out_dir / f"worker-{r}.json").read_text()))
        return results

    def switch_stats(self) -> dict[str, Any]:
        from .netfile import switch_summary

        return switch_summary(self.network.stats()) if self.network is not None else {}


def _lines_until(stream, deadline: float) -> Iterator[str]:
    """Lines of ``stream`` until it ends or ``deadline`` (time.monotonic()) passes, whichever comes first; a
    daemon thread does the blocking reads."""
    import queue
    import threading

    q: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        try:
            for line in stream:
                q.put(line)
        except (OSError, ValueError):
            pass
        q.put(None)

    threading.Thread(target=pump, daemon=True, name="rank0-reader").start()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        try:
            line = q.get(timeout=min(left, 1.0))
        except queue.Empty:
            continue
        if line is None:
            return
        yield line


def _host_cmd(h, cmd: str) -> None:
    """Run ``cmd`` in host ``h``'s namespace; a failure is a RunError naming the host and command."""
    out = h.cmd(f"{cmd} 2>&1; echo rc=$?")
    if not out.rstrip().endswith("rc=0"):
        raise RunError(f"host {h.name}: `{cmd}` failed: {out.strip()}")


def _available_congestion_control() -> list[str]:
    """The congestion controls a host namespace may select: the kernel's available ones that the root
    namespace's ``tcp_allowed_congestion_control`` allows (a non-initial namespace can set no other)."""
    base = Path("/proc/sys/net/ipv4")
    allowed = set((base / "tcp_allowed_congestion_control").read_text().split())
    return [c for c in (base / "tcp_available_congestion_control").read_text().split() if c in allowed]


def dscp_preload(out_dir: Path) -> Path:
    """Build the LD_PRELOAD shim that marks a process's TCP sockets (``dscp_preload.c``) into ``out_dir``."""
    so = out_dir / "dscp_preload.so"
    if not so.exists():
        src = Path(__file__).with_name("dscp_preload.c")
        r = subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(so), str(src), "-ldl"], capture_output=True,
                           text=True)
        if r.returncode != 0:
            raise RunError(f"job_dscp: building the marking shim {src} failed:\n{r.stderr.strip()}")
    return so


def background_goodput(path: Path) -> dict[str, Any]:
    """Goodput of one background flow from its iperf3 server's JSON report: bits/s received (TCP
    ``sum_received``, UDP ``sum``) and the seconds it ran; ``error`` when there is no usable report."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        return {"goodput_bps": None, "error": f"{path.name}: no JSON report ({e})"}
    end = doc.get("end") or {}
    s = end.get("sum_received") or end.get("sum") or {}
    if not s or "bits_per_second" not in s:
        return {"goodput_bps": None, "error": doc.get("error", f"{path.name}: no summary")}
    return {"goodput_bps": float(s["bits_per_second"]), "seconds": float(s.get("seconds", 0.0))}


def _project_root() -> Path:
    return Path(__file__).resolve().parents[1]


def _percentile(values: list[float], q: float) -> float:
    """:func:`testbed.tails.quantile`, NaN for no values (a run without a measured step)."""
    v = quantile(values, q)
    return float("nan") if v is None else v


def acid_workers(record: dict[str, Any]) -> list[dict[str, Any]]:
    """A²CiD²'s record in the testbed's per-worker form. Asynchronous workers have no common step, so each worker's
    iterations are its steps spread evenly over its training time (its effective time per step, waiting for
    exchanges included, comparable with a synchronous iteration), and rank 0 carries the evaluations of the averaged model
    (the pairing service's consensus snapshots, on the whole training set of A²CiD²'s own problem) and the final
    accuracy of the globally averaged model."""
    evals = [{"step": s.get("steps", 0), "t": s["t"], "accuracy": s["acc"]} for s in record.get("series", [])
             if s.get("acc") is not None]
    final = (record.get("final") or {}).get("acc", 0.0)
    out = []
    for r, rep in sorted(record.get("reports", {}).items(), key=lambda kv: int(kv[0])):
        n = int(rep.get("steps") or 0)
        per = float(rep.get("train_seconds") or 0.0) / max(1, n)
        out.append({"rank": int(r), "iterations": [{"step": i, "start": i * per, "dt": per, "loss": None}
                                                   for i in range(n)],
                    "evals": evals if int(r) == 0 else [], "final_accuracy": final,
                    "transport": rep.get("transport", {}), "acid": rep})
    if not out:
        raise RunError(f"A²CiD² produced no worker reports (error: {record.get('error')})")
    return out


def _final_loss(iterations: list[dict[str, Any]]) -> float | None:
    """Rank 0's mean training loss over the last tenth of its steps (at least one): a figure of where training
    ended that moves with small changes, unlike a test accuracy that an evaluation rounds to whole samples."""
    losses = [float(i["loss"]) for i in iterations if i.get("loss") is not None]
    if not losses:
        return None
    tail = losses[-max(1, len(losses) // 10):]
    return sum(tail) / len(tail)


def summarise(spec: RunSpec, workers: list[dict[str, Any]], wall_s: float) -> dict[str, Any]:
    """The numbers the comparison table shows. Iteration time per step is the slowest rank's (a synchronous step
    is as slow as its slowest worker), leaving out the first ``steps.WARMUP_STEPS`` (connection set-up, first-touch
    allocations: they measure start-up, not the network); time to target is rank 0's first evaluation at or above
    the target, from the start of training. The tails (p90/p99 of the step times and of every collective call,
    the steps that waited on a retransmission timeout) are :func:`testbed.tails.tail_summary`'s."""
    steps = min(len(w["iterations"]) for w in workers)
    per_step = step_times(workers)
    r0 = workers[0]
    ttt = None
    if spec.target_accuracy is not None:
        for e in r0["evals"]:
            if e["accuracy"] >= spec.target_accuracy:
                ttt = e["t"]
                break
    # bounded loss, as the collectives report it (the union over ranks, the same on every rank: rank 0's figures);
    # DeAR's elements are its reduce-scatters', the hook's its all-reduces'
    its = r0["iterations"][:steps]
    zero_filled = sum(int(i.get("zero_filled", 0)) for i in its)
    elements = sum(int(i.get("elements", 0)) for i in its)
    worst = max((i.get("zero_filled", 0) / i["elements"] for i in its if i.get("elements")), default=0.0)
    retrans = sum(w.get("transport", {}).get("retransmissions", 0) or 0 for w in workers)
    # computation per step without communication (each worker timed its model alone before training), and what
    # the rest of a step costs next to it: (iteration p50 - compute) / compute
    computes = sorted(float(w["compute_s"]) for w in workers if w.get("compute_s"))
    compute = computes[len(computes) // 2] if computes else None
    iter_p50 = _percentile(per_step, 0.5)
    return {**tail_summary(workers, per_step), "algorithm": spec.algorithm, "steps": steps, "iter_p50_s": iter_p50, "compute_s": compute,
            "comm_compute_ratio": (iter_p50 - compute) / compute if compute and per_step else None,
            "iter_p99_s": _percentile(per_step, 0.99), "iter_mean_s": sum(per_step) / max(1, len(per_step)),
            "train_time_s": r0["iterations"][-1]["start"] + r0["iterations"][-1]["dt"] if steps else 0.0,
            "time_to_target_s": ttt, "target_accuracy": spec.target_accuracy,
            "final_accuracy": r0["final_accuracy"], "final_loss": _final_loss(its),
            # every rank's parameters equal bit for bit at the end (None: A²CiD², whose replicas differ by design)
            "replicas_identical": (all(w["replicas_identical"] for w in workers)
                                   if all("replicas_identical" in w for w in workers) else None),
            "wall_s": wall_s, "zero_filled_elements": zero_filled,
            "zero_filled_fraction": zero_filled / elements if elements else 0.0, "zero_filled_step_max": worst,
            "loss_bound": spec.loss_bound,
            "retransmissions": retrans,
            # workers' CPU seconds per second of training, summed over ranks (how many cores the job kept busy)
            "cpu_use": (sum(float(w["cpu_s"]) for w in workers) / max(1e-9, float(r0.get("wall_s") or 0.0))
                        if all("cpu_s" in w for w in workers) and r0.get("wall_s") else None),
            # a worker's CPU seconds per training step, the mean over ranks: the training loop's own
            # (loop_cpu_s: no set-up or tear-down), per its own steps. Not cpu_use over iteration time: runs stop
            # at the target, so their step counts and the share of evaluations in the wall time differ
            "cpu_per_iter_s": _cpu_per_iter(workers)}


def _cpu_per_iter(workers: list[dict[str, Any]]) -> float | None:
    """Mean over the workers of their training loop's CPU seconds per step (None without the figures)."""
    per = [float(w["loop_cpu_s"]) / len(w["iterations"]) for w in workers
           if w.get("loop_cpu_s") is not None and w.get("iterations")]
    return sum(per) / len(per) if per and len(per) == len(workers) else None


@contextmanager
def _signals_as_exceptions() -> Iterator[None]:
    """SIGTERM (and SIGHUP) raise SystemExit so the teardown in ``finally`` runs, as Ctrl-C does."""
    def handler(signum, frame):  # noqa: ARG001
        raise SystemExit(128 + signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def run_spec(spec: RunSpec, out_dir: str | Path | None = None, *, console=None, plots: bool = True,
             grpc_base_port: int = GRPC_BASE_PORT) -> Path:
    """Run ``spec``; returns the path of its results JSON (plots beside it)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    out = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix=f"dlcp-{spec.name}-"))
    out.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        raise RunError("the testbed creates network namespaces and needs root")
    t0 = time.monotonic()
    with _signals_as_exceptions(), Testbed(spec, out, console, grpc_base_port) as tb:
        tb.start_background()
        tb.start_flapping()
        with Progress(TextColumn(f"[bold]{spec.name}[/] ({spec.algorithm})"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=console, transient=False,
                      disable=console is None) as bar:
            task = bar.add_task("train", total=spec.steps)
            if spec.algorithm == "acid":
                acid = tb.run_acid(lambda step: bar.update(task, completed=step))
                workers = acid_workers(acid)
            else:
                workers = tb.run_workers(lambda step: bar.update(task, completed=step))
            done = min(len(w["iterations"]) for w in workers)
            if done < spec.steps:  # stopped at the target accuracy: the bar ends full at the step reached
                bar.update(task, total=max(1, done), completed=done)
        path_changes = tb.stop_flapping()
        switches = tb.switch_stats()
        background = tb.stop_background()
    summary = summarise(spec, workers, time.monotonic() - t0)
    summary["path_changes"] = len(path_changes)
    good = [b["goodput_bps"] for b in background if b.get("goodput_bps") is not None]
    summary["background_goodput_bps"] = sum(good) if background and len(good) == len(background) else None
    result = {"spec": asdict(spec), "summary": summary, "workers": workers, "switches": switches,
              "background": background, "path_changes": path_changes, "out_dir": str(out)}
    path = out / "results.json"
    path.write_text(json.dumps(result, indent=1, default=str))
    if plots:
        from .plots import plot_runs

        result["plots"] = [str(p) for p in plot_runs([result], out)]
        path.write_text(json.dumps(result, indent=1, default=str))
    return path

"""Test helpers for the switch daemon: start ``dlcp-switch`` as a real subprocess and wait until it is ready,
compile a program's P4Info, run finsy coroutines from synchronous tests, build raw P4Runtime stubs."""
from __future__ import annotations

import asyncio
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc

from testbed.netns import (add_namespace, add_veth, disable_ipv6, disable_offloads, in_namespace, run as run_command,
                           static_arp)

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = Path(__file__).parent / "programs"
ROUTER = PROGRAMS / "p4rt_router.p4"
CPU_PORT = 255


class Daemon:
    """A running ``dlcp-switch`` (``python -m switch.daemon``); ``addr`` is where it listens."""

    def __init__(self, *args: str, timeout: float = 30.0, env: dict | None = None):
        self.stderr_file = tempfile.NamedTemporaryFile(prefix="dlcp-switch-", suffix=".log", delete=False)
        cmd = [sys.executable, "-m", "switch.daemon", "--grpc-server-addr", "127.0.0.1:0", *args]
        e = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
        e.update(env or {})
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=self.stderr_file, text=True,
                                     env=e)
        self.stdout_tail = ""
        self.addr = self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> str:
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if sel.select(max(0.0, deadline - time.monotonic())):
                    line = self.proc.stdout.readline()
                    if not line:
                        break
                    if line.startswith("dlcp-switch: listening on "):
                        return line.split()[-1]
            self.proc.kill()
            self.proc.wait(10)
            raise RuntimeError(f"dlcp-switch did not become ready (exit {self.proc.returncode}):\n{self.log()}")
        finally:
            sel.close()

    def log(self) -> str:
        return Path(self.stderr_file.name).read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        """Signal the daemon and wait; returns its exit status (kills it and fails loudly on a hang)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                raise RuntimeError(f"dlcp-switch ignored signal {sig} for {timeout} s:\n{self.log()}")
        if not self.proc.stdout.closed:
            self.stdout_tail = self.proc.stdout.read()
            self.proc.stdout.close()
        return self.proc.returncode

    def close(self) -> None:
        try:
            self.stop()
        finally:
            os.unlink(self.stderr_file.name)

    def __enter__(self) -> "Daemon":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def p4info_file(program: Path, out_dir: Path) -> Path:
    """P4Info of ``program`` as ``python -m switch.compile`` writes it."""
    out = out_dir / (program.stem + ".p4info.txtpb")
    subprocess.run([sys.executable, "-m", "switch.compile", str(program), "--p4info", str(out)], cwd=ROOT,
                   check=True, capture_output=True)
    return out


def run(coro, timeout: float = 60.0):
    """Run a coroutine (finsy is asyncio) with a deadline, so a hang fails the test."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


def p4rt_stub(addr: str):
    """A raw P4Runtime stub (grpcio + finsy.proto) for checks finsy would do client-side."""
    from finsy.proto import p4r_grpc
    ch = grpc.insecure_channel(addr)
    return ch, p4r_grpc.P4RuntimeStub(ch)


# ---- network namespaces ------------------------------------------------------------------------------------------
ROUTER_MAC = "02:00:00:00:00:fe"
TOOL = Path(__file__).parent / "netns_tool.py"


sh = run_command  # the namespace harness's runner: a failed command raises naming it and its stderr


def wait_up(*ifnames: str, timeout: float = 10.0) -> None:
    """Wait until each interface (of this namespace) is operationally up.  Until the kernel's link watcher has
    seen the carrier (up to a second after ``ip link set up``), the device has no queueing discipline yet and
    silently drops every frame sent on it."""
    deadline = time.monotonic() + timeout
    for ifn in ifnames:
        state = Path(f"/sys/class/net/{ifn}/operstate")
        while state.read_text().strip() != "up":
            if time.monotonic() > deadline:
                raise RuntimeError(f"{ifn} did not come up in {timeout} s (operstate {state.read_text().strip()})")
            time.sleep(0.01)


class Net:
    """``n`` hosts, each a namespace with ``eth0`` (10.77.<i>.1/24, MAC 02:00:00:00:00:0<i>, default route via
    10.77.<i>.254 = the switch's MAC, static neighbour), joined by a veth pair to ``<prefix>p<i>`` in the root
    namespace, where the daemon attaches switch port i.  IPv6 off and offloads off everywhere (raw sockets then
    see whole frames with real checksums).  Names carry the pid (and ``tag``), so parallel runs do not collide;
    :meth:`close` deletes the namespaces (which deletes the veth pairs).

    ``kernel_router=True`` builds the baseline of the switch benchmarks instead: the ``p<i>`` ends go into a
    router namespace ``<prefix>r`` whose kernel forwards IPv4 between them (address 10.77.<i>.254 and the
    switch's MAC on each, static neighbours for the hosts): the same hosts, the same L3 forwarding, no daemon."""

    def __init__(self, n: int, *, tag: str = "", kernel_router: bool = False):
        self.prefix = f"dsw{os.getpid() % 100000}{tag}"
        self.hosts = list(range(1, n + 1))
        self.ns = {i: f"{self.prefix}h{i}" for i in self.hosts}
        self.ifs = {i: f"{self.prefix}p{i}" for i in self.hosts}
        self.router = f"{self.prefix}r" if kernel_router else None
        self.close()                                  # leftovers of a killed earlier run with this pid
        try:
            if self.router:
                add_namespace(self.router)
                disable_ipv6(self.router)
                sh(*in_namespace(self.router, "sysctl", "-qw", "net.ipv4.ip_forward=1"))
            for i in self.hosts:
                ns, ifn = self.ns[i], self.ifs[i]
                add_namespace(ns)
                disable_ipv6(ns)
                add_veth(ifn, "eth0", ns=self.router, peer_ns=ns)
                if self.router:
                    r = in_namespace(self.router)
                    disable_offloads(ifn, self.router)
                    sh(*r, "ip", "link", "set", ifn, "address", ROUTER_MAC)
                    sh(*r, "ip", "addr", "add", f"10.77.{i}.254/24", "dev", ifn)
                    sh(*r, "ip", "link", "set", ifn, "up")
                    sh(*r, *static_arp(self.ip(i), self.mac(i), ifn))
                else:
                    disable_ipv6(dev=ifn)
                    disable_offloads(ifn)
                    sh("ip", "link", "set", ifn, "up")
                x = in_namespace(ns)
                sh(*x, "ip", "link", "set", "eth0", "address", self.mac(i))
                disable_offloads("eth0", ns)
                sh(*x, "ip", "addr", "add", f"{self.ip(i)}/24", "dev", "eth0")
                sh(*x, "ip", "link", "set", "eth0", "up")
                sh(*x, "ip", "route", "add", "default", "via", f"10.77.{i}.254")
                sh(*x, *static_arp(f"10.77.{i}.254", ROUTER_MAC, "eth0"))
            if not self.router:
                wait_up(*self.ifs.values())
        except BaseException:
            self.close()
            raise

    @staticmethod
    def ip(i: int) -> str:
        return f"10.77.{i}.1"

    @staticmethod
    def mac(i: int) -> str:
        return f"02:00:00:00:00:{i:02x}"

    def port_args(self) -> list[str]:
        return [a for i in self.hosts for a in ("-i", f"{i}@{self.ifs[i]}")]

    def tool(self, i: int, *args: str, **kw) -> subprocess.Popen:
        """Start netns_tool.py in host i's namespace (stdout: its JSON result)."""
        return subprocess.Popen(in_namespace(self.ns[i], sys.executable, str(TOOL), *map(str, args)),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)

    def run_tool(self, i: int, *args: str, timeout: float = 60.0):
        import json
        p = self.tool(i, *args)
        out, err = p.communicate(timeout=timeout)
        if p.returncode != 0:
            raise RuntimeError(f"netns_tool {args} in h{i} failed: {err}")
        return json.loads(out)

    def leftovers(self) -> list[str]:
        """Our namespaces and interfaces that still exist."""
        names = sh("ip", "netns", "list", check=False).stdout.split()
        links = sh("ip", "-o", "link", "show", check=False).stdout
        return [n for n in names if n.startswith(self.prefix)] + \
            [i for i in self.ifs.values() if f" {i}@" in links or f" {i}:" in links]

    def close(self) -> None:
        for i in self.hosts:
            sh("ip", "netns", "del", self.ns[i], check=False)
            sh("ip", "link", "del", self.ifs[i], check=False)
        if self.router:
            sh("ip", "netns", "del", self.router, check=False)

    def __enter__(self) -> "Net":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def wait_ready(p: subprocess.Popen, timeout: float = 20.0) -> None:
    """Wait for a netns_tool receiver's "ready" line on stderr."""
    sel = selectors.DefaultSelector()
    sel.register(p.stderr, selectors.EVENT_READ)
    try:
        if not sel.select(timeout):
            raise RuntimeError("netns_tool receiver did not start")
        line = p.stderr.readline()
        if "ready" not in line:
            raise RuntimeError(f"netns_tool receiver: {line}{p.stderr.read()}")
    finally:
        sel.close()

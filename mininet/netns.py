"""Network namespaces joined by veth pairs and a Linux bridge, with tbf shaping, cleaned up whatever happens.

For tests and benchmarks that need real links without Mininet (``testbed.netns``)::

    with Star(4, rate="1gbit", mtu=9000) as net:
        p = net.popen(0, ["python", "worker.py"])      # runs inside host 0's namespace
        net.hosts[1].ip                                 # "10.213.7.2"

It is also the one set of namespace and veth primitives the other harnesses build on (``tests/switch/switchd.py``'s
hosts around a switch daemon, the controller tests' veth pairs): :func:`run`, :func:`add_namespace`,
:func:`add_veth`, :func:`in_namespace`, :func:`disable_offloads`, :func:`disable_ipv6`, :func:`static_arp` (also
the Mininet testbed's, ``testbed.run``).

Layout: every host is a namespace with ``eth0`` (its veth end, address ``<subnet>.<i+1>/24``) and ``lo`` up; the
switch is a namespace of its own holding the bridge ``br0`` and the other veth ends ``p<i>``, so the root namespace
is never touched. With ``rate`` set, both directions of every link are shaped by a tbf qdisc (host egress on
``eth0``, switch egress on ``p<i>``), i.e. each host has a full-duplex link of that rate to the switch.

Clean-up: deleting a namespace deletes the veth ends in it, so :meth:`Star.close` deletes the namespaces; it runs
on ``with`` exit, at interpreter exit (``atexit``) and on SIGTERM; namespaces left by a killed earlier run with the
same prefix are removed before creating new ones. Uses the iproute2 ``ip``/``tc`` commands (clear error messages,
the same commands an operator would type).
"""

from __future__ import annotations

import atexit
import os
import random
import signal
import subprocess
from dataclasses import dataclass
from typing import Sequence

__all__ = ["Star", "Host", "NetnsError", "run", "list_namespaces", "add_namespace", "add_veth", "in_namespace",
           "disable_offloads", "disable_ipv6", "static_arp"]


class NetnsError(RuntimeError):
    pass


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run one command; on failure raise NetnsError with the command and its stderr."""
    cp = subprocess.run(list(args), capture_output=True, text=True, timeout=30)
    if check and cp.returncode != 0:
        raise NetnsError(f"{' '.join(args)}: {cp.stderr.strip() or cp.stdout.strip()} (exit {cp.returncode})")
    return cp


def in_namespace(ns: str | None, *args: str) -> list[str]:
    """The argv that runs ``args`` in namespace ``ns`` (``None``: the root namespace)."""
    return ["ip", "netns", "exec", ns, *args] if ns else list(args)


def add_namespace(name: str) -> None:
    """Create namespace ``name`` with its ``lo`` up."""
    run("ip", "netns", "add", name)
    run("ip", "-n", name, "link", "set", "lo", "up")


def add_veth(end: str, peer: str, *, ns: str | None = None, peer_ns: str | None = None,
             mtu: int | None = None) -> None:
    """A veth pair: ``end`` in namespace ``ns`` and ``peer`` in ``peer_ns`` (``None``: the root namespace), both
    down, with ``mtu`` when given. Deleting either end, or the namespace holding it, deletes the pair."""
    def side(name: str, space: str | None) -> list[str]:
        return [name, *(["netns", space] if space else []), *(["mtu", str(mtu)] if mtu else [])]

    run("ip", "link", "add", *side(end, ns), "type", "veth", "peer", "name", *side(peer, peer_ns))


def disable_offloads(dev: str, ns: str | None = None) -> None:
    """Checksum, segmentation and receive offloads off on ``dev``: raw sockets then see whole frames with real
    checksums, as a wire would carry them."""
    run(*in_namespace(ns, "ethtool", "-K", dev, "tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off"))


def disable_ipv6(ns: str | None = None, dev: str | None = None) -> None:
    """IPv6 off for the whole namespace ``ns`` (with ``dev``: only on that interface), so the kernel sends no
    router solicitations or DAD probes into a test's traffic."""
    keys = [f"net.ipv6.conf.{dev}.disable_ipv6=1"] if dev else ["net.ipv6.conf.all.disable_ipv6=1",
                                                                "net.ipv6.conf.default.disable_ipv6=1"]
    run(*in_namespace(ns, "sysctl", "-qw", *keys))


def static_arp(ip: str, mac: str, dev: str) -> list[str]:
    """The command that pins ``ip`` to ``mac`` on ``dev``: a permanent neighbour (ARP) entry, never aged out or
    re-resolved; ``replace``, so running it twice is harmless.

    Neither the P4 switches (the embedded target, BMv2) nor the switch daemon answer ARP, and their L3 programs
    rewrite MACs per hop from their tables, so every host (and the kernel router of the switch benchmarks'
    baseline) is told its peers' MACs up front. The one place such an entry is written: run it in a named
    namespace with ``run(*in_namespace(ns, *static_arp(...)))``, in a Mininet host through its shell."""
    return ["ip", "neigh", "replace", ip, "lladdr", mac, "dev", dev, "nud", "permanent"]


def list_namespaces() -> list[str]:
    out = run("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


@dataclass(frozen=True)
class Host:
    index: int
    ns: str
    ip: str


_LIVE: set["Star"] = set()


def _cleanup_all(*_args) -> None:
    for net in list(_LIVE):
        net.close()


atexit.register(_cleanup_all)


class Star:
    """``n`` hosts on one bridge. ``rate`` (tc syntax, e.g. "1gbit") shapes every link; ``None`` leaves it open."""

    def __init__(self, n: int, *, rate: str | None = "1gbit", mtu: int = 1500, prefix: str | None = None,
                 subnet: str | None = None, tbf_burst: str = "256kb", tbf_latency: str = "20ms"):
        if os.geteuid() != 0:
            raise NetnsError("creating network namespaces needs root")
        if not 1 <= n <= 200:
            raise ValueError("1..200 hosts")
        self.n, self.rate, self.mtu = n, rate, mtu
        self.prefix = prefix or f"dlcp{os.getpid() % 100000}"
        self.subnet = subnet or f"10.213.{random.randrange(1, 255)}"
        self.sw = f"{self.prefix}sw"
        self.hosts = [Host(i, f"{self.prefix}h{i}", f"{self.subnet}.{i + 1}") for i in range(n)]
        self._closed = False
        self._remove_stale()
        _LIVE.add(self)
        if threading_main():
            self._prev_term = signal.signal(signal.SIGTERM, self._on_term)
        else:  # pragma: no cover
            self._prev_term = None
        try:
            self._build(tbf_burst, tbf_latency)
        except BaseException:
            self.close()
            raise

    def _on_term(self, signum, frame) -> None:  # pragma: no cover - exercised by a killed benchmark
        self.close()
        raise SystemExit(128 + signum)

    def _remove_stale(self) -> None:
        for ns in list_namespaces():
            if ns == self.sw or (ns.startswith(self.prefix + "h") and ns[len(self.prefix) + 1:].isdigit()):
                run("ip", "netns", "del", ns, check=False)

    def _build(self, burst: str, latency: str) -> None:
        add_namespace(self.sw)
        run("ip", "-n", self.sw, "link", "add", "br0", "type", "bridge", "stp_state", "0")
        run("ip", "-n", self.sw, "link", "set", "br0", "mtu", str(self.mtu), "up")
        for h in self.hosts:
            add_namespace(h.ns)
            add_veth("eth0", f"p{h.index}", ns=h.ns, peer_ns=self.sw, mtu=self.mtu)
            run("ip", "-n", self.sw, "link", "set", f"p{h.index}", "master", "br0", "up")
            run("ip", "-n", h.ns, "addr", "add", f"{h.ip}/24", "dev", "eth0")
            run("ip", "-n", h.ns, "link", "set", "eth0", "up")
            if self.rate:
                for ns, dev in ((h.ns, "eth0"), (self.sw, f"p{h.index}")):
                    run(*in_namespace(ns, "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", self.rate,
                                      "burst", burst, "latency", latency))

    def cmd(self, i: int, args: Sequence[str]) -> list[str]:
        """The argv that runs ``args`` inside host ``i``'s namespace."""
        return in_namespace(self.hosts[i].ns, *args)

    def popen(self, i: int, args: Sequence[str], **kw) -> subprocess.Popen:
        return subprocess.Popen(self.cmd(i, args), **kw)

    def qdisc_stats(self, i: int) -> str:
        """``tc -s qdisc`` of host i's link (both ends): drops and overlimits of the shapers."""
        a = run(*in_namespace(self.hosts[i].ns, "tc", "-s", "qdisc", "show", "dev", "eth0")).stdout
        b = run(*in_namespace(self.sw, "tc", "-s", "qdisc", "show", "dev", f"p{i}")).stdout
        return a + b

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for ns in [h.ns for h in self.hosts] + [self.sw]:
            run("ip", "netns", "del", ns, check=False)
        _LIVE.discard(self)
        if self._prev_term is not None and threading_main():
            signal.signal(signal.SIGTERM, self._prev_term)

    def __enter__(self) -> "Star":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def threading_main() -> bool:
    import threading
    return threading.current_thread() is threading.main_thread()

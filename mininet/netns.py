"""Network namespaces joined by veth pairs and a Linux bridge, with tbf shaping, cleaned up whatever happens.

For tests and benchmarks that need real links without Mininet (``testbed.netns``)::

    with Star(4, rate="1gbit", mtu=9000) as net:
        p = net.popen(0, ["python", "worker.py"])      # runs inside host 0's namespace
        net.hosts[1].ip                                 # "10.213.7.2"

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

__all__ = ["Star", "Host", "NetnsError", "run", "list_namespaces"]


class NetnsError(RuntimeError):
    pass


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run one command; on failure raise NetnsError with the command and its stderr."""
    cp = subprocess.run(list(args), capture_output=True, text=True, timeout=30)
    if check and cp.returncode != 0:
        raise NetnsError(f"{' '.join(args)}: {cp.stderr.strip() or cp.stdout.strip()} (exit {cp.returncode})")
    return cp


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
        run("ip", "netns", "add", self.sw)
        run("ip", "-n", self.sw, "link", "add", "br0", "type", "bridge", "stp_state", "0")
        run("ip", "-n", self.sw, "link", "set", "br0", "mtu", str(self.mtu), "up")
        run("ip", "-n", self.sw, "link", "set", "lo", "up")
        for h in self.hosts:
            run("ip", "netns", "add", h.ns)
            run("ip", "link", "add", "eth0", "netns", h.ns, "mtu", str(self.mtu), "type", "veth", "peer", "name",
                f"p{h.index}", "netns", self.sw, "mtu", str(self.mtu))
            run("ip", "-n", self.sw, "link", "set", f"p{h.index}", "master", "br0", "up")
            run("ip", "-n", h.ns, "addr", "add", f"{h.ip}/24", "dev", "eth0")
            run("ip", "-n", h.ns, "link", "set", "eth0", "up")
            run("ip", "-n", h.ns, "link", "set", "lo", "up")
            if self.rate:
                for ns, dev in ((h.ns, "eth0"), (self.sw, f"p{h.index}")):
                    run("ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate",
                        self.rate, "burst", burst, "latency", latency)

    def cmd(self, i: int, args: Sequence[str]) -> list[str]:
        """The argv that runs ``args`` inside host ``i``'s namespace."""
        return ["ip", "netns", "exec", self.hosts[i].ns, *args]

    def popen(self, i: int, args: Sequence[str], **kw) -> subprocess.Popen:
        return subprocess.Popen(self.cmd(i, args), **kw)

    def qdisc_stats(self, i: int) -> str:
        """``tc -s qdisc`` of host i's link (both ends): drops and overlimits of the shapers."""
        a = run("ip", "netns", "exec", self.hosts[i].ns, "tc", "-s", "qdisc", "show", "dev", "eth0").stdout
        b = run("ip", "netns", "exec", self.sw, "tc", "-s", "qdisc", "show", "dev", f"p{i}").stdout
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

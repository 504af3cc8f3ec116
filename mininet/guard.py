"""Who owns the testbed's shared names, and cleaning up after runs that died.

Testbed runs share the root namespace: switch interfaces are named ``<switch>-eth<N>`` (``s1-eth1``,
``leaf1-eth3``) and every switch's P4Runtime server listens on a fixed port (9559 + its index). Two runs on one
machine would therefore collide: the second run's start deleted the first run's interfaces as "leftovers", and
its wait for a switch's gRPC port accepted the first run's daemon already listening there, so its controller
reprogrammed the *other* run's switch (which then stopped forwarding that run's traffic). This module prevents
both and makes clean-up after a killed orchestrator possible:

* :func:`claim` (called by :class:`testbed.run.Testbed` before it builds anything): under a lock, removes what
  dead runs left (as :func:`clean`), then refuses with :class:`PortTaken` when a planned switch's gRPC port has a
  listener or one of its interfaces exists, naming the port or interface and, when known, the live run holding
  it. Otherwise it records the run in the state directory.
* :class:`RunRecord`: one JSON file per live run (``<state dir>/run-<pid>.json``): the orchestrator's pid, the
  switches' interface prefixes and gRPC ports, and every process the run started (switch daemons, Mininet host
  shells, workers, iperf3) with its kernel start time, so a recycled pid is never mistaken for the run's.
* :func:`clean` (``dlcp-testbed clean``): for every record whose orchestrator is dead, kills its processes (process
  groups, by recorded pid and start time), deletes its interfaces and named namespaces, and drops the record;
  then removes switch interfaces (of the names testbed topologies use) and ``testbed.netns`` namespaces that no
  live run holds. Live runs are never touched.

The state directory is ``/run/dlcp-testbed`` (``DLCP_TESTBED_STATE`` overrides it).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import signal
import socket
import subprocess
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

__all__ = ["PortTaken", "RunRecord", "claim", "clean", "state_dir", "live_records", "port_listening",
           "SWITCH_NAMES"]

#: Switch names the testbed's topologies use (their interfaces are ``<name>-eth<N>``).
SWITCH_NAMES = ("s1", "s2", "leaf1", "leaf2", "spine1", "spine2")


class PortTaken(RuntimeError):
    """A planned switch's gRPC port or interface is in use; the message names it and who holds it.
    ``waitable``: held by another live testbed run (it will end), not by something unknown."""

    def __init__(self, message: str, waitable: bool = False):
        super().__init__(message)
        self.waitable = waitable


def state_dir() -> Path:
    return Path(os.environ.get("DLCP_TESTBED_STATE", "/run/dlcp-testbed"))


def proc_start(pid: int) -> int | None:
    """The kernel start time of ``pid`` (clock ticks since boot), or None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: fields after the last ')' are fixed
    return int(stat[stat.rindex(")") + 2:].split()[19])


def alive(pid: int, start: int | None) -> bool:
    """True when ``pid`` runs and is the process recorded with ``start`` (not a recycled pid)."""
    now = proc_start(pid)
    if now is None:
        return False
    try:  # a zombie has a stat line but is gone for our purposes
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False
    except OSError:
        return False
    return start is None or now == start


@dataclass
class RunRecord:
    """What one live run holds; saved as JSON in the state directory."""

    pid: int
    start: int | None
    out_dir: str
    interfaces: list[str]                      # interface name prefixes: "leaf1-eth"
    grpc_ports: list[int]
    namespaces: list[str] = field(default_factory=list)   # named network namespaces (ip netns)
    procs: list[list] = field(default_factory=list)       # [pid, start time, what]
    started: str = ""
    path: str = ""

    def save(self) -> None:
        p = Path(self.path)
        tmp = p.with_suffix(".tmp")
        tmp.write_text(json.dumps({k: v for k, v in asdict(self).items() if k != "path"}))
        tmp.replace(p)

    def add_proc(self, pid: int, what: str) -> None:
        """Record a process the run started (a process group leader: clean-up kills its group)."""
        self.procs.append([pid, proc_start(pid), what])
        self.save()

    def release(self) -> None:
        """The run tore down: forget it."""
        try:
            Path(self.path).unlink()
        except FileNotFoundError:
            pass

    def is_live(self) -> bool:
        return alive(self.pid, self.start)

    @classmethod
    def load(cls, path: Path) -> "RunRecord | None":
        try:
            d = json.loads(path.read_text())
            return cls(**d, path=str(path))
        except (OSError, ValueError, TypeError):
            return None


def _records(base: Path) -> list[RunRecord]:
    return [r for r in (RunRecord.load(p) for p in sorted(base.glob("run-*.json"))) if r is not None]


def live_records(base: Path | None = None) -> list[RunRecord]:
    return [r for r in _records(base or state_dir()) if r.is_live()]


@contextmanager
def _locked(base: Path) -> Iterator[None]:
    base.mkdir(parents=True, exist_ok=True)
    with open(base / "lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def port_listening(port: int, host: str = "127.0.0.1") -> bool:
    """True when something listens on ``host:port`` (TCP): a bind with SO_REUSEADDR fails only then (connections
    in TIME_WAIT do not count)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
    except OSError as e:
        return e.errno == errno.EADDRINUSE
    finally:
        s.close()
    return False


def links() -> list[str]:
    """Interface names in this (the root) namespace."""
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line]


def _namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _holder(records: list[RunRecord], *, port: int | None = None, intf: str | None = None) -> str:
    for r in records:
        if (port is not None and port in r.grpc_ports) or (intf is not None
                                                           and intf.startswith(tuple(r.interfaces))):
            return f"held by the testbed run with pid {r.pid} (results in {r.out_dir}), still running"
    return ""


def claim(switches: list[tuple[str, int]], out_dir: Path, base: Path | None = None, *,
          wait_s: float = 0.0) -> RunRecord:
    """Check that every switch ``(name, grpc_port)`` is free and record this process's run holding them.

    Leftovers of dead runs are cleaned first. When another live testbed run holds a name or port, wait up to
    ``wait_s`` seconds for it to finish (runs of a sweep and a test suite then take turns instead of failing);
    a conflict with anything else is not waited for. Raises :class:`PortTaken` naming the first conflict."""
    base = base or state_dir()
    deadline = time.monotonic() + wait_s
    while True:
        with _locked(base):
            _clean_locked(base, strays=False)
            problem, waitable = _conflict(switches, base)
            if problem is None:
                rec = RunRecord(os.getpid(), proc_start(os.getpid()), str(out_dir),
                                [f"{n}-eth" for n, _ in switches], [p for _, p in switches],
                                started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                path=str(base / f"run-{os.getpid()}.json"))
                rec.save()
                return rec
        if not waitable or time.monotonic() >= deadline:
            raise PortTaken(problem + (f" (waited {wait_s:.0f} s for it)" if waitable and wait_s else ""), waitable)
        time.sleep(1.0)


def _conflict(switches: list[tuple[str, int]], base: Path) -> tuple[str | None, bool]:
    """The first reason the switches' names or ports are not free (None if they are), and whether it is a live
    testbed run's (which will end) rather than something unknown."""
    live = [r for r in live_records(base) if r.pid != os.getpid()]  # this process's record is replaced on claim
    present = links()
    for name, port in switches:
        # a live run that claimed these names may not have built its network yet: its record is enough
        held = _holder(live, port=port) or _holder(live, intf=f"{name}-eth")
        if held:
            return (f"switch {name}: its P4Runtime port 127.0.0.1:{port} or interfaces {name}-eth* are {held}",
                    True)
        if port_listening(port):
            return (f"switch {name}: its P4Runtime port 127.0.0.1:{port} is taken by a process that is not a "
                    f"recorded testbed run (see `ss -ltnp 'sport = :{port}'`); this run would program that "
                    f"process's switch instead of its own. Stop it, or `dlcp-testbed clean` if it is left over from "
                    f"a run that died", False)
        for intf in present:
            if intf.startswith(f"{name}-eth"):
                return (f"switch {name}: its data port interface {intf} already exists, left by an earlier run "
                        f"that did not record it; `dlcp-testbed clean` removes it", False)
    return None, False


def _kill_group(pid: int, start: int | None) -> bool:
    if not alive(pid, start):
        return False
    for sig in (signal.SIGKILL,):
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                return False
    return True


def _clean_locked(base: Path, strays: bool) -> list[str]:
    done: list[str] = []
    live = []
    for rec in _records(base):
        if rec.is_live():
            live.append(rec)
            continue
        for pid, start, what in rec.procs:
            if _kill_group(int(pid), start):
                done.append(f"killed {what} (pid {pid}) of dead run {rec.pid}")
        for intf in links():
            if intf.startswith(tuple(rec.interfaces)):
                subprocess.run(["ip", "link", "del", intf], capture_output=True)
                done.append(f"deleted interface {intf} of dead run {rec.pid}")
        have = set(_namespaces())
        for ns in rec.namespaces:
            if ns in have:
                subprocess.run(["ip", "netns", "del", ns], capture_output=True)
                done.append(f"deleted namespace {ns} of dead run {rec.pid}")
        rec.release()
    if strays:
        held = tuple(p for r in live for p in r.interfaces)
        names = tuple(f"{n}-eth" for n in SWITCH_NAMES)
        for intf in links():
            if re.fullmatch(r"[a-z]+\d+-eth\d+", intf) and intf.startswith(names) and not (held and
                                                                                           intf.startswith(held)):
                subprocess.run(["ip", "link", "del", intf], capture_output=True)
                done.append(f"deleted interface {intf} (no live run holds it)")
        held_ns = {ns for r in live for ns in r.namespaces}
        for ns in _namespaces():
            m = re.fullmatch(r"dlcp(\d+)(sw|h\d+)", ns)  # testbed.netns.Star: dlcp<pid>sw, dlcp<pid>h<i>
            if m and ns not in held_ns and not _pid_exists(int(m.group(1))):
                subprocess.run(["ip", "netns", "del", ns], capture_output=True)
                done.append(f"deleted namespace {ns} (its creator, pid {m.group(1)}, is gone)")
    return done


def _pid_exists(pid: int) -> bool:
    # netns.Star names its namespaces after pid % 100000: any live pid with that remainder may own them
    if pid < 100000:
        return any(proc_start(p) is not None for p in range(pid, 1 << 22, 100000))
    return proc_start(pid) is not None


def clean(base: Path | None = None, *, strays: bool = True) -> list[str]:
    """Remove what dead runs left (see the module docstring); returns one line per thing removed."""
    base = base or state_dir()
    with _locked(base):
        return _clean_locked(base, strays)

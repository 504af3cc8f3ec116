"""``dlcpctl run``: a long-running controller that keeps every switch matching the network file.

One supervisor task per switch holds one P4Runtime session (a ``finsy.Switch`` used as a context manager, with
finsy's ready handler) and reconciles (:meth:`controller.api.Network.reconcile`: pipeline, tables and
registers in dependency order, traffic manager):

* on every (re)connect, and whenever finsy reports the session ready again as primary (after another writer,
  e.g. an imperative ``dlcpctl set``, held the primary role for a moment: its change is undone then);
* when the file changes (polled every ``poll_interval`` seconds; an invalid file is reported and the last valid
  one stays in force);
* every ``drift_interval`` seconds it reads the switch, reports any drift (what ``dlcpctl diff`` prints) and
  corrects it.

A dropped session is re-opened at once and then every ``retry`` seconds, so a restarted switch is programmed as
soon as it accepts connections. finsy's own ``Controller``/``Switch.run`` loop reconnects with gRPC's backoff
(up to 15 s) and waits 10 s after a session that failed within 2 s, too slow for that; this module keeps
finsy's session, events and ready handler and does the retrying itself. Errors are reported once per change of
message (no flood while a switch is down); SIGINT/SIGTERM (:meth:`Runner.stop`) close every session.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import finsy as fy

from .api import Network, SwitchApplyResult
from .client import SwitchClient, writer_election_id
from .errors import ControllerError, SwitchUnreachable
from .netfile import NetFileError

__all__ = ["RunOptions", "Runner", "drift_lines"]


@dataclass(frozen=True)
class RunOptions:
    drift_interval: float = 10.0  # seconds between drift checks of a switch (0: never)
    poll_interval: float = 0.5    # seconds between checks of the network file
    retry: float = 0.1            # seconds between reconnection attempts
    tm: bool = True               # reconcile traffic-manager settings too


def drift_lines(result: SwitchApplyResult) -> list[str]:
    """How one switch differs from the file, one line per difference: ``pipeline`` when it runs another program,
    ``+``/``~``/``-`` entries (missing, different, not in the file), ``tm`` settings to restore. A traffic
    manager that cannot be read back (BMv2) shows no drift: ``apply`` re-sends its settings every time."""
    line = result.pipeline_line()
    out = [line] if line is not None else []
    tm_lines = [f"tm {change}" for change in result.tm_changes] if result.tm_readable else []
    return out + list(result.updates) + tm_lines + list(result.host_macs)


def _summary(result: SwitchApplyResult) -> str:
    if not result.writes and not result.tm_changes and not result.pipeline_pushed and not result.host_macs:
        return "in sync"
    parts = ["pipeline pushed"] if result.pipeline_pushed else []
    if result.pipeline_clears:
        parts[0] += " (" + result.pipeline_line().partition("; replacing it ")[2] + ")"
    parts.append(f"{result.inserts} inserts, {result.modifies} modifies, {result.deletes} deletes")
    if result.tm_changes:
        parts.append(f"{len(result.tm_changes)} traffic-manager changes")
    parts += result.host_macs
    return "applied: " + ", ".join(parts)


def _file_signature(path: Path) -> bytes | None:
    try:
        return hashlib.sha256(path.read_bytes()).digest()
    except OSError:
        return None


class Runner:
    """Keeps the switches of one network file (all, or ``switches``) matching it until :meth:`stop`."""

    def __init__(self, path: str | Path, switches: list[str] | None = None, options: RunOptions = RunOptions(),
                 report: Callable[[str], None] = print):
        self.path = Path(path)
        self.only = list(switches) if switches else None
        self.options = options
        self._report = report
        self.net: Network | None = None
        self._signature: bytes | None = None
        self._supervisors: dict[str, asyncio.Task] = {}
        self._wake: dict[str, asyncio.Event] = {}
        self._stop = asyncio.Event()

    def report(self, msg: str) -> None:
        self._report(f"{time.strftime('%H:%M:%S')} {msg}")

    def stop(self) -> None:
        self._stop.set()

    # -- the network file --------------------------------------------------------------------------------------
    def _load(self) -> Network:
        """Load and compile (blocking: run in a thread); NetFileError / ControllerError on a bad file."""
        net = Network.from_file(self.path)
        sel = net.select(self.only)  # the same validation as every command
        for s in sel:
            net.check_program(net.program(s))
        return net

    def _selected(self, net: Network) -> list[str]:
        return [s for s in net.switches if self.only is None or s in self.only]

    async def _reload(self) -> None:
        sig = _file_signature(self.path)
        if sig is None or sig == self._signature:
            return
        self._signature = sig
        try:
            net = await asyncio.to_thread(self._load)
        except NetFileError as e:
            self.report(f"invalid network file, keeping the previous one: {e}")
            return
        except ControllerError as e:
            self.report(f"network file not applied, keeping the previous one: {e}")
            return
        old = self.net
        self.net = net
        self.report(f"network file {self.path} changed: reconciling")
        for s in list(self._supervisors):
            if s not in self._selected(net) or old is None or \
                    old.spec.switches[s] != net.spec.switches[s] or old.spec.connect_timeout != net.spec.connect_timeout:
                self._supervisors.pop(s).cancel()  # gone, or a new address/target/TLS: a new session
        for s in self._selected(net):
            if s in self._supervisors:
                self._wake[s].set()
            else:
                self._start(s)

    # -- supervisors -------------------------------------------------------------------------------------------
    def _start(self, switch: str) -> None:
        self._wake[switch] = asyncio.Event()
        self._supervisors[switch] = asyncio.create_task(self._supervise(switch), name=f"dlcpctl-run-{switch}")

    async def _reconcile(self, client: SwitchClient, net: Network, why: str) -> bool:
        """Apply; report. False when the session is gone (reconnect), True otherwise (errors are reported and
        retried at the next trigger, not in a loop)."""
        try:
            result = await net.reconcile(client, tm=self.options.tm)
        except SwitchUnreachable as e:
            self.report(f"{client.spec.name}: {e}")
            return False
        except ControllerError as e:
            self.report(f"{client.spec.name}: apply ({why}) failed: {e}")
            return True
        self.report(f"{client.spec.name}: {_summary(result)} ({why})")
        return True

    async def _check_drift(self, client: SwitchClient, net: Network) -> bool:
        try:
            result = await net.reconcile(client, dry_run=True, tm=self.options.tm)
        except SwitchUnreachable as e:
            self.report(f"{client.spec.name}: {e}")
            return False
        except ControllerError as e:
            self.report(f"{client.spec.name}: drift check failed: {e}")
            return True
        lines = drift_lines(result)
        if not lines:
            return True
        self.report(f"{client.spec.name}: drift from the network file ({len(lines)} differences):")
        for line in lines:
            self._report(f"  {client.spec.name}: {line}")
        return await self._reconcile(client, net, "drift")

    async def _supervise(self, switch: str) -> None:
        last_error = None
        wake = self._wake[switch]
        while True:
            net = self.net
            assert net is not None
            spec = net.spec.switches[switch]
            down = asyncio.Event()
            ready = asyncio.Event()

            async def on_ready(sw: fy.Switch) -> None:  # finsy: the session is (again) ready
                if sw.is_primary:  # as backup (another writer took over for a moment) there is nothing to do
                    ready.set()

            try:
                async with SwitchClient(spec, p4info=net.program(switch).p4info, election_id=writer_election_id(),
                                        timeout=net.spec.connect_timeout, ready_handler=on_ready) as client:
                    client.sw.ee.on(fy.SwitchEvent.CHANNEL_DOWN, lambda *_: down.set())
                    last_error = None
                    self.report(f"{switch}: connected to {spec.address}")
                    wake.clear()
                    ok = await self._reconcile(client, net, "connected")
                    ready.clear()
                    next_check = time.monotonic() + self.options.drift_interval
                    while ok and not down.is_set():
                        timeout = next_check - time.monotonic() if self.options.drift_interval > 0 else None
                        await _wait_any((down, ready, wake), timeout)
                        if down.is_set():
                            break
                        if wake.is_set():
                            wake.clear()
                            net = self.net
                            ok = await self._reconcile(client, net, "file changed")
                        if ready.is_set():
                            ready.clear()
                            ok = ok and await self._reconcile(client, net, "session ready again")
                        if self.options.drift_interval > 0 and time.monotonic() >= next_check:
                            if client.is_primary:  # a backup leaves the switch to the primary controller
                                ok = ok and await self._check_drift(client, net)
                            next_check = time.monotonic() + self.options.drift_interval
                    self.report(f"{switch}: session to {spec.address} lost; reconnecting")
            except ControllerError as e:
                if str(e) != last_error:
                    self.report(f"{switch}: {e}; retrying every {self.options.retry:g} s")
                    last_error = str(e)
            await asyncio.sleep(self.options.retry)

    # -- main loop ---------------------------------------------------------------------------------------------
    async def run(self) -> None:
        """Run until :meth:`stop`. The file must be valid at start (NetFileError / ControllerError otherwise)."""
        self._signature = _file_signature(self.path)
        self.net = await asyncio.to_thread(self._load)
        for s in self._selected(self.net):
            self._start(s)
        self.report(f"running: {len(self._supervisors)} switches from {self.path}")
        try:
            while not self._stop.is_set():
                try:
                    await asyncio.wait_for(self._stop.wait(), self.options.poll_interval)
                except asyncio.TimeoutError:
                    await self._reload()
        finally:
            tasks = list(self._supervisors.values())
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.report("stopped")


async def _wait_any(events: tuple[asyncio.Event, ...], timeout: float | None) -> None:
    """Return when one of ``events`` is set or after ``timeout`` seconds."""
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, timeout=None if timeout is None else max(timeout, 0),
                           return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()

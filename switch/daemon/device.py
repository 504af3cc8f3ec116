"""The running device of the switch daemon: the current pipeline (a compiled
:class:`switch.target.Switch` plus what P4Runtime pushed), the traffic-manager settings and the counters.

Why a separate holder: three parties touch the switch at once -- the packet thread (every frame), the
P4Runtime servicer (pipeline, table entries, externs) and the management service (queues, links, stats).  They
share one lock, :attr:`Device.lock`, held for a batch of packets or one RPC.  Traffic-manager settings live here,
not in the switch, so a pipeline change (which builds a new ``Switch``) keeps the queue depths, rates and link
emulation the operator set; counters are folded into running totals so statistics cover the daemon's lifetime.
"""
from __future__ import annotations

import gc
import logging
import tempfile
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..errors import Loc, P4Error, SwitchError
from ..target import Switch

log = logging.getLogger("dlcp.switch")

PROJECT_ROOT = Path(__file__).resolve().parents[2]
#: Searched after the daemon's ``-I`` directories: ``#include "include/dlcp_headers.p4"`` in a pushed program
#: resolves against the project's ``p4src/`` (when the daemon runs from a source checkout).
DEFAULT_INCLUDE_DIRS = [d for d in (PROJECT_ROOT / "p4src",) if d.is_dir()]


# ---- statistics (the management service returns these; switch.daemon.mgmt re-exports them) -------------------------
@dataclass
class QueueStats:
    depth: int = 0
    peak_depth: int = 0
    capacity: int = 0
    rate_pps: float = 0.0
    enq_packets: int = 0
    deq_packets: int = 0


@dataclass
class PortStats:
    rx_packets: int = 0
    tx_packets: int = 0
    queues: dict[int, QueueStats] = field(default_factory=dict)
    rate_bps: float | None = None        # link emulation set through the management service; None = never set
    delay_us: int | None = None
    loss: float | None = None
    last_src_mac: str | None = None      # source MAC of the last frame received ("aa:bb:..."); None = none yet


@dataclass
class SwitchStats:
    ports: dict[int, PortStats] = field(default_factory=dict)
    drops: dict[tuple[int, int, str], int] = field(default_factory=dict)
    writes: int = 0
    write_updates: int = 0
    packet_errors: int = 0


@dataclass(frozen=True)
class CrcCalculation:
    """One crc16_custom / crc32_custom calculation of the running program and its current parameters."""

    name: str
    width: int
    location: str
    polynomial: int
    initial_remainder: int
    final_xor_value: int
    reflect_data: bool
    reflect_remainder: bool


# ---- traffic-manager settings ----------------------------------------------------------------------------------
@dataclass
class TmSettings:
    """What the operator configured; applied to every new pipeline's traffic manager."""

    priority_queues: int = 8
    queue_depth: int = 64                 # default capacity of every queue (packets)
    queue_rate_pps: float = 0.0           # default rate of every queue (0 = unlimited)
    queues: dict[tuple[int, int], dict[str, float]] = field(default_factory=dict)   # (port, prio) -> overrides
    links: dict[int, dict[str, float]] = field(default_factory=dict)                 # port -> rate/delay/loss

    def capacity(self, port: int, prio: int) -> int:
        return int(self.queues.get((port, prio), {}).get("depth", self.queue_depth))

    def rate(self, port: int, prio: int) -> float:
        return float(self.queues.get((port, prio), {}).get("rate_pps", self.queue_rate_pps))

    def apply(self, sw: Switch) -> None:
        tm = sw.tm
        tm.default_capacity = self.queue_depth
        tm.default_rate_pps = self.queue_rate_pps
        for (port, prio), o in self.queues.items():
            if "depth" in o:
                tm.set_queue_depth(int(o["depth"]), port, prio)
            if "rate_pps" in o:
                tm.set_queue_rate(o["rate_pps"], port, prio)
        for port, o in self.links.items():
            tm.set_port(port, rate_bps=o.get("rate_bps"), delay_ns=o.get("delay_ns"), loss=o.get("loss"))


# ---- pipeline ---------------------------------------------------------------------------------------------------
@dataclass
class Pipeline:
    """One forwarding pipeline: the compiled switch and what P4Runtime pushed (served back by Get)."""

    switch: Switch
    p4info: Any                          # p4.config.v1.P4Info to serve (the pushed one, or ours)
    device_config: bytes                 # as received (raw source or the p4.tmp.P4DeviceConfig wrapper)
    source: str                          # the P4 source text
    cookie: int | None = None
    runtime: Any = None                  # P4Runtime state of this pipeline (switch.daemon.p4rt.entities.Entities)


def compile_source(source: str, include_dirs: list[str], settings: TmSettings, *, name: str = "device_config.p4",
                   seed: int = 0) -> Switch:
    """Compile P4 source text into a :class:`Switch` with the daemon's queue settings applied.

    The text is written to a private temporary directory (the front end reads files); quoted includes resolve
    through ``include_dirs`` then the target's own ``core.p4``/``v1model.p4``.  Errors are ``P4Error`` with the
    temporary path replaced by ``name``."""
    with tempfile.TemporaryDirectory(prefix="dlcp-switch-") as d:
        path = Path(d) / "program.p4"
        path.write_text(source)
        try:
            sw = Switch(str(path), priority_queues=settings.priority_queues, queue_capacity=settings.queue_depth,
                        seed=seed, include_dirs=[str(x) for x in include_dirs])
        except P4Error as e:
            loc = Loc(e.loc.file.replace(str(path), name), e.loc.line, e.loc.col)
            raise P4Error(loc, e.message.replace(str(path), name)) from None
        except RecursionError:
            raise P4Error(Loc(name, 1, 1), "program nesting too deep") from None
        except Exception as e:       # a compiler bug must not reach the client as a traceback
            log.exception("internal compiler error on a pushed program")
            raise P4Error(Loc(name, 1, 1), f"internal compiler error ({type(e).__name__}); the switch log has "
                                           "the details") from None
    for c in sw.custom_crcs.values():               # where a calculation is: in the pushed program, by its name
        c.where = c.where.replace(str(path), name)
    settings.apply(sw)
    return sw


# ---- the device -----------------------------------------------------------------------------------------------
class Device:
    """Thread-safe holder of the running pipeline, TM settings and counters (see module docstring)."""

    def __init__(self, device_id: int = 0, *, settings: TmSettings | None = None,
                 include_dirs: list[str] | None = None, ports: list[int] | None = None, cpu_port: int | None = None):
        self.device_id = device_id
        self.settings = settings or TmSettings()
        self.include_dirs = [str(d) for d in (include_dirs or [])] + [str(d) for d in DEFAULT_INCLUDE_DIRS]
        self.ports = sorted(ports or [])
        self.cpu_port = cpu_port
        self.lock = threading.RLock()
        self.pipeline: Pipeline | None = None
        self.staged: Pipeline | None = None       # VERIFY_AND_SAVE, waiting for COMMIT
        self.rx: Counter = Counter()
        #: source MAC of the last frame received per port (the host behind it, on a host port)
        self.rx_src: dict[int, bytes] = {}
        self.tx: Counter = Counter()
        self.extra_drops: Counter = Counter()     # daemon-level drops: no pipeline, no interface, send error...
        self.writes = 0
        self.write_updates = 0
        self.packet_errors = 0
        self._base_queue: dict[tuple[int, int], list[int]] = {}   # (port, prio) -> [enq, deq, peak] of old pipelines
        self._base_drops: Counter = Counter()
        self.wake: Callable[[], None] = lambda: None              # set by the packet loop
        self.clock_ns: Callable[[], int] = lambda: 0              # the packet loop's clock (switch time)
        self.packet_out: list[tuple[int, bytes]] = []             # control-plane injections for the packet loop

    # -- pipeline ----------------------------------------------------------------------------------------------
    def compile(self, source: str, *, name: str = "device_config.p4") -> Switch:
        """Compile (outside the lock: it takes a fraction of a second) with this device's includes and settings."""
        with self.lock:
            settings = TmSettings(self.settings.priority_queues, self.settings.queue_depth,
                                  self.settings.queue_rate_pps, dict(self.settings.queues), dict(self.settings.links))
        return compile_source(source, self.include_dirs, settings, name=name)

    def install(self, pipeline: Pipeline) -> None:
        """Make ``pipeline`` the running one (forwarding state starts empty); queued packets of the old one are
        dropped and counted as ``pipeline_change``; its counters are kept in the totals."""
        with self.lock:
            old = self.pipeline
            if old is not None:
                self._fold(old.switch)
            sw = pipeline.switch
            self.settings.apply(sw)                # settings may have changed while it compiled
            now = self.clock_ns()
            if now > sw.now_ns:
                sw.now_ns = now
            self.pipeline = pipeline
            # the program (IR, generated code, tables) lives until the next install: move it out of the collector's
            # generations so the collections that per-packet garbage triggers stop scanning it; unfreezing first
            # lets the replaced pipeline be collected
            gc.unfreeze()
            gc.collect()
            gc.freeze()
        self.wake()

    def _fold(self, sw: Switch) -> None:
        tm = sw.tm
        for (port, prio), q in tm.queues.items():
            b = self._base_queue.setdefault((port, prio), [0, 0, 0])
            b[0] += q.enq_packets
            b[1] += q.deq_packets
            b[2] = max(b[2], q.peak_depth)
            if q.fifo:
                self._base_drops[(port, prio, "pipeline_change")] += len(q.fifo)
        self._base_drops.update(tm.drops)

    def require_pipeline(self) -> Pipeline:
        p = self.pipeline
        if p is None:
            raise SwitchError("FAILED_PRECONDITION", "No forwarding pipeline config set for this device")
        return p

    # -- traffic manager (management service) ------------------------------------------------------------------
    def _check_port(self, port: int) -> None:
        if not 0 <= port < 511:
            raise SwitchError("INVALID_ARGUMENT", f"port {port} out of range (0..510)")

    def set_queue(self, port: int, priority: int | None = None, *, depth: int | None = None,
                  rate_pps: float | None = None) -> None:
        """Capacity and/or rate of queue (port, priority), or of every priority of the port."""
        self._check_port(port)
        n = self.settings.priority_queues
        if priority is not None and not 0 <= priority < n:
            raise SwitchError("INVALID_ARGUMENT", f"priority {priority} out of range: the switch has {n} priority "
                                                  f"queues (0..{n - 1})")
        if depth is not None and not 1 <= depth <= 1 << 24:
            raise SwitchError("INVALID_ARGUMENT", f"queue depth {depth} out of range (1..{1 << 24} packets)")
        if rate_pps is not None and not (rate_pps >= 0 and rate_pps < float("inf")):
            raise SwitchError("INVALID_ARGUMENT", f"queue rate {rate_pps} must be >= 0 packets/s (0 = unlimited)")
        with self.lock:
            for prio in ([priority] if priority is not None else range(n)):
                o = self.settings.queues.setdefault((port, prio), {})
                if depth is not None:
                    o["depth"] = int(depth)
                if rate_pps is not None:
                    o["rate_pps"] = float(rate_pps)
                p = self.pipeline
                if p is not None:
                    if depth is not None:
                        p.switch.tm.set_queue_depth(int(depth), port, prio)
                    if rate_pps is not None:
                        p.switch.tm.set_queue_rate(float(rate_pps), port, prio)
        self.wake()

    def set_link(self, port: int, *, rate_bps: float | None = None, delay_us: int | None = None,
                 loss: float | None = None) -> None:
        """Line rate (bits/s), propagation delay (us) and random loss probability of a port."""
        self._check_port(port)
        if rate_bps is not None and not (rate_bps >= 0 and rate_bps < float("inf")):
            raise SwitchError("INVALID_ARGUMENT", f"link rate {rate_bps} must be >= 0 bits/s (0 = unlimited)")
        if delay_us is not None and not 0 <= delay_us <= 10_000_000:
            raise SwitchError("INVALID_ARGUMENT", f"link delay {delay_us} us out of range (0..10 s)")
        if loss is not None and not 0.0 <= loss <= 1.0:
            raise SwitchError("INVALID_ARGUMENT", f"loss {loss} out of range (0..1)")
        with self.lock:
            o = self.settings.links.setdefault(port, {})
            if rate_bps is not None:
                o["rate_bps"] = float(rate_bps)
            if delay_us is not None:
                o["delay_ns"] = int(delay_us) * 1000
            if loss is not None:
                o["loss"] = float(loss)
            p = self.pipeline
            if p is not None:
                p.switch.tm.set_port(port, rate_bps=rate_bps, delay_ns=None if delay_us is None else delay_us * 1000,
                                     loss=loss)
        self.wake()

    # -- custom CRC calculations (management service) ---------------------------------------------------------
    def set_crc_parameters(self, name: str, width: int, polynomial: int, initial_remainder: int,
                           final_xor_value: int, reflect_data: bool, reflect_remainder: bool) -> None:
        """BMv2's ``set_crc16_parameters`` / ``set_crc32_parameters`` on the running pipeline (see
        :meth:`switch.target.Switch.set_crc_parameters`); FAILED_PRECONDITION without one."""
        with self.lock:
            self.require_pipeline().switch.set_crc_parameters(name, width, polynomial, initial_remainder,
                                                              final_xor_value, reflect_data, reflect_remainder)

    def crc_calculations(self) -> list[CrcCalculation]:
        """The running program's custom CRC calculations, in source order (none without a pipeline)."""
        with self.lock:
            p = self.pipeline
            if p is None:
                return []
            return [CrcCalculation(c.name, c.width, c.where, *c.params) for c in p.switch.custom_crcs.values()]

    # -- statistics ----------------------------------------------------------------------------------------------
    def stats(self) -> SwitchStats:
        with self.lock:
            st = SwitchStats(writes=self.writes, write_updates=self.write_updates, packet_errors=self.packet_errors)
            p = self.pipeline
            tm = p.switch.tm if p is not None else None
            n = tm.nprio if tm is not None else self.settings.priority_queues
            ports = set(self.ports) | set(self.rx) | set(self.tx) | {k[0] for k in self._base_queue}
            ports |= {k[0] for k in self.settings.queues} | set(self.settings.links)
            if self.cpu_port is not None:
                ports.add(self.cpu_port)
            if tm is not None:
                ports |= {k[0] for k in tm.queues}
            for port in sorted(ports):
                ps = st.ports[port] = PortStats(self.rx[port], self.tx[port])
                src = self.rx_src.get(port)
                ps.last_src_mac = ":".join(f"{b:02x}" for b in src) if src else None
                link = self.settings.links.get(port, {})
                ps.rate_bps, ps.loss = link.get("rate_bps"), link.get("loss")
                ps.delay_us = int(link["delay_ns"]) // 1000 if "delay_ns" in link else None
                for prio in range(n):
                    b = self._base_queue.get((port, prio), [0, 0, 0])
                    q = tm.queues.get((port, prio)) if tm is not None else None
                    if q is not None:
                        ps.queues[prio] = QueueStats(len(q.fifo), max(b[2], q.peak_depth), q.capacity, q.rate_pps,
                                                     b[0] + q.enq_packets, b[1] + q.deq_packets)
                    else:
                        ps.queues[prio] = QueueStats(0, b[2], self.settings.capacity(port, prio),
                                                     self.settings.rate(port, prio), b[0], b[1])
            drops: Counter = Counter(self._base_drops)
            drops.update(self.extra_drops)
            if tm is not None:
                drops.update(tm.drops)
            st.drops = {k: v for k, v in drops.items() if v}
            return st

"""``dlcp-switch``: the embedded P4 target as a switch process on real interfaces, programmed over P4Runtime
(like BMv2's ``simple_switch_grpc``) with a traffic-manager management service on the same gRPC server.

    dlcp-switch -i 1@veth1 -i 2@veth2 --cpu-port 255 --grpc-server-addr 127.0.0.1:9559 p4src/dlcp.p4

Threads: gRPC handlers (control plane, hold :attr:`Device.lock` per RPC) and one packet thread
(:class:`PacketLoop`).  The target runs on a simulated clock; the packet thread drives it from
``time.monotonic_ns()``: it polls every port socket and a wake-up pipe (PacketOut, configuration changes), injects
what arrived at "now", runs the traffic manager up to now, sends the departures whose arrival time has come and
keeps link-delayed ones in a heap.  The poll timeout is the next queue departure or delayed send (1 ms
resolution).  Frames leaving on the CPU port become PacketIn messages.  An exception while processing a packet is
logged with the packet, counted (``packet_errors``) and the packet dropped; the switch keeps running.

Ready: once the start program is compiled, the ports are open and gRPC listens, the daemon prints
``dlcp-switch: listening on HOST:PORT`` on stdout (with ``:0`` the port the kernel chose).  SIGTERM/SIGINT stop it:
packet thread first, then gRPC (1 s grace), sockets closed, pcaps flushed; exit status 0.
"""
from __future__ import annotations

import argparse
import heapq
import logging
import os
import select
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc

from finsy.proto import p4r_grpc

from ..errors import SwitchError
from . import mgmt_pb2_grpc
from .device import Device, TmSettings
from .mgmt import MgmtService
from .p4rt.pipeline import build_pipeline
from .p4rt.service import P4RuntimeService
from .pcap import PcapDir
from .portio import Port, PortError, open_ports, parse_port_spec

log = logging.getLogger("dlcp.switch")

LOG_LEVELS = {"trace": logging.DEBUG, "debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
              "warning": logging.WARNING, "error": logging.ERROR, "critical": logging.CRITICAL,
              "off": logging.CRITICAL + 10}
RX_BUDGET = 64              # frames read from one socket per wake-up
MAX_MESSAGE = 64 << 20      # gRPC message size limit (P4Info, device config, big reads)
KEEPALIVE_MS = 10_000       # server keepalive ping interval


class PacketLoop:
    """The packet thread: ports <-> the running pipeline (see the module docstring)."""

    def __init__(self, device: Device, ports: dict[int, Port], p4rt: P4RuntimeService | None = None,
                 pcap: PcapDir | None = None):
        self.device, self.ports, self.p4rt, self.pcap = device, ports, p4rt, pcap
        self.cpu_port = device.cpu_port
        self.t0 = time.monotonic_ns()
        self._wr, self._ww = os.pipe()
        os.set_blocking(self._wr, False)
        os.set_blocking(self._ww, False)
        self._stop = False
        self._delayed: list[tuple[int, int, int, bytes]] = []     # (arrival ns, seq, port, data)
        self._seq = 0
        self._last_flush = 0
        self._err_logged: dict[int, float] = {}
        self.thread: threading.Thread | None = None
        device.clock_ns = self.now
        device.wake = self.wake

    def now(self) -> int:
        return time.monotonic_ns() - self.t0

    def wake(self) -> None:
        try:
            os.write(self._ww, b"!")
        except (BlockingIOError, OSError):
            pass                                        # a wake-up is already pending (or we are closing)

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run_guarded, name="packet-loop", daemon=True)
        self.thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop = True
        self.wake()
        if self.thread is not None:
            self.thread.join(timeout)
        for fd in (self._wr, self._ww):
            try:
                os.close(fd)
            except OSError:
                pass

    # -- loop ------------------------------------------------------------------------------------------------------
    def _run_guarded(self) -> None:
        try:
            self.run()
        except Exception:                               # pragma: no cover - a bug here must be loud
            log.exception("packet loop crashed")
            os.kill(os.getpid(), signal.SIGTERM)

    def run(self) -> None:
        poller = select.poll()
        poller.register(self._wr, select.POLLIN)
        by_fd = {}
        for p in self.ports.values():
            poller.register(p.fd, select.POLLIN)
            by_fd[p.fd] = p
        next_t: int | None = None
        while not self._stop:
            now = self.now()
            if next_t is None:
                timeout = 500                           # idle: wake twice a second to flush pcaps
            else:
                timeout = max(0, -(-(next_t - now) // 1_000_000))
            events = poller.poll(timeout)
            if self._stop:
                break
            rx: list[tuple[int, bytes]] = []
            for fd, ev in events:
                if fd == self._wr:
                    try:
                        while os.read(self._wr, 4096):
                            pass
                    except (BlockingIOError, OSError):
                        pass
                    continue
                p = by_fd[fd]
                if ev & select.POLLNVAL:                # closed under us: only at shutdown
                    poller.unregister(fd)
                    continue
                if ev & (select.POLLERR | select.POLLHUP):
                    self._socket_error(p)
                p.recv_into(rx, RX_BUDGET)
            next_t = self.step(rx)
            if not events or time.monotonic() - self._last_flush > 0.5:
                if self.pcap is not None:
                    self.pcap.flush()
                self._last_flush = time.monotonic()

    def _socket_error(self, p: Port) -> None:
        """A transient socket error (interface down, MTU change...): clear it, log it (at most every 5 s per
        port) and keep the port; frames that could not be sent meanwhile are counted as ``tx_error`` drops."""
        err = p.take_error()
        now = time.monotonic()
        if now - self._err_logged.get(p.port, -10.0) >= 5.0:
            self._err_logged[p.port] = now
            log.warning("port %d (%s): socket error %s (%s); still receiving", p.port, p.ifname, err,
                        os.strerror(err) if err > 0 else "?")

    def step(self, rx: list[tuple[int, bytes]]) -> int | None:
        """Process received frames and due departures once; returns the next time (switch clock) to wake up."""
        dev = self.device
        now = self.now()
        pcap = self.pcap
        if pcap is not None:
            wall = time.time_ns()
            for port, data in rx:
                pcap.rx(port, data, wall)
        out = []
        digests: list = []
        runtime = None
        next_t = None
        with dev.lock:
            for port, data in rx:
                dev.rx[port] += 1
                dev.rx_src[port] = data[6:12]  # the sender's MAC (mgmt stats: a controller checks host MACs)
            batch = rx
            if dev.packet_out:
                batch = rx + dev.packet_out
                dev.packet_out = []
            pl = dev.pipeline
            if pl is None:
                for port, _ in batch:
                    dev.extra_drops[(port, 0, "no_pipeline")] += 1
            else:
                sw = pl.switch
                runtime = pl.runtime
                t = max(now, sw.now_ns)
                for port, data in batch:
                    try:
                        sw.inject(port, data, t)
                    except Exception as e:
                        dev.packet_errors += 1
                        log.error("packet error on port %d: %r; packet dropped (%d bytes): %s%s", port, e, len(data),
                                  data[:128].hex(), "..." if len(data) > 128 else "")
                for _ in range(8):                      # an egress exception loses one packet, then continue
                    try:
                        sw.run(t)
                        break
                    except Exception as e:
                        dev.packet_errors += 1
                        log.error("packet error in egress: %r; packet dropped", e)
                out = sw.outputs[:]
                sw.outputs.clear()
                if sw.digests:
                    digests = list(sw.digests)      # (digest index, values); cleared even if nobody listens
                    sw.digests.clear()
                nd = sw.tm.next_departure()
                next_t = nd[0] if nd is not None else None
        tx: dict = {}
        drops: dict = {}
        sends: dict[int, list[bytes]] = {}              # port -> frames, sent in one batch per port
        for d in out:
            if d.arrival_ns > now:
                self._seq += 1
                heapq.heappush(self._delayed, (d.arrival_ns, self._seq, d.port, d.data))
            else:
                self._route(d.port, d.data, runtime, sends, tx, drops)
        delayed = self._delayed
        while delayed and delayed[0][0] <= now:
            _, _, port, data = heapq.heappop(delayed)
            self._route(port, data, runtime, sends, tx, drops)
        if delayed and (next_t is None or delayed[0][0] < next_t):
            next_t = delayed[0][0]
        for port, frames in sends.items():
            self._send(self.ports[port], frames, tx, drops)
        if digests and self.p4rt is not None and runtime is not None:
            self.p4rt.digests(runtime, digests)
        if tx or drops:
            with dev.lock:
                dev.tx.update(tx)
                dev.extra_drops.update(drops)
        return next_t

    def _route(self, port: int, data: bytes, runtime, sends: dict[int, list[bytes]], tx: dict, drops: dict) -> None:
        """A departure due now: PacketIn for the CPU port, else queued in ``sends`` for its port's batch (or
        dropped as ``no_interface``)."""
        if port == self.cpu_port and self.cpu_port is not None:
            why = self.p4rt.packet_in(runtime, data) if self.p4rt is not None and runtime is not None \
                else "no_controller"
            if why is None:
                tx[port] = tx.get(port, 0) + 1
            else:
                k = (port, 0, why)
                drops[k] = drops.get(k, 0) + 1
            return
        frames = sends.get(port)
        if frames is None:
            if port not in self.ports:
                k = (port, 0, "no_interface")
                drops[k] = drops.get(k, 0) + 1
                return
            frames = sends[port] = []
        frames.append(data)

    def _send(self, p: Port, frames: list[bytes], tx: dict, drops: dict) -> None:
        """One port's frames of this step, in order; refused ones count as ``tx_error`` drops."""
        refused = p.send_batch(frames)
        if refused:
            k = (p.port, 0, "tx_error")
            drops[k] = drops.get(k, 0) + len(refused)
        sent = len(frames) - len(refused)
        if sent:
            tx[p.port] = tx.get(p.port, 0) + sent
            if self.pcap is not None:
                skip = set(refused)
                for i, data in enumerate(frames):
                    if i not in skip:
                        self.pcap.tx(p.port, data)


# ---- command line ----------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="dlcp-switch", description="Embedded v1model P4 switch with a P4Runtime "
                                 "server (BMv2 simple_switch_grpc conventions) and a traffic-manager service.")
    ap.add_argument("-i", "--interface", dest="interfaces", action="append", default=[], metavar="PORT@IFNAME",
                    help="attach switch port PORT to interface IFNAME (repeatable)")
    ap.add_argument("--device-id", type=int, default=0, help="P4Runtime device id (default 0)")
    ap.add_argument("--grpc-server-addr", default="127.0.0.1:9559",
                    help="gRPC listen address (default 127.0.0.1:9559, loopback only; port 0 = any free port)")
    ap.add_argument("--grpc-tls-cert", help="PEM certificate: serve TLS (needs --grpc-tls-key)")
    ap.add_argument("--grpc-tls-key", help="PEM private key of --grpc-tls-cert")
    ap.add_argument("--cpu-port", type=int, help="port whose departures become PacketIn and where PacketOut enters")
    ap.add_argument("--priority-queues", type=int, default=8, help="queues per port, 1..8 (default 8)")
    ap.add_argument("--queue-depth", type=int, default=64, help="default queue capacity in packets (default 64)")
    ap.add_argument("--queue-rate", type=float, default=0.0, help="default queue rate in packets/s (0 = unlimited)")
    ap.add_argument("--log-level", default="info", choices=sorted(LOG_LEVELS), help="log level (default info)")
    ap.add_argument("--pcap", metavar="DIR", help="write one pcap per port and direction into DIR")
    ap.add_argument("-I", dest="include", action="append", default=[], metavar="DIR",
                    help="include directory for P4 programs (start program and pushed ones), repeatable")
    ap.add_argument("program", nargs="?", help="P4-16 program to run at start (optional; a controller can push one)")
    return ap


def _fail(msg: str) -> int:
    print(f"dlcp-switch: error: {msg}", file=sys.stderr, flush=True)
    return 1


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    logging.basicConfig(level=LOG_LEVELS[a.log_level], stream=sys.stderr,
                        format="%(asctime)s dlcp-switch %(levelname)s %(name)s: %(message)s")
    if not 1 <= a.priority_queues <= 8:
        return _fail(f"--priority-queues {a.priority_queues}: must be 1..8 (standard_metadata.priority is bit<3>)")
    if a.queue_depth < 1:
        return _fail(f"--queue-depth {a.queue_depth}: must be >= 1")
    if a.queue_rate < 0:
        return _fail(f"--queue-rate {a.queue_rate}: must be >= 0")
    if a.cpu_port is not None and not 0 <= a.cpu_port < 511:
        return _fail(f"--cpu-port {a.cpu_port}: must be 0..510")
    if bool(a.grpc_tls_cert) != bool(a.grpc_tls_key):
        return _fail("--grpc-tls-cert and --grpc-tls-key go together")
    try:
        specs = [parse_port_spec(s) for s in a.interfaces]
    except ValueError as e:
        return _fail(str(e))
    if a.cpu_port is not None and any(p == a.cpu_port for p, _ in specs):
        return _fail(f"--cpu-port {a.cpu_port} is also attached to an interface")
    includes = list(a.include)
    if a.program:
        includes.append(str(Path(a.program).resolve().parent))
    settings = TmSettings(a.priority_queues, a.queue_depth, a.queue_rate)
    device = Device(a.device_id, settings=settings, include_dirs=includes, ports=[p for p, _ in specs],
                    cpu_port=a.cpu_port)
    if a.program:
        try:
            src = Path(a.program).read_bytes()
        except OSError as e:
            return _fail(f"{a.program}: {e.strerror}")
        try:
            device.install(build_pipeline(device, src, name=a.program))
        except SwitchError as e:
            return _fail(e.message)
    creds = None
    if a.grpc_tls_cert:
        try:
            creds = grpc.ssl_server_credentials([(Path(a.grpc_tls_key).read_bytes(),
                                                  Path(a.grpc_tls_cert).read_bytes())])
        except OSError as e:
            return _fail(f"TLS: {e.filename}: {e.strerror}")
    try:
        ports = open_ports(specs)
    except PortError as e:
        return _fail(str(e.strerror or e))
    pcap = PcapDir(a.pcap, {p: n for p, n in specs}) if a.pcap else None
    server = grpc.server(ThreadPoolExecutor(max_workers=32, thread_name_prefix="grpc"),
                         options=[("grpc.max_receive_message_length", MAX_MESSAGE),
                                  ("grpc.max_send_message_length", MAX_MESSAGE),
                                  ("grpc.so_reuseport", 0),
                                  # a controller that vanishes without closing its connection is noticed by
                                  # keepalive pings (~15 s) and its stream, and so its primacy, ends
                                  ("grpc.keepalive_time_ms", KEEPALIVE_MS),
                                  ("grpc.keepalive_timeout_ms", 5000),
                                  ("grpc.keepalive_permit_without_calls", 1)])
    p4rt = P4RuntimeService(device)
    p4r_grpc.add_P4RuntimeServicer_to_server(p4rt, server)
    mgmt_pb2_grpc.add_SwitchManagementServicer_to_server(MgmtService(device), server)
    try:
        bound = server.add_secure_port(a.grpc_server_addr, creds) if creds else \
            server.add_insecure_port(a.grpc_server_addr)
    except RuntimeError as e:
        bound = 0
        log.debug("bind failed: %s", e)
    if not bound:
        for p in ports.values():
            p.close()
        return _fail(f"cannot listen on {a.grpc_server_addr} (address in use or invalid)")
    loop = PacketLoop(device, ports, p4rt, pcap)
    stop = threading.Event()
    received: list[int] = []

    def on_signal(signum, _frame):
        received.append(signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    loop.start()
    server.start()
    host = a.grpc_server_addr.rsplit(":", 1)[0]
    addr = f"{host}:{bound}"
    log.info("device %d, ports %s, cpu port %s, program %s, %s", a.device_id,
             ", ".join(f"{p}@{n}" for p, n in specs) or "none", a.cpu_port, a.program or "none (wait for a push)",
             "TLS" if creds else "insecure")
    print(f"dlcp-switch: listening on {addr}", flush=True)
    while not stop.wait(0.5):
        pass
    log.info("signal %s: stopping", received[0] if received else "?")
    loop.stop()
    server.stop(1.0).wait(3.0)
    for p in ports.values():
        p.close()
    if pcap is not None:
        pcap.close()
    print("dlcp-switch: stopped", flush=True)
    return 0


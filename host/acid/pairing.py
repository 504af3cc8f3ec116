"""The pairing service of an asynchronous run, and the workers' client for it.

Mechanism (one coordinator, TCP): every worker keeps one TCP connection to the service for the whole run. The
service

1. **rendezvous**: collects every rank's ``hello`` (its DLCP/UDP address) and then sends each one ``start``: the
   address map, a random job id and nonce for the transport, the run configuration and the graph;
2. **pairs**: a worker whose Poisson clock fired sends ``free``; if one of its graph neighbours is waiting, the
   service picks one of those at random and sends ``pair`` (peer, pair id) to both, otherwise the worker waits.
   A worker is in at most one pair at a time, so pairs never conflict; the pair then exchanges x directly over
   the DLCP transport (lower rank sends first) and the service is not involved;
3. **monitors**: workers send a ``progress`` message every ``log_interval`` with their step count and a snapshot
   of x (binary, after the JSON header); a :class:`~host.acid.monitor.Monitor` turns the snapshots into the
   consensus distance over time. These messages double as heartbeats;
4. **stops**: once all workers together made the step budget (or the time limit passed) it sends ``stop``;
   when every live worker answered ``final_ready`` it sends ``survivors`` (the live ranks), which average their
   models (one all-reduce over the transport) and report ``done`` with the final model;
5. **drops dead workers**: a worker whose connection closes (the kernel closes it when the process dies) or that
   is silent for ``dead_after`` seconds is dropped with a logged warning: it is never paired again and is not a
   survivor. Its partner in an exchange already under way sees a ``TransportError`` within the exchange timeout.
   A worker that does not answer ``stop`` (or does not report ``done``) within ``exchange_timeout +
   collective_timeout`` is dropped the same way, so one hung worker cannot hold the others at the end.

Frames: ``!II`` (JSON length, binary length), a UTF-8 JSON object with key ``op``, the binary part.
"""

from __future__ import annotations

import json
import logging
import random
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import numpy as np

from host.acid.config import RunConfig
from host.acid.constants import neighbors

__all__ = ["PairingService", "CoordinatorClient", "ProtocolError", "send_msg", "recv_msg"]

log = logging.getLogger("host.acid.pairing")

FRAME = struct.Struct("!II")
MAX_JSON = 1 << 20
MAX_BLOB = 1 << 31


class ProtocolError(RuntimeError):
    """A malformed or unexpected message on a pairing connection."""


def send_msg(sock: socket.socket, header: dict[str, Any], blob: bytes | memoryview = b"") -> None:
    js = json.dumps(header, separators=(",", ":")).encode()
    sock.sendall(FRAME.pack(len(js), len(blob)) + js)
    if len(blob):
        sock.sendall(blob)


def recv_msg(rfile: BinaryIO) -> tuple[dict[str, Any], bytes] | None:
    """The next message, or None at end of stream; raises :class:`ProtocolError` on a malformed frame."""
    head = rfile.read(FRAME.size)
    if not head:
        return None
    if len(head) < FRAME.size:
        raise ProtocolError("connection closed inside a frame header")
    nj, nb = FRAME.unpack(head)
    if nj > MAX_JSON or nb > MAX_BLOB:
        raise ProtocolError(f"frame too large (json {nj} B, binary {nb} B)")
    js = rfile.read(nj)
    blob = rfile.read(nb) if nb else b""
    if len(js) < nj or len(blob) < nb:
        raise ProtocolError("connection closed inside a frame")
    try:
        header = json.loads(js)
    except ValueError as e:
        raise ProtocolError(f"frame is not JSON: {e}") from None
    if not isinstance(header, dict) or not isinstance(header.get("op"), str):
        raise ProtocolError("frame has no 'op'")
    return header, blob


@dataclass
class _Conn:
    rank: int
    sock: socket.socket
    addr: tuple[str, int]
    last_seen: float
    alive: bool = True
    final_ready: bool = False
    done: bool = False
    wlock: threading.Lock = field(default_factory=threading.Lock)


class PairingService:
    """Coordinator of one run (a TCP server on ``bind``; ``address`` is where it listens).

    ``monitor``: optional :class:`~host.acid.monitor.Monitor` fed with the workers' snapshots. After
    :meth:`wait`, :meth:`result` has the per-worker reports, the final model, the dropped ranks and the pairs made.
    """

    def __init__(self, config: RunConfig, bind: tuple[str, int] = ("127.0.0.1", 0), monitor: Any = None):
        self.config = config
        self.neigh = neighbors(config.topology, config.world)
        self.monitor = monitor
        self._rng = random.Random(config.seed)
        self._lsock = socket.create_server(bind, backlog=max(16, config.world))
        self.address: tuple[str, int] = self._lsock.getsockname()[:2]
        self._lock = threading.Lock()
        self._conns: dict[int, _Conn] = {}
        self._free: set[int] = set()
        self._steps: dict[int, int] = {}
        self.phase = "join"  # join -> train -> stopping -> final -> done
        self.stop_reason = ""
        self.dropped: dict[int, str] = {}
        self.exchange_failures: list[dict[str, Any]] = []
        self.edge_pairs: dict[tuple[int, int], int] = {}
        self.reports: dict[int, dict[str, Any]] = {}
        self.final_x: dict[int, np.ndarray] = {}
        self.survivors: list[int] = []
        self.error: str | None = None
        self._pair_id = 0
        self._created = time.monotonic()
        self._t_train = 0.0
        self._phase_deadline = float("inf")  # stopping/final: workers not there by then are dropped
        self.train_seconds = 0.0
        self._done = threading.Event()
        self._closed = False
        self._threads = [threading.Thread(target=self._accept_loop, name="acid-accept", daemon=True),
                         threading.Thread(target=self._watchdog, name="acid-watchdog", daemon=True)]
        for t in self._threads:
            t.start()

    # --- public ---------------------------------------------------------------------------------------------
    def wait(self, timeout: float | None = None) -> bool:
        """Block until the run is over (every survivor reported, or it failed); False on timeout."""
        return self._done.wait(timeout)

    @property
    def pairs(self) -> int:
        return self._pair_id

    def result(self) -> dict[str, Any]:
        with self._lock:
            xs = list(self.final_x.values())
            return {
                "phase": self.phase, "error": self.error, "stop_reason": self.stop_reason,
                "survivors": list(self.survivors), "dropped": dict(self.dropped),
                "reports": {r: dict(v) for r, v in sorted(self.reports.items())},
                "pairs": self._pair_id, "edge_pairs": {f"{i}-{j}": n for (i, j), n in sorted(self.edge_pairs.items())},
                "exchange_failures": list(self.exchange_failures), "train_seconds": self.train_seconds,
                "final_identical": bool(xs) and all(np.array_equal(xs[0], x) for x in xs[1:]),
            }

    def final_model(self) -> np.ndarray | None:
        with self._lock:
            return next(iter(self.final_x.values()), None)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns = list(self._conns.values())
        try:
            self._lsock.close()
        except OSError:  # pragma: no cover
            pass
        for c in conns:
            _shutdown(c.sock)
        self._done.set()

    # --- connection handling ----------------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while True:
            try:
                sock, peer = self._lsock.accept()
            except OSError:
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._serve, args=(sock, peer), name=f"acid-conn-{peer}", daemon=True).start()

    def _serve(self, sock: socket.socket, peer: Any) -> None:
        rfile = sock.makefile("rb")
        rank: int | None = None
        why = "connection closed"
        try:
            first = recv_msg(rfile)
            if first is None:
                return
            rank = self._hello(sock, first[0])
            while True:
                msg = recv_msg(rfile)
                if msg is None:
                    break
                self._handle(rank, *msg)
        except ProtocolError as e:
            why = f"protocol error: {e}"
            log.warning("pairing connection from %s (rank %s): %s", peer, rank, e)
            try:
                send_msg(sock, {"op": "error", "message": str(e)})
            except OSError:
                pass
        except OSError as e:
            why = f"connection lost: {e}"
        finally:
            if rank is not None:
                with self._lock:
                    c = self._conns.get(rank)
                    if c is not None and c.sock is sock and c.alive:
                        if c.done:  # a finished worker closing its connection is no failure
                            c.alive = False
                            self._progress()
                        else:
                            self._drop(rank, why)
            _shutdown(sock)
            rfile.close()
            sock.close()

    def _hello(self, sock: socket.socket, h: dict[str, Any]) -> int:
        if h.get("op") != "hello":
            raise ProtocolError(f"first message must be 'hello', got {h.get('op')!r}")
        rank, addr = h.get("rank"), h.get("addr")
        if not isinstance(rank, int) or not 0 <= rank < self.config.world:
            raise ProtocolError(f"hello: rank {rank!r} is not in 0..{self.config.world - 1}")
        if not (isinstance(addr, list) and len(addr) == 2 and isinstance(addr[0], str) and isinstance(addr[1], int)):
            raise ProtocolError(f"hello from rank {rank}: addr must be [host, port], got {addr!r}")
        with self._lock:
            if self.phase != "join":
                raise ProtocolError(f"hello from rank {rank} after the run started")
            if rank in self._conns:
                raise ProtocolError(f"rank {rank} is already connected")
            self._conns[rank] = _Conn(rank, sock, (addr[0], addr[1]), time.monotonic())
            self._steps[rank] = 0
            log.info("rank %d joined from %s (%d/%d)", rank, addr, len(self._conns), self.config.world)
            if len(self._conns) == self.config.world:
                self._start()
        return rank

    def _start(self) -> None:
        sysrand = random.SystemRandom()
        start = {"op": "start", "config": self.config.to_dict(), "neighbors": self.neigh,
                 "addr_map": {str(r): list(c.addr) for r, c in self._conns.items()},
                 "job_id": sysrand.randrange(1, 1 << 32), "nonce": sysrand.randrange(1, 1 << 16)}
        self.phase = "train"
        self._t_train = time.monotonic()
        for r in list(self._conns):
            self._send(r, start)
        log.info("run started: %d workers, %s graph, algo %s", self.config.world, self.config.topology,
                 self.config.algo)

    def _handle(self, rank: int, h: dict[str, Any], blob: bytes) -> None:
        op = h["op"]
        snapshot = None
        with self._lock:
            c = self._conns[rank]
            if not c.alive:
                return
            c.last_seen = time.monotonic()
            if isinstance(h.get("steps"), int):
                self._steps[rank] = h["steps"]
            if op == "free":
                if self.phase != "train":
                    self._send(rank, {"op": "stop"})
                else:
                    self._pair(rank)
            elif op == "progress":
                if blob and self.monitor is not None:
                    snapshot = np.frombuffer(blob, dtype=np.float32)
            elif op == "heartbeat":
                pass
            elif op == "exchange_failed":
                self.exchange_failures.append({"rank": rank, "peer": h.get("peer"), "error": h.get("error")})
                log.warning("rank %d: exchange with rank %s failed: %s", rank, h.get("peer"), h.get("error"))
            elif op == "final_ready":
                c.final_ready = True
            elif op == "done":
                c.done = True
                self.reports[rank] = h.get("report", {})
                if blob:
                    self.final_x[rank] = np.frombuffer(blob, dtype=np.float32).copy()
            else:
                raise ProtocolError(f"unknown op {op!r} from rank {rank}")
            self._progress()
            alive = {r for r, cc in self._conns.items() if cc.alive}
        if snapshot is not None:
            self.monitor.add(rank, int(h.get("tick", 0)), float(h.get("t", 0.0)), snapshot, h.get("info", {}), alive)

    # --- state machine (under the lock) -----------------------------------------------------------------------
    def _pair(self, rank: int) -> None:
        cands = [j for j in self.neigh[rank] if j in self._free]
        if not cands:
            self._free.add(rank)
            return
        peer = self._rng.choice(cands)
        self._free.discard(peer)
        self._pair_id += 1
        edge = (min(rank, peer), max(rank, peer))
        self.edge_pairs[edge] = self.edge_pairs.get(edge, 0) + 1
        for a, b in ((rank, peer), (peer, rank)):
            self._send(a, {"op": "pair", "peer": b, "pair_id": self._pair_id})

    def _alive(self) -> list[int]:
        return sorted(r for r, c in self._conns.items() if c.alive)

    def _progress(self) -> None:
        """Advance the phase: stop on the budget, then survivors, then done."""
        alive = self._alive()
        if self.phase in ("join", "done"):
            return
        if not alive:
            self._finish("every worker was dropped")
            return
        if self.phase == "train" and sum(self._steps.values()) >= self.config.total_steps:
            self._begin_stop(f"step budget of {self.config.total_steps} reached")
        if self.phase == "stopping" and all(self._conns[r].final_ready for r in alive):
            self.phase = "final"
            self._phase_deadline = time.monotonic() + self._final_timeout()
            self.survivors = alive
            for r in alive:
                self._send(r, {"op": "survivors", "ranks": alive})
        if self.phase == "final" and all(self._conns[r].done for r in self.survivors if self._conns[r].alive):
            if any(self._conns[r].done for r in self.survivors):
                self._finish(None)
            else:
                self._finish("no survivor finished the final averaging")

    def _begin_stop(self, why: str) -> None:
        self.phase = "stopping"
        self.stop_reason = why
        self.train_seconds = time.monotonic() - self._t_train
        self._phase_deadline = time.monotonic() + self._final_timeout()
        log.info("stopping: %s (steps %s)", why, sum(self._steps.values()))
        self._free.clear()
        for r in self._alive():
            self._send(r, {"op": "stop"})

    def _final_timeout(self) -> float:
        """How long a stopping worker may take to finish its step and exchange, or the survivors to average."""
        return self.config.exchange_timeout + self.config.collective_timeout

    def _finish(self, error: str | None) -> None:
        self.phase = "done"
        self.error = error
        if error:
            log.error("run failed: %s", error)
        self._done.set()

    def _drop(self, rank: int, why: str) -> None:
        c = self._conns.get(rank)
        if c is None or not c.alive:
            return
        c.alive = False
        self._free.discard(rank)
        self.dropped[rank] = why
        left = len(self._alive())
        log.warning("rank %d dropped from the pairing: %s (%d of %d workers left)", rank, why, left,
                    self.config.world)
        _shutdown(c.sock)
        if self.phase == "join":
            self._finish(f"rank {rank} left before the run started: {why}")
            return
        self._progress()

    def _send(self, rank: int, header: dict[str, Any]) -> None:
        c = self._conns[rank]
        if not c.alive:
            return
        try:
            with c.wlock:
                send_msg(c.sock, header)
        except OSError as e:
            self._drop(rank, f"send failed: {e}")

    def _watchdog(self) -> None:
        while not self._done.wait(0.1):
            now = time.monotonic()
            with self._lock:
                if self._closed:
                    return
                if self.phase == "join":
                    if now - self._created > self.config.join_timeout:
                        missing = sorted(set(range(self.config.world)) - set(self._conns))
                        for r in list(self._conns):
                            self._send(r, {"op": "error", "message": f"ranks {missing} never joined"})
                        self._finish(f"only {len(self._conns)} of {self.config.world} workers joined within "
                                     f"{self.config.join_timeout}s (missing ranks {missing})")
                    continue
                for r in self._alive():
                    silent = now - self._conns[r].last_seen
                    if silent > self.config.dead_after:
                        self._drop(r, f"silent for {silent:.1f}s")
                if self.phase == "train" and now - self._t_train > self.config.max_seconds:
                    self._begin_stop(f"time limit of {self.config.max_seconds}s reached")
                    self._progress()
                if self.phase in ("stopping", "final") and now > self._phase_deadline:
                    for r in self._alive():
                        c = self._conns[r]
                        if not (c.final_ready if self.phase == "stopping" else c.done):
                            self._drop(r, f"did not finish the {self.phase} phase within {self._final_timeout()}s")


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class CoordinatorClient:
    """A worker's connection to the pairing service. A reader thread dispatches what the service pushes."""

    def __init__(self, address: tuple[str, int], rank: int, udp_addr: tuple[str, int], timeout: float = 30.0):
        self.rank = rank
        try:
            self.sock = socket.create_connection(address, timeout=timeout)
        except OSError as e:
            raise ConnectionError(f"rank {rank}: cannot reach the pairing service at {address}: {e}") from e
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.settimeout(None)
        self._rfile = self.sock.makefile("rb")
        self._wlock = threading.Lock()
        self._pairs: list[Any] = []
        self._cv = threading.Condition()
        self._survivors: list[int] | None = None
        self.stopped = threading.Event()
        self.error: str | None = None
        self._reader: threading.Thread | None = None
        self._heartbeat: threading.Thread | None = None
        self._last_send = time.monotonic()
        self._closed = threading.Event()
        self.send({"op": "hello", "rank": rank, "addr": [udp_addr[0], int(udp_addr[1])]})

    def send(self, header: dict[str, Any], blob: bytes | memoryview = b"") -> None:
        try:
            with self._wlock:
                send_msg(self.sock, header, blob)
                self._last_send = time.monotonic()
        except OSError as e:
            self._fail(f"lost the pairing service: {e}")

    def start_heartbeat(self, interval: float) -> None:
        """Send a heartbeat whenever nothing else was sent for ``interval`` (so the service never takes a busy
        worker, e.g. one still importing or initialising, for a dead one)."""
        def loop() -> None:
            while not self._closed.wait(interval / 2):
                if time.monotonic() - self._last_send >= interval and self.error is None:
                    self.send({"op": "heartbeat"})
        self._heartbeat = threading.Thread(target=loop, name=f"acid-heartbeat-{self.rank}", daemon=True)
        self._heartbeat.start()

    def wait_start(self, timeout: float) -> dict[str, Any]:
        """Block until the service sends ``start`` (everyone joined); then start the reader thread."""
        self.sock.settimeout(timeout)
        try:
            msg = recv_msg(self._rfile)
        except (OSError, TimeoutError) as e:
            raise ConnectionError(f"rank {self.rank}: no start from the pairing service within {timeout}s: {e}") \
                from None
        finally:
            self.sock.settimeout(None)
        if msg is None:
            raise ConnectionError(f"rank {self.rank}: the pairing service closed the connection before the start")
        h = msg[0]
        if h["op"] == "error":
            raise ConnectionError(f"rank {self.rank}: pairing service: {h.get('message')}")
        if h["op"] != "start":
            raise ProtocolError(f"expected 'start', got {h['op']!r}")
        self._reader = threading.Thread(target=self._read_loop, name=f"acid-client-{self.rank}", daemon=True)
        self._reader.start()
        return h

    def request_pair(self, steps: int) -> tuple[int, int] | None:
        """Announce this worker is free; block until paired (``(peer, pair_id)``) or stopped (None)."""
        with self._cv:
            if self.stopped.is_set() and not self._pairs:
                return None
        self.send({"op": "free", "steps": steps})
        with self._cv:
            self._cv.wait_for(lambda: self._pairs or self.stopped.is_set())
            return self._pairs.pop(0) if self._pairs else None

    def wait_survivors(self, timeout: float) -> list[int]:
        with self._cv:
            if not self._cv.wait_for(lambda: self._survivors is not None or self.error is not None, timeout):
                raise TimeoutError(f"rank {self.rank}: no survivor list from the pairing service within {timeout}s")
            if self._survivors is None:
                raise ConnectionError(f"rank {self.rank}: {self.error}")
            return list(self._survivors)

    def close(self) -> None:
        self._closed.set()
        if self._heartbeat is not None:
            self._heartbeat.join(5)
        _shutdown(self.sock)
        self.sock.close()
        if self._reader is not None:
            self._reader.join(5)

    def _fail(self, why: str) -> None:
        with self._cv:
            if self.error is None:
                self.error = why
            self.stopped.set()
            self._cv.notify_all()

    def _read_loop(self) -> None:
        try:
            while True:
                msg = recv_msg(self._rfile)
                if msg is None:
                    self._fail("the pairing service closed the connection")
                    return
                h = msg[0]
                with self._cv:
                    if h["op"] == "pair":
                        self._pairs.append((int(h["peer"]), int(h["pair_id"])))
                    elif h["op"] == "stop":
                        self.stopped.set()
                    elif h["op"] == "survivors":
                        self._survivors = [int(r) for r in h["ranks"]]
                    elif h["op"] == "error":
                        self.error = f"pairing service: {h.get('message')}"
                        self.stopped.set()
                    else:
                        raise ProtocolError(f"unexpected op {h['op']!r} from the pairing service")
                    self._cv.notify_all()
        except (OSError, ProtocolError) as e:
            self._fail(f"pairing connection failed: {e}")

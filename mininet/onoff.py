"""Bursty on-off background traffic: ``python -m testbed.onoff serve|send ...``, run in a host's namespace.

Why not iperf3: it sends continuously (its ``-t`` is whole seconds), and the pressure regime this serves is bursts
shorter than a training step arriving together from several senders (incast). A sender sends for ``on_ms``, then is
silent for ``off_ms``; the periods are aligned to the wall clock (every period starts at a multiple of
``on_ms + off_ms`` since the epoch), so all senders on the machine burst at the same moments.

* TCP: ``flows`` connections, each writing as fast as the kernel takes data during a burst, with a small send
  buffer (64 KiB) so that a burst ends close to when the sender stops writing instead of draining a large buffer
  into the pause.
* UDP: ``flows`` sockets, each sending 1400-byte datagrams at ``rate`` bits/s during a burst (paced per
  millisecond).

The receiver counts the bytes it got and, on SIGINT or SIGTERM, writes a JSON report in the shape of iperf3's
server report (``end.sum_received.bits_per_second`` and ``seconds``, from the first byte received to the stop), so
the testbed reads a bursty flow's goodput as it reads iperf3's (:func:`testbed.run.background_goodput`).
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import sys
import threading
import time
from pathlib import Path

__all__ = ["main", "in_burst"]

CHUNK = 16 * 1024
DATAGRAM = 1400
SNDBUF = 64 * 1024


def in_burst(now: float, on_s: float, off_s: float) -> float:
    """Seconds left in the current burst at wall-clock time ``now`` (0 when in a pause)."""
    phase = now % (on_s + off_s)
    return on_s - phase if phase < on_s else 0.0


def _sleep_to_burst(on_s: float, off_s: float, stop: threading.Event) -> float:
    """Wait until a burst runs; the seconds left in it."""
    while not stop.is_set():
        now = time.time()
        left = in_burst(now, on_s, off_s)
        if left > 0:
            return left
        stop.wait(on_s + off_s - now % (on_s + off_s))
    return 0.0


def _send_tcp(host: str, port: int, on_s: float, off_s: float, stop: threading.Event) -> None:
    sock = socket.create_connection((host, port), timeout=30)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SNDBUF)
    sock.settimeout(1.0)
    data = memoryview(bytes(CHUNK))
    try:
        while not stop.is_set():
            left = _sleep_to_burst(on_s, off_s, stop)
            end = time.monotonic() + left
            while time.monotonic() < end and not stop.is_set():
                try:
                    sock.send(data)
                except (TimeoutError, socket.timeout):
                    continue
    finally:
        sock.close()


def _send_udp(host: str, port: int, rate_bps: float, on_s: float, off_s: float, stop: threading.Event) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    data = bytes(DATAGRAM)
    per_ms = rate_bps / 8 / DATAGRAM / 1000.0
    try:
        while not stop.is_set():
            left = _sleep_to_burst(on_s, off_s, stop)
            start = time.monotonic()
            sent = 0
            while not stop.is_set():
                elapsed = time.monotonic() - start
                if elapsed >= left:
                    break
                due = int((elapsed * 1000.0 + 1.0) * per_ms)
                while sent < due:
                    try:
                        sock.sendto(data, (host, port))
                    except OSError:  # a full socket buffer or an unreachable moment: the burst goes on
                        pass
                    sent += 1
                time.sleep(0.001)
    finally:
        sock.close()


def send(host: str, port: int, flows: int, on_ms: float, off_ms: float, udp: bool, rate_bps: float) -> int:
    stop = threading.Event()
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, lambda *_: stop.set())
    on_s, off_s = on_ms / 1000.0, off_ms / 1000.0
    if udp:
        threads = [threading.Thread(target=_send_udp, args=(host, port, rate_bps, on_s, off_s, stop), daemon=True)
                   for _ in range(flows)]
    else:
        threads = [threading.Thread(target=_send_tcp, args=(host, port, on_s, off_s, stop), daemon=True)
                   for _ in range(flows)]
    for t in threads:
        t.start()
    while not stop.is_set() and any(t.is_alive() for t in threads):
        stop.wait(0.2)
    stop.set()
    for t in threads:
        t.join(timeout=2)
    return 0


class _Count:
    def __init__(self) -> None:
        self.bytes = 0
        self.first: float | None = None
        self.lock = threading.Lock()

    def add(self, n: int) -> None:
        with self.lock:
            if self.first is None:
                self.first = time.monotonic()
            self.bytes += n


def _serve_tcp_conn(conn: socket.socket, count: _Count) -> None:
    with conn:
        while True:
            try:
                b = conn.recv(65536)
            except OSError:
                return
            if not b:
                return
            count.add(len(b))


def serve(port: int, out: Path, udp: bool) -> int:
    count = _Count()
    stop = threading.Event()
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, lambda *_: stop.set())
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM if udp else socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("0.0.0.0", port))
    sock.settimeout(0.2)
    if not udp:
        sock.listen(64)
    while not stop.is_set():
        try:
            if udp:
                b, _ = sock.recvfrom(65536)
                count.add(len(b))
            else:
                conn, _ = sock.accept()
                threading.Thread(target=_serve_tcp_conn, args=(conn, count), daemon=True).start()
        except (TimeoutError, socket.timeout):
            continue
        except OSError:
            if stop.is_set():
                break
            raise
    sock.close()
    with count.lock:
        seconds = time.monotonic() - count.first if count.first is not None else 0.0
        total = count.bytes
    report = {"end": {"sum_received": {"bytes": total, "seconds": seconds,
                                       "bits_per_second": total * 8 / seconds if seconds > 0 else 0.0}},
              "generator": "testbed.onoff"}
    out.write_text(json.dumps(report))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m testbed.onoff", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="receive and count; the report on SIGINT/SIGTERM")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--udp", action="store_true")
    c = sub.add_parser("send", help="send in bursts until SIGINT/SIGTERM")
    c.add_argument("--host", required=True)
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--flows", type=int, default=1)
    c.add_argument("--on-ms", type=float, required=True)
    c.add_argument("--off-ms", type=float, required=True)
    c.add_argument("--udp", action="store_true")
    c.add_argument("--rate", type=float, default=0.0, help="UDP: bits/s per flow during a burst")
    a = ap.parse_args(argv)
    if a.cmd == "serve":
        return serve(a.port, a.out, a.udp)
    if a.on_ms <= 0 or a.off_ms <= 0 or a.flows < 1 or (a.udp and a.rate <= 0):
        print("testbed.onoff: --on-ms and --off-ms must be > 0, --flows >= 1, and UDP needs --rate > 0",
              file=sys.stderr)
        return 2
    return send(a.host, a.port, a.flows, a.on_ms, a.off_ms, a.udp, a.rate)


if __name__ == "__main__":
    sys.exit(main())

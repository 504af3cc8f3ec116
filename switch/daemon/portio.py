"""Frame I/O on real interfaces with AF_PACKET raw sockets (what BMv2 does through libpcap).

Each switch port is one ``SOCK_RAW``/``ETH_P_ALL`` socket bound to its interface, non-blocking, promiscuous
(``PACKET_MR_PROMISC``, dropped by the kernel when the socket closes).  Frames the switch itself sent come back
on a packet socket as ``PACKET_OUTGOING``; the kernel is asked not to deliver them (``PACKET_IGNORE_OUTGOING``,
Linux >= 4.20) and any that still arrive are skipped by their packet type.

Batching: :meth:`Port.recv_into` takes up to a budget of frames with one ``recvmmsg`` and :meth:`Port.send_batch`
sends a list of frames with ``sendmmsg`` (64 per system call), through the C module ``switch.daemon._portio`` that
``make setup`` builds (``setup.py``).  Without it (not built, or ``DLCP_NATIVE=0`` in the environment) the same
methods loop over ``recvfrom``/``send`` in Python: same results, more CPU per frame.

Hosts should turn off checksum and segmentation offloads on their interfaces (``ethtool -K eth0 tx off``):
otherwise frames seen here carry partial checksums or are larger than the MTU.
"""
from __future__ import annotations

import errno
import mmap
import os
import socket
import struct

try:
    from . import _portio
except ImportError:                 # not built (a pure-Python checkout): the Python loops below
    _portio = None
if os.environ.get("DLCP_NATIVE", "1") == "0":
    _portio = None

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
PACKET_IGNORE_OUTGOING = 23
PACKET_OUTGOING = 4
MAX_FRAME = 65536 + 64
RX_BATCH = 64                       # at most this many frames per recv_into (the C module's batch)


class PortError(OSError):
    pass


def parse_port_spec(spec: str) -> tuple[int, str]:
    """``PORT@IFNAME`` (BMv2's ``-i`` syntax) -> (port, ifname)."""
    port, sep, ifname = spec.partition("@")
    if not sep or not port.isdigit() or not ifname:
        raise ValueError(f"bad interface spec {spec!r}: expected PORT@IFNAME, e.g. 1@veth1")
    p = int(port)
    if not 0 <= p < 511:
        raise ValueError(f"bad interface spec {spec!r}: port {p} out of range 0..510")
    return p, ifname


class Port:
    """One switch port on one interface."""

    def __init__(self, port: int, ifname: str, *, rcvbuf: int = 4 << 20, sndbuf: int = 4 << 20):
        self.port, self.ifname = port, ifname
        try:
            ifindex = socket.if_nametoindex(ifname)
        except OSError:
            raise PortError(errno.ENODEV, f"port {port}: no interface named {ifname!r}") from None
        # protocol 0: the socket receives nothing until bind() names the interface and ETH_P_ALL (created with
        # ETH_P_ALL it would queue frames of every interface of the namespace in between)
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
            try:
                s.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
            except OSError:
                pass                                  # older kernel: the packet-type check below suffices
            s.bind((ifname, ETH_P_ALL))
            mreq = struct.pack("iHH8s", ifindex, PACKET_MR_PROMISC, 0, b"")
            s.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, mreq)
            s.setblocking(False)
        except OSError as e:
            s.close()
            raise PortError(e.errno, f"port {port} ({ifname}): {e.strerror}") from None
        self.sock = s
        self.fd = s.fileno()
        self.errors = 0                 # socket errors seen (link down, MTU change...); the port keeps working
        self._rxbuf: mmap.mmap | None = None   # recv_into's slots (C path), made on first use

    def recv_into(self, out: list[tuple[int, bytes]], budget: int = RX_BATCH) -> int:
        """Append ``(port, frame)`` for each frame received from the wire (not our own), until the socket would
        block or ``budget`` (<= RX_BATCH) frames were read; returns how many were appended.  A transient socket
        error (e.g. ENETDOWN while the interface is reconfigured) is counted in :attr:`errors` and ends the
        batch."""
        if _portio is not None:
            if self._rxbuf is None:
                # one slot of MAX_FRAME per frame; anonymous memory, so only the bytes frames touch are resident
                self._rxbuf = mmap.mmap(-1, RX_BATCH * MAX_FRAME)
            try:
                n, truncated = _portio.recv_frames(self.fd, self._rxbuf, MAX_FRAME, min(budget, RX_BATCH),
                                                   self.port, out)
            except OSError:
                self.errors += 1
                return 0
            self.errors += truncated
            return n
        got = 0
        recv = self.sock.recvfrom
        port = self.port
        for _ in range(budget):
            try:
                data, addr = recv(MAX_FRAME)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self.errors += 1
                break
            if addr[2] == PACKET_OUTGOING:
                continue
            out.append((port, data))
            got += 1
        return got

    def take_error(self) -> int:
        """Read and clear the socket's pending error (``SO_ERROR``), so poll stops reporting it; 0 if none.
        Packet sockets report transient errors (ENETDOWN when the interface goes down or is reconfigured) and
        keep working afterwards: the caller logs, counts and goes on receiving."""
        try:
            err = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        except OSError as e:
            err = e.errno or -1
        if err:
            self.errors += 1
        return err

    def send_batch(self, frames: list[bytes]) -> list[int]:
        """Send each frame of ``frames`` (``sendmmsg``, 64 per system call); returns the indices of the frames the
        kernel refused (full buffer, too large, interface down) -- normally none.  A refused frame does not stop
        the ones after it."""
        if _portio is not None:
            return _portio.send_frames(self.fd, frames)
        refused = []
        send = self.sock.send
        for i, data in enumerate(frames):
            try:
                send(data)
            except OSError:
                refused.append(i)
        return refused

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def open_ports(specs: list[tuple[int, str]]) -> dict[int, Port]:
    """Open every port or none (a failure closes the ones already opened)."""
    ports: dict[int, Port] = {}
    seen_if = {}
    try:
        for port, ifname in specs:
            if port in ports:
                raise PortError(errno.EEXIST, f"port {port} given twice")
            if ifname in seen_if:
                raise PortError(errno.EEXIST, f"interface {ifname} given twice (ports {seen_if[ifname]} and {port})")
            seen_if[ifname] = port
            ports[port] = Port(port, ifname)
    except BaseException:
        for p in ports.values():
            p.close()
        raise
    return ports

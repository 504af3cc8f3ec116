"""Frame I/O on real interfaces with AF_PACKET raw sockets (what BMv2 does through libpcap).

Each switch port is one ``SOCK_RAW``/``ETH_P_ALL`` socket bound to its interface, non-blocking, promiscuous
(``PACKET_MR_PROMISC``, dropped by the kernel when the socket closes).  Frames the switch itself sent come back
on a packet socket as ``PACKET_OUTGOING``; the kernel is asked not to deliver them (``PACKET_IGNORE_OUTGOING``,
Linux >= 4.20) and any that still arrive are skipped by their packet type.

Batching: Python has no ``recvmmsg``, so :meth:`Port.recv_batch` drains a readable socket until it would block
(up to a budget) in one call -- one poll wake-up per burst rather than per frame.

Hosts should turn off checksum and segmentation offloads on their interfaces (``ethtool -K eth0 tx off``):
otherwise frames seen here carry partial checksums or are larger than the MTU.
"""
from __future__ import annotations

import errno
import socket
import struct

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
PACKET_IGNORE_OUTGOING = 23
PACKET_OUTGOING = 4
MAX_FRAME = 65536 + 64


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
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
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

    def recv_batch(self, budget: int = 64) -> list[bytes]:
        """Frames received from the wire (not our own), until the socket would block or ``budget`` is spent."""
        out = []
        recv = self.sock.recvfrom
        for _ in range(budget):
            try:
                data, addr = recv(MAX_FRAME)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:             # e.g. ENETDOWN while the interface is reconfigured: try again later
                self.errors += 1
                break
            if addr[2] == PACKET_OUTGOING:
                continue
            out.append(data)
        return out

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

    def send(self, data: bytes) -> bool:
        """Send one frame; False when the kernel refused it (full buffer, too large, interface down)."""
        try:
            self.sock.send(data)
            return True
        except OSError:
            return False

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

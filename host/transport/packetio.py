"""The transport's packet I/O layer: one rank's UDP socket and what reads and writes datagrams on it.

:class:`PacketSocket` binds the rank's address exclusively (a clear error naming it when taken), sizes the socket
buffers (and says when the kernel capped them), asks for UDP GRO, TOS and ICMP errors, drains the socket in
batches of receive records (the C lane ``_rxlane.recv_batch`` or ``recvmsg_into``: the same records either way),
reads the peers that refused a datagram from the error queue, and writes and checks the job's keyed tags
(``wire.packet_tag``). What the datagrams mean (transfers, feedback, timers) is the endpoint's business::

    io = PacketSocket(0, ("127.0.0.1", 19400), key=job_key)
    n = io.drain()                        # records in io.recs[:n]: position in io.rxbuf, bytes, TOS, GRO, source
    io.tag(buf, nbytes)                   # before sending buf[:nbytes]
    io.tag_ok(io.rxmv[s: s + ln])         # on receipt
    for addr in io.refused(): ...         # peers whose port was unreachable
    io.close()
"""

from __future__ import annotations

import errno
import fcntl
import logging
import socket
import struct
import sys
from typing import Any, Callable, Iterator

import numpy as np

from host import wire

try:  # the fast lanes in C, built by `pip install` (setup.py); without them every packet takes the Python path
    from host.transport import _rxlane, _txlane
except ImportError as _e:  # pragma: no cover - only a broken install gets here
    _rxlane = _txlane = None
    logging.getLogger(__name__).warning("dlcp: C fast lanes not built (%s): using the Python paths only", _e)

__all__ = ["PacketSocket", "AddressInUse", "bind_exclusive", "packet_tag", "path_mtu", "src_key", "norm_addr",
           "unrefused", "ICMP_ERRNOS", "MAX_DGRAM", "RX_BATCH", "RX_BATCH_BYTES", "SOL_UDP", "UDP_SEGMENT", "UDP_GRO"]

log = logging.getLogger("host.transport")

# --- segmentation offload (Linux UDP GSO/GRO, as QUIC stacks use them) -------------------------------------------
#: A send of equal-size datagrams may be one ``sendmsg`` whose UDP_SEGMENT control message tells the kernel where
#: to cut; the receive side asks for UDP_GRO so the kernel may hand back runs of same-size datagrams of one flow as
#: one buffer (the control message gives the segment size).
SOL_UDP, UDP_SEGMENT, UDP_GRO = 17, 103, 104
MAX_DGRAM = 1 << 16  # a receive slot: the largest UDP payload, or a GRO buffer
RX_BATCH = 64  # receives drained per call (more only delays the ACKs of the first ones)
RX_BATCH_BYTES = 192 << 10  # ... or this many bytes
RX_BUF = RX_BATCH_BYTES + MAX_DGRAM

_IP_RECVERR = 11
_SOCK_EE = struct.Struct("=IBBBxII")  # struct sock_extended_err: errno, origin, type, code, info, data
#: errnos an ICMP error about an earlier datagram makes the socket's next call return (with IP_RECVERR)
ICMP_ERRNOS = frozenset((errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN))
_SOCK_BUF_FORCE = {socket.SO_RCVBUF: 33, socket.SO_SNDBUF: 32}  # SO_RCVBUFFORCE, SO_SNDBUFFORCE
_TAG_AT, _HL = wire.TAG_AT, wire.HEADER_LEN
_SIOCOUTQ = 0x5411  # bytes a UDP socket has queued in the host (sk_wmem_alloc: the qdisc, the device), as TIOCOUTQ
# A learned send-buffer ceiling (PacketSocket.learn_queue_drop) keeps room for the GSO buffer a send may add past it
# (the kernel admits a send while the queued bytes are below SO_SNDBUF), and never goes below _SEND_CAP_MIN
_GSO_TRUESIZE = 72 << 10
_SEND_CAP_MIN = 64 << 10

#: ``packet_tag(key, header, payload)``: the keyed tag of a datagram (its header's tag field not covered), in C
#: when the send lane is built; the Python reference otherwise.
packet_tag: Callable[[bytes, Any, Any], int] = (
    _txlane.packet_tag if _txlane is not None else
    (lambda key, header, payload: wire.packet_tag(key, bytes(header[:_HL]) + bytes(payload))))


class AddressInUse(OSError):
    """The rank's address is bound by another socket (another job or endpoint on this host)."""


def bind_exclusive(local_addr: tuple[str, int]) -> socket.socket:
    """A UDP socket bound to ``local_addr`` exclusively: no SO_REUSEADDR/SO_REUSEPORT, so a second job on this host
    cannot take this one's datagrams; a taken address raises :class:`AddressInUse` naming it. Port 0: a free port
    the kernel picks (``getsockname()`` says which), which is how jobs on one host never collide: the backend binds
    one before its rendezvous and publishes what it got."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.bind(local_addr)
    except OSError as e:
        sock.close()
        where = f"{local_addr[0]}:{local_addr[1]}"
        if e.errno == errno.EADDRINUSE:
            raise AddressInUse(e.errno, f"address {where} is already in use (another DLCP job or endpoint on "
                               "this host has bound it; give this job other addresses or another port)") from e
        raise
    return sock


def path_mtu(local: str, peers: list[str]) -> int:
    """The smallest path MTU from address ``local`` to every peer address (the kernel's IP_MTU on a connected UDP
    socket), at most 65535; 1500 for a peer the kernel cannot tell about. Every peer counts, not just one: the
    route to one's own address is the loopback (MTU 65536), which would make a host send datagrams its real links
    must fragment."""
    mtu = 65535
    for host in peers:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.bind((local, 0))
            s.connect((host, 9))  # no packet is sent: connect only makes the kernel pick the route
            mtu = min(mtu, int(s.getsockopt(socket.IPPROTO_IP, 14)))  # 14 = IP_MTU
        except OSError:
            mtu = min(mtu, 1500)
        finally:
            s.close()
    return mtu


def unrefused(fn: Callable, *args) -> Any:
    """``fn(*args)`` (a send), once more if it failed with an ICMP errno: with IP_RECVERR the kernel reports an
    earlier datagram's ICMP error (port or host unreachable) on the socket's next call, and this datagram was not
    sent. (Which peer refused is read from the error queue, :meth:`PacketSocket.refused`; an error of this
    datagram itself fails again.)"""
    try:
        return fn(*args)
    except OSError as e:
        if e.errno not in ICMP_ERRNOS:
            raise
        return fn(*args)


def norm_addr(a: Any, port: int) -> tuple[str, int]:
    """An ``addr_map`` entry (``"host"`` or ``("host", port)``) as ``(IPv4 address, port)``."""
    if isinstance(a, str):
        host, p = a, port
    else:
        host, p = a[0], int(a[1])
    return socket.gethostbyname(host), p


def src_key(addr: tuple[str, int]) -> int:
    """A receive record's source as one integer, as ``_rxlane.recv_batch`` reports it: IPv4 address << 16 | port."""
    return int.from_bytes(socket.inet_aton(addr[0]), "big") << 16 | addr[1]


def set_sock_buf(sock: socket.socket, opt: int, size: int) -> int:
    """Set SO_RCVBUF or SO_SNDBUF to ``size``, forced past the sysctl maximum when the process may (root); returns
    the usable size the kernel granted (Linux reports twice the usable size, bookkeeping included), which is less
    than ``size`` when an unprivileged process met the sysctl cap."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SOCK_BUF_FORCE[opt], size)
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, opt, size)
    return sock.getsockopt(socket.SOL_SOCKET, opt) // 2


class PacketSocket:
    """One rank's bound UDP socket, its receive buffer and records, and the job's tag key."""

    def __init__(self, rank: int, local_addr: tuple[str, int], *, sock_buf: int = 32 << 20, send_buf: int = 1 << 20,
                 tos: int = 0, offload: bool = True, native: bool = True, key: bytes | None = None,
                 socket_wrapper: Callable[[socket.socket], Any] | None = None, sock: socket.socket | None = None):
        """Bind ``local_addr`` (:func:`bind_exclusive`: a second job on this host cannot take this one's
        datagrams; its bind fails with :class:`AddressInUse`), or take ``sock``, a UDP socket already bound to it
        by :func:`bind_exclusive` (the backend binds a free port before its rendezvous). ``tos``: the socket's
        default IP TOS (control messages); ``offload``: ask for UDP GRO; ``native``: drain with the C lane;
        ``key``: the job's tag key (None: unkeyed); ``socket_wrapper``: what sends go through (fault injection)."""
        if key is not None and (not isinstance(key, bytes) or len(key) != wire.KEY_LEN):
            raise ValueError(f"key must be {wire.KEY_LEN} bytes or None")
        if sock is not None and sock.getsockname() != tuple(local_addr):
            raise ValueError(f"the socket given is bound to {sock.getsockname()}, not to {tuple(local_addr)}")
        self.rank, self.local_addr, self.key = rank, local_addr, key
        self.sock = sock = sock if sock is not None else bind_exclusive(local_addr)
        #: socket buffers the kernel capped below what was asked: {"SO_RCVBUF": (asked, granted), ...}
        self.capped: dict[str, tuple[int, int]] = {}
        for name, opt, size in (("SO_RCVBUF", socket.SO_RCVBUF, sock_buf), ("SO_SNDBUF", socket.SO_SNDBUF, send_buf)):
            got = set_sock_buf(sock, opt, size)
            if got < size:
                self.capped[name] = (size, got)
                log.warning("dlcp rank %d: %s is %d bytes, %d were asked for (capped by net.core.%s; run as root or "
                            "raise the sysctl): bursts may overflow it", rank, name, got, size,
                            "rmem_max" if opt == socket.SO_RCVBUF else "wmem_max")
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
        # ICMP errors (port unreachable: the peer's socket is closed, its process ended) queued for refused()
        sock.setsockopt(socket.IPPROTO_IP, _IP_RECVERR, 1)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
        try:
            sock.setsockopt(socket.IPPROTO_IP, 10, 0)  # IP_MTU_DISCOVER = IP_PMTUDISC_DONT: never set DF
        except OSError:  # pragma: no cover
            pass
        sock.setblocking(False)
        if offload:
            try:
                sock.setsockopt(SOL_UDP, UDP_GRO, 1)
            except OSError:  # pragma: no cover - kernels before 5.0
                pass
        self.tx = socket_wrapper(sock) if socket_wrapper else sock
        self.native_rx = native and _rxlane is not None
        self.rxbuf = bytearray(RX_BUF)
        self.rxmv = memoryview(self.rxbuf)
        #: one row per receive record of a batch: position in rxbuf, bytes, TOS, GRO segment size, source key
        self.recs = np.zeros((RX_BATCH, 5), np.int64)
        #: the SO_SNDBUF ceiling learned from a drop in this host's own egress queue (None: none learned), see
        #: :meth:`learn_queue_drop`; every later :meth:`set_send_buf` stays below it
        self.send_cap: int | None = None
        self._send_buf = send_buf

    def fileno(self) -> int:
        return self.sock.fileno()

    def set_send_buf(self, size: int) -> None:
        """Resize SO_SNDBUF, never past :attr:`send_cap` (a closed socket: nothing to do)."""
        self._send_buf = size
        if self.send_cap is not None:
            size = min(size, self.send_cap)
        try:
            set_sock_buf(self.sock, socket.SO_SNDBUF, size)
        except OSError:
            pass

    def queued_bytes(self) -> int:
        """The bytes this socket has queued in the host now (qdisc and device, kernel bookkeeping included:
        ``SIOCOUTQ``, what SO_SNDBUF is compared with); 0 for a closed socket."""
        try:
            return int.from_bytes(fcntl.ioctl(self.sock.fileno(), _SIOCOUTQ, bytes(4)), sys.byteorder)
        except (OSError, ValueError):
            return 0

    def learn_queue_drop(self) -> int | None:
        """A queue on this host (a tbf or htb qdisc, a device queue) dropped a send (ENOBUFS): learn its depth.

        The send buffer is this socket's TCP Small Queues (``Options.send_buf``): while it is smaller than the
        host's own egress queue, a full queue makes the sender wait for room (``Transmitter.full``) instead of
        dropping. A drop shows that queue is shallower than the buffer, and how deep it is: what this socket had
        queued when the drop was reported (:meth:`queued_bytes`). From then on SO_SNDBUF stays at three quarters of
        that depth, less the GSO buffer a send may add past it (the kernel doubles what is set), so the queue no
        longer overflows: the sender is held back by the buffer, as TCP is, rather than by losses it must detect and
        resend. Only ever lowered (a host's qdiscs do not grow under a running job); never below
        ``_SEND_CAP_MIN``. Returns the new ceiling, or None when it did not change."""
        cap = max(_SEND_CAP_MIN, (self.queued_bytes() * 3 // 4 - _GSO_TRUESIZE) // 2)
        if self.send_cap is not None and cap >= self.send_cap:
            return None
        self.send_cap = cap
        self.set_send_buf(self._send_buf)
        return cap

    def drain(self) -> int:
        """Receive until the socket is empty or the batch is full; returns the number of records in ``recs``
        (raises OSError for a socket error other than an ICMP report, which :meth:`refused` reads)."""
        if self.native_rx:
            return _rxlane.recv_batch(self.sock.fileno(), self.rxbuf, self.recs, RX_BATCH, RX_BATCH_BYTES, MAX_DGRAM)
        recv, mv, rows = self.sock.recvmsg_into, self.rxmv, self.recs
        ancsize = 2 * socket.CMSG_SPACE(4)
        pos = n = 0
        try:
            while pos < RX_BATCH_BYTES and n < RX_BATCH:
                try:
                    nbytes, anc, _fl, addr = recv([mv[pos: pos + MAX_DGRAM]], ancsize)
                except BlockingIOError:
                    raise
                except OSError as e:  # an ICMP error reported (see refused()): receive on
                    if e.errno not in ICMP_ERRNOS:
                        raise
                    continue
                tos = seg = 0
                for lvl, typ, data in anc:
                    if typ == socket.IP_TOS and lvl == socket.IPPROTO_IP:
                        tos = data[0]
                    elif typ == UDP_GRO and lvl == SOL_UDP:
                        seg = int.from_bytes(data[:4], sys.byteorder)
                rows[n] = (pos, nbytes, tos, seg, src_key(addr))
                pos += nbytes
                n += 1
        except BlockingIOError:
            pass
        return n

    def refused(self) -> Iterator[tuple[str, int]]:
        """The addresses whose port refused an earlier datagram (ICMP port unreachable), from the socket's error
        queue; other queued errors are read and dropped."""
        while True:
            try:
                _data, anc, _flags, addr = self.sock.recvmsg(64, 512, socket.MSG_ERRQUEUE)
            except OSError:  # (BlockingIOError: the queue is empty)
                return
            err = 0
            for lvl, typ, data in anc:
                if lvl == socket.IPPROTO_IP and typ == _IP_RECVERR and len(data) >= _SOCK_EE.size:
                    err = _SOCK_EE.unpack_from(data)[0]
            if err == errno.ECONNREFUSED and addr:
                yield addr

    def tag(self, buf, nbytes: int) -> None:
        """Write the keyed tag of the datagram ``buf[:nbytes]`` into its header (an unkeyed job: nothing)."""
        if self.key is not None:
            mv = memoryview(buf)
            mv[_TAG_AT:_HL] = packet_tag(self.key, mv[:_HL], mv[_HL:nbytes]).to_bytes(8, "big")

    def tag_ok(self, dgram) -> bool:
        """Whether the datagram (at least a header long) carries the right keyed tag (always, unkeyed)."""
        if self.key is None:
            return True
        return packet_tag(self.key, dgram[:_HL], dgram[_HL:]) == int.from_bytes(dgram[_TAG_AT:_HL], "big")

    def close(self) -> None:
        self.sock.close()

"""The send side of the socket: data bursts (with UDP segmentation offload) and control messages, and what happens
when the host's send buffer is full.

What: :class:`Transmitter` writes a burst the sender chose (``Sender.pick_burst``) to the socket, runs of
consecutive, equal-size, same-TOS packets as one GSO ``sendmsg`` (or one call of the C send lane,
``_txlane.send_run``, which also writes each packet's keyed tag); it sends the receiver's and the liveness checks'
control messages (ACK, NACK, DONE, probes, DEAD notices) from one buffer, :attr:`Transmitter.ctl_buf`, tagging
each. Why a module: everything that writes to the socket shares one piece of state, whether the send buffer is
full (:attr:`Transmitter.full`), and the I/O thread sleeps on it.

Promises: a data packet the kernel refused for a full buffer was never on the wire, and goes back to its sender
(``Sender.unsend``), to leave when ``select`` says the socket is writable; a control message that meets a full
buffer waits in a backlog that goes out, in order, before any more data (an ACK or DONE lost here would stall the
peer until its timeout); a kernel that refuses UDP_SEGMENT turns GSO off for good and the run is sent again one
datagram at a time. A drop in a queue of this host (ENOBUFS) counts as sent and lost (``tx_local_drops``) and
caps the send buffer below that queue's depth (``PacketSocket.learn_queue_drop``). Send errors are counted
(``send_errors``), never raised.
"""

from __future__ import annotations

import errno
import logging
import socket
import struct
import threading
from collections import deque
from typing import Callable

from host import wire
from host.transport.packetio import ICMP_ERRNOS, SOL_UDP, UDP_SEGMENT, PacketSocket, packet_tag, unrefused
from host.transport.stats import Counters

__all__ = ["Transmitter", "GSO_MAX_SEGS"]

log = logging.getLogger("host.transport")

# --- segmentation offload (Linux UDP GSO, as QUIC stacks use it) ------------------------------------------------
#: A send of up to ``GSO_MAX_SEGS`` equal-size datagrams is one ``sendmsg`` whose UDP_SEGMENT control message
#: tells the kernel where to cut (the receive side's UDP GRO is the packet I/O layer's, ``packetio.py``). The wire
#: is unchanged: every datagram on the link is an ordinary DLCP packet (on an interface with offloads off the kernel
#: cuts the buffer before the link). A kernel that refuses UDP_SEGMENT makes the endpoint fall back to one datagram
#: per sendmsg.
GSO_MAX_SEGS = 64
_GSO_MAX_BYTES = 65000
_CTL_BACKLOG = 4096  # control messages held while the send buffer is full


class Transmitter:
    """Writes data bursts and control messages to the endpoint's socket (``io``)."""

    def __init__(self, rank: int, io: PacketSocket, counters: Counters, lock: threading.Lock, *, gso: bool,
                 fast_tx: Callable | None, key: bytes | None, unsend: Callable, closed: Callable[[], bool]):
        """``fast_tx``: the C send lane's ``send_run`` (None: Python sendmsg); ``unsend(o, seqs)``: hand a refused
        burst tail back to the sender; ``closed()``: whether the endpoint is closing (a failed send then ends the
        burst quietly)."""
        self.rank, self._io, self._sock, self._tx = rank, io, io.sock, io.tx
        self._c, self._lock = counters.c, lock
        self.gso, self._fast_tx, self._key, self._unsend, self._closed = gso, fast_tx, key, unsend, closed
        self.ctl_buf = bytearray(wire.HEADER_LEN + 9000)  # where a control message is written before send_ctl
        # the send buffer is full (Options.send_buf): nothing more is sent until select says the socket is writable
        # (half the buffer free), and control messages that met the full buffer wait here, to go before any data
        self.full = False
        self.ctl_backlog: deque[tuple[bytes, tuple[str, int]]] = deque()
        self._ip4: dict[str, bytes] = {}

    # --- control messages (under the endpoint's lock) ---------------------------------------------------------

    def send_ctl(self, addr: tuple[str, int], nbytes: int) -> None:
        """Send the control message in ``ctl_buf[:nbytes]``; behind a full send buffer it waits in the backlog
        (an ACK or DONE lost here would stall the peer until its timeout). Every control message goes out here, so
        this is where it gets its keyed tag."""
        self._io.tag(self.ctl_buf, nbytes)
        if self.ctl_backlog:  # keep the order: behind the ones already waiting
            self._queue_ctl(bytes(self.ctl_buf[:nbytes]), addr)
            return
        try:
            unrefused(self._tx.sendmsg, [memoryview(self.ctl_buf)[:nbytes]], [], 0, addr)
            self._c["tx_datagrams"] += 1
        except BlockingIOError:
            self._queue_ctl(bytes(self.ctl_buf[:nbytes]), addr)
        except OSError:
            self._c["send_errors"] += 1

    def send_msg(self, msg: bytes, addr: tuple[str, int]) -> None:
        """Send a whole control message built elsewhere (a DEAD notice) as :meth:`send_ctl` does."""
        n = len(msg)
        self.ctl_buf[:n] = msg
        self.send_ctl(addr, n)

    def _queue_ctl(self, msg: bytes, addr: tuple[str, int]) -> None:
        if len(self.ctl_backlog) >= _CTL_BACKLOG:
            self._c["send_errors"] += 1  # (only a socket that stays full for thousands of messages gets here)
            return
        self.ctl_backlog.append((msg, addr))
        self.full = True

    def flush_ctl(self) -> None:
        """Send the control backlog, oldest first, until it is empty or the buffer is full again."""
        q, c = self.ctl_backlog, self._c
        while q:
            msg, addr = q[0]
            try:
                unrefused(self._tx.sendmsg, [msg], [], 0, addr)
                c["tx_datagrams"] += 1
            except BlockingIOError:
                self.full = True
                return
            except OSError:
                c["send_errors"] += 1
            q.popleft()

    # --- data (outside the lock) -------------------------------------------------------------------------------

    def transmit(self, job) -> None:
        """Send a burst outside the lock: runs of consecutive, equal-size, same-TOS packets as one GSO send."""
        o, addr, seqs, nbytes = job
        hdr, pay, offs, lens, elig, anc = o.hdr, o.payload, o.offs, o.lens, o.elig, o.anc
        hl = wire.HEADER_LEN
        with self._lock:  # counted before they leave, so the stats never lag a completion the peer reports
            c = self._c
            c["tx_datagrams"] += len(seqs)
            c["tx_data_packets"] += len(seqs)
            c["tx_bytes"] += nbytes + hl * len(seqs)
        gso_sends = 0
        fast, key = self._fast_tx, self._key
        i, n = 0, len(seqs)
        while i < n:
            s = seqs[i]
            size = lens[s]
            j = i + 1
            if self.gso:
                e0 = elig[s]
                lim = min(n, i + GSO_MAX_SEGS, i + _GSO_MAX_BYTES // (hl + size))
                while j < lim and seqs[j] == seqs[j - 1] + 1 and lens[seqs[j - 1]] == size \
                        and lens[seqs[j]] <= size and elig[seqs[j]] == e0:
                    j += 1
            gso = j > i + 1
            if fast is not None:
                ip4 = self._ip4.get(addr[0])
                if ip4 is None:
                    ip4 = self._ip4[addr[0]] = socket.inet_aton(addr[0])
                call = (fast, (self._sock.fileno(), hdr, pay, offs, lens, seqs, i, j, ip4, addr[1], o.tos[elig[s]],
                               hl + size if gso else 0, key))
            else:
                bufs = []
                for t in seqs[i:j]:
                    off = offs[t]
                    h, p = hdr[t * hl: t * hl + hl], pay[off: off + lens[t]]
                    if key is not None:
                        h[wire.TAG_AT:] = packet_tag(key, h, p).to_bytes(8, "big")
                    bufs.append(h)
                    bufs.append(p)
                a = anc[elig[s]]
                ancdata = a + [(SOL_UDP, UDP_SEGMENT, struct.pack("=H", hl + size))] if gso else a
                call = (self._tx.sendmsg, (bufs, ancdata, 0, addr))
            ok = self._sendmsg(*call, gso)
            if ok is None:  # the send buffer is full: the rest goes back to be sent when there is room
                self._unsend(o, seqs[i:])
                break
            if not ok:
                if self._closed():
                    return
                if j > i + 1 and self.gso is False:
                    continue  # GSO was refused: send this run again one datagram at a time
            elif j > i + 1:
                gso_sends += 1
            i = j
        else:
            if o.copies > 1 and n == 1:  # (a small one-packet transfer: Options.small_copies)
                self._copies(o, call, o.copies - 1, nbytes + hl)
        if gso_sends:
            with self._lock:
                self._c["tx_gso_sends"] += gso_sends

    def _copies(self, o, call: tuple, k: int, size: int) -> None:
        """Send the one datagram ``call`` sent ``k`` more times (``Options.small_copies``), counted as they leave; a
        full send buffer or an error ends them (the copies are redundancy: the packet itself left)."""
        sent = 0
        for _ in range(k):
            if not self._sendmsg(*call, False):
                break
            sent += 1
        if sent:
            with self._lock:
                c = self._c
                c["tx_datagrams"] += sent  # (not tx_data_packets: the packets, each counted once)
                c["tx_bytes"] += sent * size
                c["tx_copies"] += sent

    def _sendmsg(self, fn: Callable, args: tuple, gso: bool) -> bool | None:
        """One send, ``fn(*args)`` (the socket's sendmsg, or the send lane's ``send_run``). None when the socket
        buffer is full (nothing sent; ``full`` is set), False when it failed (counted); a refused segmentation
        offload (a ``gso`` send failing) turns GSO off for good (the caller resends one by one)."""
        try:
            unrefused(fn, *args)
            return True
        except BlockingIOError:
            self.full = True
            return None
        except OSError as e:
            if e.errno == errno.ENOBUFS:
                # A queue on this host (a qdisc: tbf, htb) dropped the datagram(s): congestion, not a refused
                # offload. They count as sent and lost, as a drop on the wire would (loss detection resends what
                # must arrive); GSO stays on. (With IP_RECVERR the kernel reports such drops to the sender.)
                # The send buffer is then capped below that queue's depth (PacketSocket.learn_queue_drop): later
                # sends wait for room in it, as TCP's do, instead of being dropped.
                with self._lock:
                    self._c["tx_local_drops"] += 1
                cap = self._io.learn_queue_drop()
                if cap is not None:
                    log.info("dlcp rank %d: a queue on this host dropped a send; send buffer capped at %d bytes "
                             "(SO_SNDBUF) to stay below its depth", self.rank, cap)
                return True
            if gso and self.gso and e.errno not in ICMP_ERRNOS:
                self.gso = False
                log.info("dlcp rank %d: UDP segmentation offload refused (%s); sending datagrams one by one",
                         self.rank, e)
                return False
            with self._lock:
                self._c["send_errors"] += 1
            return False

"""The transport's public types: its options, its error, what a send and a receive hand back.

Everything a caller of :class:`host.transport.Endpoint` touches besides the endpoint itself lives here, so that the
stages behind it (``sender``, ``receiver``, ``liveness``) and their tests use the same types without importing the
endpoint. Promises: a :class:`SendHandle` or :class:`RecvHandle` is finished exactly once, with stats or with a
:class:`TransportError` naming the peer; a :class:`LossReport` lists exactly the element ranges that were
zero-filled.
"""

from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from host import wire
from host.policy import LayerMagnitudePolicy, Policy
from host.transport.cc import CCParams

__all__ = ["TransportError", "Options", "LossReport", "RecvResult", "SendHandle", "RecvHandle"]


class TransportError(RuntimeError):
    """A transfer failed: a peer stopped answering, a receive timed out, the endpoint closed. ``peer`` is the rank."""

    def __init__(self, message: str, peer: int | None = None):
        super().__init__(message)
        self.peer = peer


@dataclass
class Options:
    """Endpoint configuration; every time is in seconds."""

    mtu: int = 1500  # path MTU: chunking makes every datagram fit (1500, 9000, ...)
    port: int = wire.UDP_PORT  # port for addr_map entries given without one
    policy: Policy = field(default_factory=LayerMagnitudePolicy)
    recv_timeout: float = 30.0  # default timeout of recv()
    peer_timeout: float = 5.0  # a peer with outstanding sends that sends no feedback for this long fails them
    nack_idle: float = 0.005  # receiver: idle time after which missing needed packets are NACKed (before LAST)
    nack_interval: float = 0.002  # first re-NACK interval; doubles to nack_interval_max while nothing arrives
    nack_interval_max: float = 0.1
    ack_every: int = 16  # receiver: ACK after this many data packets (and on CE change, LAST, socket drained)
    # receiver: when a receive pass ends with fewer than ack_min new packets of a transfer since its last ACK, that
    # ACK waits up to ack_hold seconds for more (0: every pass ends with an ACK). On slow links packets arrive one
    # per wake-up, and an ACK per packet cost both ends a wake-up each (docs/transport.md, ACK hold)
    ack_hold: float = 0.003
    ack_min: int = 4
    # I/O thread: after a receive pass of at most rx_hold_records records while a posted transfer is mid-arrival,
    # sleep through arrivals for up to rx_hold seconds (callers' work and the wake-up timer still wake it), so the
    # next pass takes what came meanwhile at once (0: wake for every datagram). docs/transport.md, Receive hold
    rx_hold: float = 0.0015
    rx_hold_records: int = 8
    # both holds apply to a transfer only while its packets come at least hold_gap seconds apart (measured over
    # each run of HOLD_WINDOW packets): a slow link, where each wake-up would take one packet (200 us: 60 Mb/s at
    # MTU 1500, 360 Mb/s at 9000). A fast link never waits on a hold. 0: hold whatever the rate
    hold_gap: float = 200e-6
    burst: int = 32  # max packets the progress thread sends per pick
    tick: float = 0.001  # timer granularity: the stages' timers run at most this often (when one is due)
    cc: CCParams | None = None  # None: defaults with mss from the MTU
    sock_buf: int = 32 << 20  # SO_RCVBUF (forced when root): room for bursts while the I/O thread is busy
    # SO_SNDBUF (forced when root; the kernel doubles it): the bytes this socket may have queued in the host, in the
    # qdisc and the device, as TCP Small Queues bounds a TCP socket's. Congestion windows are per peer and may
    # overshoot; a full send buffer makes the sender wait for the queue to drain instead of overflowing the host's
    # own egress queue, which drops whole GSO bursts (docs/decisions.md has the figures).
    send_buf: int = 1 << 20
    # SO_SNDBUF while data goes to two or more peers at once (send_buf again when one is left). The host's queue is
    # one FIFO every flow's packets wait in, so its depth is delay in every flow's RTT: 2 MiB is ~16 ms at 1 Gb/s,
    # past the 10 ms delay target: windows would be cut, unequally, for a queue the host built itself. Kept shallow,
    # the queue leaves the windows open and the I/O thread's round-robin over peers splits the link evenly
    # (docs/decisions.md). One peer keeps the deep buffer, which rides out the I/O thread's scheduling gaps.
    send_buf_shared: int = 256 << 10
    # data buffered for transfers nobody has called recv() for yet, their bookkeeping included (BOOK_BYTES per packet
    # the first header claims; unclaimed.py): a header's ``total`` reserves nothing beyond it
    max_staged_bytes: int = 1 << 30
    # A transfer nobody has posted a receive for is dropped with its staging this long after its last packet (or
    # after it completed): data for a receive that never comes (a peer's mistake, a stranger's packets, a rank
    # that failed before posting) does not hold the staging budget forever. Long against any compute skew between
    # ranks (a receive is normally posted within an iteration of its send); a later post_recv names the expiry.
    unposted_expiry: float = 120.0
    # A reliable send (loss bound 0) of more than this many bytes is classified a slice of this size at a time:
    # send() classifies the first slice and returns; the I/O thread classifies each next slice while the previous
    # one's packets are on the wire (magnitude classes are then octiles within each slice), so the link is not idle
    # while a large tensor is classified (docs/decisions.md). A send with drop-eligible
    # packets is classified whole (its eligible packets take the first seqs), and so is every send to a peer on a
    # loopback address (see Endpoint.__init__). 0: every send is classified whole.
    classify_slice: int = 4 << 20
    tombstones: int = 1 << 16  # completed transfers remembered (late packets get DONE again)
    # a one-packet transfer of at most COPY_BYTES of payload (a collective's loss report, a barrier's token, a scalar)
    # has its packet sent this many times back to back, each time it is sent: with no later packet to reveal its
    # loss, a lost one (or its lost DONE) waits out a retransmission timeout, 20 ms at least and far more than such
    # a message's own delivery. The receiver of any one-packet transfer sends its DONE this many times too (a copy of
    # the packet arriving later gets none of its own). 1: once (docs/transport.md, "Small messages in copies").
    small_copies: int = 2
    # close() of an endpoint with no receive pending lingers at most this long: until its own sends are DONE and
    # every peer heard from answered its BYE (needs nothing more from it: its own sends to this rank are DONE), so
    # that a DONE lost at the end of a job is repeated before the socket closes (Endpoint.close)
    linger: float = 2.0
    socket_wrapper: Callable[[socket.socket], Any] | None = None  # fault injection on the send path
    offload: bool = True  # UDP GSO/GRO when the kernel accepts them (off with a socket_wrapper)
    # the C fast lanes (host/transport/_rxlane.c, _txlane.c); False, or DLCP_NATIVE=0 in the environment: the
    # Python paths only (A/B measurements, debugging)
    native: bool = field(default_factory=lambda: os.environ.get("DLCP_NATIVE", "1") != "0")
    # with native: while one posted transfer arrives in order, or one send is in progress alone, the I/O thread
    # sleeps in the C receive lane's rx_wait, which takes the one's packets and ACKs them, and the other's
    # cumulative ACKs and sends its next bursts, with no Python per wake-up (Intake.wait); False: every
    # wake-up runs the Python loop (the twin tests hold the two equal). Off with a socket_wrapper (its sends
    # must see every ACK); it keeps ack_hold's and rx_hold's rules itself.
    native_wait: bool = True


@dataclass(frozen=True)
class LossReport:
    """What a bounded-loss receive did not get. ``lost_ranges``: element ranges [start, stop) of the flat tensor
    that never arrived and were zero-filled."""

    nelems: int
    lost_ranges: list[tuple[int, int]]

    @property
    def zero_filled(self) -> int:
        return sum(b - a for a, b in self.lost_ranges)

    @property
    def fraction(self) -> float:
        return self.zero_filled / self.nelems if self.nelems else 0.0


@dataclass(frozen=True)
class RecvResult:
    data: Any  # the out tensor/array, filled
    report: LossReport
    stats: dict[str, Any]


class SendHandle:
    """Completion of one send. ``wait()`` returns the transfer's stats or raises :class:`TransportError`."""

    def __init__(self, peer: int, transfer_id: int):
        self.peer, self.transfer_id = peer, transfer_id
        self._event = threading.Event()
        self._error: BaseException | None = None
        self.stats: dict[str, Any] = {}

    def done(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> dict[str, Any]:
        if not self._event.wait(timeout):
            raise TransportError(f"send of transfer {self.transfer_id} to rank {self.peer} not complete after "
                                 f"{timeout}s", self.peer)
        if self._error is not None:
            raise self._error
        return self.stats

    def _finish(self, stats: dict[str, Any], error: BaseException | None = None) -> None:
        self.stats, self._error = stats, error
        self._event.set()


class RecvHandle:
    """A receive posted by :meth:`Endpoint.post_recv`: the transport writes arriving packets straight into its
    ``out`` buffer from the moment it is posted. ``wait()`` blocks until the transfer completes and returns its
    :class:`RecvResult`, or raises :class:`TransportError` (a timeout abandons the receive); ``cancel()`` abandons
    it without waiting. The caller must not touch ``out`` until ``wait()`` returned."""

    def __init__(self, inc: Any, timeout: float, abandon: Callable[..., None], addr: Any):
        """``inc``: the receiver's state of the transfer (``receiver.InTransfer``); ``abandon(inc, why, count=)``
        fails it; ``addr``: the peer's address, named when the receive times out."""
        self._inc, self.timeout, self._abandon, self._addr = inc, timeout, abandon, addr
        self.peer, self.transfer_id = inc.peer, inc.tid

    def done(self) -> bool:
        return self._inc.event.is_set()

    def wait(self, timeout: float | None = None) -> RecvResult:
        """Block up to ``timeout`` seconds (default: the one given to ``post_recv``) for the transfer."""
        inc = self._inc
        timeout = self.timeout if timeout is None else timeout
        if not inc.event.wait(timeout):
            got = f"{inc.st.npackets}/{inc.st.total} packets" if inc.st else "no packet"
            if inc.rejected:
                got += f"; {inc.rejected} packets rejected, the last for {inc.reject_why}"
            self._abandon(inc, f"receive of transfer {inc.tid} from rank {inc.peer} at {self._addr} timed out "
                               f"after {timeout}s ({got})")
        if inc.error is not None:
            raise inc.error
        assert inc.result is not None
        return inc.result

    def cancel(self) -> None:
        """Stop receiving into ``out`` (later packets of the transfer are dropped; ``wait()`` raises)."""
        self._abandon(self._inc, f"receive of transfer {self._inc.tid} from rank {self._inc.peer} cancelled",
                      count=False)

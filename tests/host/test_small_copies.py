"""A small one-packet transfer's packet and its DONE go out in copies (``Options.small_copies``): with no later
packet to reveal its loss, a lost one would wait out a retransmission timeout (``docs/transport.md``, "Small
messages in copies"). Real endpoints on loopback; the loss is a deterministic drop on the send path."""

from __future__ import annotations

import time

import numpy as np
import pytest

from host.transport import LossySocket, Options
from host.wire import MsgType


def _drop_once(kind: int, tid: int):
    """A drop rule: the first datagram of message type ``kind`` naming transfer ``tid``, once."""
    dropped = []

    def rule(first: bytes) -> bool:
        if not dropped and first[0] & 0x0F == kind and int.from_bytes(first[12:16], "big") == tid:
            dropped.append(1)
            return True
        return False
    return rule, dropped


@pytest.mark.parametrize("lost", ["data", "done"])
@pytest.mark.parametrize("copies", [2, 1])
def test_a_lost_small_message_or_its_done_is_covered_by_its_copy(make_endpoints, lost, copies):
    """The packet of a one-packet transfer (a collective's loss report: 65 int64) or its DONE is dropped once. With
    copies the send completes without a timeout, a tail probe or a retransmission; with one copy (the control) the
    same drop is recovered only by a timeout, an RTO floor after the send. The data arrives exactly once either
    way."""
    tid = 4242
    rule, dropped = _drop_once(MsgType.DATA if lost == "data" else MsgType.CONTROL, tid)
    wrap = Options(small_copies=copies, socket_wrapper=lambda s: LossySocket(s, drop_fn=rule))
    plain = Options(small_copies=copies)
    a, b = make_endpoints(2, per_rank={0: wrap if lost == "data" else plain, 1: wrap if lost == "done" else plain})
    x = np.arange(65, dtype=np.int64) * 7
    out = np.zeros_like(x)
    rh = b.post_recv(0, tid, out, timeout=5)
    t0 = time.monotonic()
    h = a.send(1, x, transfer_id=tid)
    rh.wait()
    h.wait(5)
    took = time.monotonic() - t0
    sa, sb = a.stats(), b.stats()
    assert dropped and np.array_equal(out, x)
    assert sb["transfers_received"] == 1 and sa["transfers_sent"] == 1
    floor = a._sender.peer(1).cc.p.rto_min
    if copies == 2:
        assert sa["rto_timeouts"] == 0 and sa["tail_probes"] == 0 and sa["retransmissions"] == 0
        assert sa["tx_copies"] == 1 and sb["dones_sent"] == 2
    else:
        assert sa["tx_copies"] == 0 and sb["dones_sent"] >= (2 if lost == "done" else 1)  # (a lost one and the
        # probe's)
        assert sa["rto_timeouts"] + sa["tail_probes"] >= 1 and took >= floor, took


def test_only_small_one_packet_transfers_are_copied(make_endpoints):
    """A transfer of more than one packet, or one packet of more than COPY_BYTES, goes out once; DONE copies go
    only to one-packet transfers."""
    from host.transport.sender import COPY_BYTES

    a, b = make_endpoints(2, Options(mtu=9000))
    for tid, n in ((1, COPY_BYTES // 4), (2, COPY_BYTES // 4 + 1), (3, 20000)):
        x = np.ones(n, np.float32)
        rh = b.post_recv(0, tid, np.zeros_like(x), timeout=5)
        a.send(1, x, transfer_id=tid).wait(5)
        rh.wait()
    sa, sb = a.stats(), b.stats()
    assert sa["tx_copies"] == 1  # transfer 1 only
    assert sb["dones_sent"] == 2 + 2 + 1  # (transfers 1 and 2 are one packet each at MTU 9000, 3 is not)

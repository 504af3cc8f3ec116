"""The receiver stage (host.transport.receiver) on its own, without an Endpoint or its I/O thread: datagrams of a
bounded-loss transfer written into the packet layer's receive buffer go to ``Receiver.on_data`` as the intake
would hand them; the transfer completes once every protected packet is in, the dropped drop-eligible packets'
elements are zero-filled and reported exactly, and the sender's real socket gets the DONE."""

from __future__ import annotations

import socket
import threading
import time

import numpy as np
import pytest

from host import wire
from host.policy import LayerMagnitudePolicy
from host.transport.api import Options
from host.transport.chunking import chunk_elems, payload_capacity, plan_packets
from host.transport.control import CTL, CTL_DONE, HDR, W_RANK, W_TID, W_TOTAL
from host.transport.packetio import PacketSocket
from host.transport.receiver import Receiver
from host.transport.reassembly import merge_ranges
from host.transport.stats import Counters
from host.transport.tensors import view_tensor
from host.transport.transmit import Transmitter
from tests.host.conftest import loopback_map

JOB, NONCE, TID = 5, 0x77, 9


@pytest.mark.parametrize("seed", range(3))
def test_a_receiver_alone_completes_under_the_loss_bound_and_zero_fills_exactly_the_lost_packets(seed):
    rng = np.random.default_rng(seed)
    addrs = loopback_map(2)
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # rank 0: a plain socket that reads the DONE
    sender.bind((addrs[0], 0))
    sender.settimeout(5)
    addr_map = {0: sender.getsockname(), 1: (addrs[1], 0)}
    io = PacketSocket(1, addr_map[1], native=False)
    counters, lock = Counters(), threading.Lock()
    tx = Transmitter(1, io, counters, lock, gso=False, fast_tx=None, key=None, unsend=lambda o, seqs: None,
                     closed=lambda: False)
    opts = Options()
    rx = Receiver(1, JOB, NONCE, addr_map, opts, payload_capacity(opts.mtu), io, tx, counters, lock, dead={},
                  heard={})
    try:
        n, p = 40_000, 0.1
        x = rng.standard_normal(n).astype(np.float32)
        chunk = chunk_elems(opts.mtu, 4)
        counts = np.minimum(chunk, n - np.arange(-(-n // chunk)) * chunk)
        classes = LayerMagnitudePolicy().classify(x, counts, layer=0, loss_bound=p)
        plan = plan_packets(nelems=n, dtype=wire.DType.FLOAT32, mtu=opts.mtu, classes=classes, rank=0, job_id=JOB,
                            transfer_id=TID, nonce=NONCE)
        assert plan.eligible.any()
        dropped = plan.eligible & (rng.random(plan.total) < 0.5)
        out = np.full(n, 7.0, np.float32)
        with lock:
            inc = rx.claim(0, TID, lambda peer, tid: None)
            rx.post(inc, view_tensor(out, writable=True), None)
        raw, hdrs, hl = x.view(np.uint8), plan.headers.view(np.uint8), wire.HEADER_LEN
        order = rng.permutation(np.flatnonzero(~dropped))  # out of order, in batches of up to 40
        i = 0
        while i < len(order):
            batch = order[i: i + int(rng.integers(1, 40))]
            i += len(batch)
            pos, items = 0, []
            for s in batch.tolist():
                off, ln = int(plan.offsets[s]), int(plan.lengths[s])
                io.rxbuf[pos: pos + hl] = hdrs[s * hl: (s + 1) * hl].tobytes()
                io.rxbuf[pos + hl: pos + hl + ln] = raw[off: off + ln].tobytes()
                items.append((HDR.unpack_from(io.rxbuf, pos), pos, hl + ln, 0))
                pos += hl + ln
            with lock:
                rx.on_data((0, TID), items, time.monotonic())
        res = inc.result
        assert inc.event.is_set() and inc.error is None and res is not None
        want = merge_ranges(plan.offsets[dropped] // 4, (plan.offsets[dropped] + plan.lengths[dropped]) // 4)
        assert res.report.lost_ranges == [tuple(r) for r in want.tolist()]
        lost = np.zeros(n, bool)
        for a, b in res.report.lost_ranges:
            lost[a:b] = True
        assert (out[lost] == 0).all() and np.array_equal(out[~lost], x[~lost])
        assert res.report.fraction <= p
        kinds = []
        while not kinds or kinds[-1] != wire.MsgType.CONTROL:  # ACKs on the way, then the DONE, to the sender
            msg = sender.recv(2048)
            w = HDR.unpack_from(msg)
            kinds.append(w[0] & 0x0F)
        assert set(kinds[:-1]) <= {wire.MsgType.ACK} and w[W_RANK] == 1 and w[W_TID] == TID
        assert w[W_TOTAL] == plan.total
        assert CTL.unpack_from(msg, wire.HEADER_LEN) == (CTL_DONE, int((~dropped).sum()))
    finally:
        io.close()
        sender.close()

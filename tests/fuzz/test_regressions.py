"""Regression tests for what the fuzz campaigns found (docs/fuzzing.md, "Found"), each reproduced by hand with real
sockets: the smallest input that showed the bug, and the behaviour the fix restores."""
from __future__ import annotations

import socket

import numpy as np

from host import wire
from host.transport import Endpoint
from tests.host.conftest import loopback_map, wait_for

JOB, NONCE = 77, 0xBEEF



def test_a_refused_packet_reserves_no_staging():
    """One datagram of an unposted transfer whose payload would end past what its claimed packets can carry is
    refused (``offset``); before the fix it first sized the transfer's staging buffer to the whole staging budget
    (1 GiB), so every other early transfer's data was dropped as over budget until its receive was posted. Now it
    reserves nothing, and a genuine transfer that arrives before its receive is staged whole."""
    amap = loopback_map(3)
    rx = Endpoint(1, amap, JOB, NONCE)
    tx = Endpoint(2, amap, JOB, NONCE)
    raw = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    raw.bind((amap[0], wire.UDP_PORT))  # plays rank 0, as an impostor who knows job id and nonce
    try:
        hostile = wire.Header(dtype=wire.DType.FLOAT32, job_id=JOB, transfer_id=9, seq=5, total=60_000,
                              offset=(1 << 32) - 4000, count=2, nonce=NONCE)
        raw.sendto(hostile.pack() + bytes(8), (amap[1], wire.UDP_PORT))
        assert wait_for(lambda: rx.stats()["rejected_by_field"].get("offset") == 1)
        assert rx.stats()["staged_transfers"] == 0
        x = np.random.default_rng(1).standard_normal(500_000).astype(np.float32)  # 2 MB, before the receive
        h = tx.send(1, x, transfer_id=3)
        assert wait_for(lambda: rx.stats()["rx_bytes"] >= x.nbytes)
        s = rx.stats()
        assert s["unclaimed_dropped"] == 0 and s["staged_transfers"] == 1
        r = rx.recv(2, 3, out=np.empty_like(x), timeout=10)
        assert np.array_equal(r.data, x) and r.report.lost_ranges == []
        h.wait(10)
    finally:
        raw.close()
        tx.close()
        rx.close()

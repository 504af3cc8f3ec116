"""The keyed tag (issue 35): every packet of a keyed job carries a MAC of its bytes under the job's key (``wire.packet_tag``), and a
receiver drops a packet whose tag is wrong before it touches any state, counting it as ``rejected_by_field["tag"]``.
Real sockets on loopback; forged packets come from a socket bound to the address of the rank they claim, with the
right job id and nonce, as an attacker who learned those would send them. Each case runs on the C receive lane and
on the Python path."""

from __future__ import annotations

import os
import socket

import numpy as np
import pytest

from host import wire
from host.transport import Endpoint, Options, TransportError
from host.transport.chunking import plan_packets
from host.transport.packetio import packet_tag
from host.wire import DType
from tests.host.conftest import loopback_map, wait_for

JOB, NONCE = 91, 0x5EED
KEY = os.urandom(16)


def _packets(x: np.ndarray, tid: int, key: bytes | None) -> list[bytearray]:
    """The datagrams a sender of rank 0 puts on the wire for ``x`` (tagged under ``key``; None: tag 0)."""
    plan = plan_packets(nelems=x.size, dtype=DType.FLOAT32, mtu=1500, rank=0, job_id=JOB, transfer_id=tid,
                        nonce=NONCE)
    raw = x.view(np.uint8)
    out = []
    for s in range(plan.total):
        off, ln = int(plan.offsets[s]), int(plan.lengths[s])
        d = bytearray(plan.headers[s: s + 1].tobytes() + raw[off: off + ln].tobytes())
        if key is not None:
            d[wire.TAG_AT: wire.HEADER_LEN] = packet_tag(key, d[: wire.HEADER_LEN],
                                                         d[wire.HEADER_LEN:]).to_bytes(8, "big")
        out.append(d)
    return out


@pytest.fixture(params=[True, False], ids=["c-lane", "python-path"])
def keyed_receiver(request):
    """(rank 1 of a keyed job, a raw socket bound to rank 0's address, rank 1's address)."""
    amap = loopback_map(2)
    b = Endpoint(1, amap, JOB, NONCE, Options(peer_timeout=10.0, native=request.param), key=KEY)
    raw = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    raw.bind((amap[0], wire.UDP_PORT))
    yield b, raw, (amap[1], wire.UDP_PORT)
    raw.close()
    b.close()


def test_packets_with_a_wrong_tag_are_rejected_and_the_data_is_not_corrupted(keyed_receiver):
    """Forged packets whose every field is right but whose tag is not (no key: tag 0; another key; the genuine
    tag over a changed payload) arrive before and among the genuine ones, for the same seqs: each is dropped and
    counted, and the receive completes with exactly the sender's data (first-writer-wins would have kept the
    forged payloads)."""
    b, raw, dst = keyed_receiver
    n = 3000
    x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    genuine = _packets(x, 5, KEY)
    poison = np.full(n, 1e30, np.float32)
    no_key = _packets(poison, 5, None)
    other_key = _packets(poison, 5, os.urandom(16))
    replayed_tag = [bytearray(g[: wire.HEADER_LEN]) + p[wire.HEADER_LEN:] for g, p in zip(genuine, no_key)]
    out = np.zeros(n, np.float32)
    h = b.post_recv(0, 5, out, timeout=10)
    forged = 0
    for s, g in enumerate(genuine):
        for f in (no_key[s], other_key[s], replayed_tag[s]):  # each forgery of seq s lands before the genuine s
            raw.sendto(f, dst)
            forged += 1
        raw.sendto(g, dst)
    r = h.wait(10)
    assert np.array_equal(r.data, x) and r.report.lost_ranges == []
    assert wait_for(lambda: b.stats()["rejected_by_field"].get("tag") == forged)
    st = b.stats()
    assert st["rejected_by_field"] == {"tag": forged} and st["rejected"] == forged
    assert st["rx_data_packets"] == len(genuine) and st["duplicates"] == 0 and st["internal_errors"] == 0


def test_a_stranger_with_the_job_id_and_nonce_but_not_the_key_is_rejected():
    """A whole endpoint posing as rank 0 (its address, job id and nonce) without the key, then one with another
    key: none of their packets is accepted (the posted buffer stays untouched, no transfer is opened), their
    sends fail for want of feedback; the genuine rank 0 then sends the same transfer id and it completes."""
    amap = loopback_map(2)
    b = Endpoint(1, amap, JOB, NONCE, Options(peer_timeout=10.0), key=KEY)
    try:
        n = 50_000
        x = np.random.default_rng(2).standard_normal(n).astype(np.float32)
        out = np.zeros(n, np.float32)
        h = b.post_recv(0, 3, out, timeout=20)
        rejected = 0
        for stranger_key in (None, os.urandom(16)):
            stranger = Endpoint(0, amap, JOB, NONCE, Options(peer_timeout=0.5), key=stranger_key)
            try:
                sh = stranger.send(1, np.full(n, 7.0, np.float32), transfer_id=3)
                with pytest.raises(TransportError):
                    sh.wait(10)
                st = b.stats()
                assert st["rejected_by_field"]["tag"] > rejected  # every packet it sent, retransmissions too
                rejected = st["rejected_by_field"]["tag"]
                assert st["rx_data_packets"] == 0 and st["foreign"] == 0 and st["malformed"] == 0
                assert not h.done() and not out.any()
            finally:
                stranger.close()
        a = Endpoint(0, amap, JOB, NONCE, Options(peer_timeout=10.0), key=KEY)
        try:
            a.send(1, x, transfer_id=3).wait(10)
            assert np.array_equal(h.wait(10).data, x)
        finally:
            a.close()
    finally:
        b.close()


def test_an_unkeyed_receiver_accepts_any_tag_and_a_key_must_be_16_bytes():
    """Tags are checked only by a keyed job: an unkeyed one ignores the field (so tools without the key can still
    talk to it); a key of the wrong size is refused at construction."""
    amap = loopback_map(2)
    with pytest.raises(ValueError, match="key must be 16 bytes"):
        Endpoint(1, amap, JOB, NONCE, key=b"too short")
    b = Endpoint(1, amap, JOB, NONCE)
    raw = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        raw.bind((amap[0], wire.UDP_PORT))
        x = np.arange(200, dtype=np.float32)
        h = b.post_recv(0, 4, np.zeros(200, np.float32), timeout=10)
        for d in _packets(x, 4, os.urandom(16)):
            raw.sendto(d, (amap[1], wire.UDP_PORT))
        assert np.array_equal(h.wait(10).data, x)
        assert "tag" not in b.stats()["rejected_by_field"]
    finally:
        raw.close()
        b.close()

"""The packet I/O layer alone (``host/transport/packetio.py``): exclusive bind, batched receive records (the C lane
and recvmsg give the same), the error queue's refusals, keyed tags. Real sockets on loopback."""

from __future__ import annotations

import os
import socket
import time

import pytest

from host import wire
from host.transport.packetio import AddressInUse, PacketSocket, src_key
from tests.host.conftest import loopback_map


def _addr() -> tuple[str, int]:
    return (loopback_map(1)[0], wire.UDP_PORT)


def test_the_bind_is_exclusive_and_the_error_names_the_address():
    a = _addr()
    io = PacketSocket(0, a)
    try:
        with pytest.raises(AddressInUse, match=rf"address {a[0]}:{a[1]} is already in use"):
            PacketSocket(1, a)
    finally:
        io.close()
    PacketSocket(1, a).close()  # free again once closed


def test_native_and_python_drains_describe_the_same_records():
    """The same datagrams (sizes, TOS) to two sockets, one drained by the C lane and one by recvmsg_into: the same
    records, and the bytes where the records say."""
    ios = [PacketSocket(0, _addr(), native=native, offload=False) for native in (True, False)]
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        tx.bind((ios[0].local_addr[0], 0))
        sizes, toses = [100, 1, 3000, 9000], [0x08, 0x22, 0x01, 0xB8]
        for io in ios:
            for n, t in zip(sizes, toses):
                tx.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, t)
                tx.sendto(bytes([n % 251]) * n, io.local_addr)
        got = []
        for io in ios:
            recs: list = []
            deadline = time.monotonic() + 5
            while len(recs) < len(sizes) and time.monotonic() < deadline:
                k = io.drain()
                recs += [tuple(r) + (bytes(io.rxbuf[r[0]: r[0] + r[1]]),) for r in io.recs[:k].tolist()]
            got.append(recs)
        assert got[0] == got[1] and len(got[0]) == len(sizes)
        for (pos, n, tos, seg, src, data), size, t in zip(got[0], sizes, toses):
            assert (n, tos, seg, src, data) == (size, t, 0, src_key(tx.getsockname()), bytes([size % 251]) * size)
        assert all(io.drain() == 0 for io in ios)  # empty: no record, no error
    finally:
        tx.close()
        for io in ios:
            io.close()


def test_a_closed_peer_port_shows_in_the_error_queue():
    io = PacketSocket(0, _addr())
    gone = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    gone.bind((io.local_addr[0], 0))
    dead = gone.getsockname()
    gone.close()
    try:
        io.sock.sendto(b"x" * 10, dead)
        deadline = time.monotonic() + 5
        refused: list = []
        while not refused and time.monotonic() < deadline:
            refused = list(io.refused())
            time.sleep(0.01)
        assert refused == [dead]
        assert list(io.refused()) == []  # read once
    finally:
        io.close()


def test_tags_are_written_and_checked_with_the_key_only():
    key = os.urandom(16)
    keyed, plain = PacketSocket(0, _addr(), key=key), PacketSocket(1, _addr())
    try:
        buf = bytearray(wire.Header(msg_type=wire.MsgType.CONTROL, total=0).pack() + b"payload" + bytes(20))
        n = wire.HEADER_LEN + 7
        keyed.tag(buf, n)
        dgram = bytes(buf[:n])
        assert int.from_bytes(dgram[wire.TAG_AT: wire.HEADER_LEN], "big") == wire.packet_tag(key, dgram)
        assert keyed.tag_ok(memoryview(dgram))
        for i in (0, wire.HEADER_LEN - 1, n - 1):  # the header, the tag itself, the payload
            bad = bytearray(dgram)
            bad[i] ^= 1
            assert not keyed.tag_ok(memoryview(bad)), i
        untouched = bytearray(buf)
        plain.tag(untouched, n)  # unkeyed: nothing written, everything accepted
        assert untouched == buf and plain.tag_ok(memoryview(bytes(n)))
        with pytest.raises(ValueError, match="16 bytes"):
            PacketSocket(2, _addr(), key=b"short")
    finally:
        keyed.close()
        plain.close()

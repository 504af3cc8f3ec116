"""The C send fast lane (``host/transport/_txlane.c``): the datagrams it puts on the wire are, byte for byte and
TOS included, those the Python path's ``socket.sendmsg`` puts there, keyed tags included (checked against the
Python reference ``wire.packet_tag``); its tag (``_tag.h``) equals the reference on every length; bad
arguments send nothing; system call errors come back as OSError with their errno. End to end it is the default path
of every transport test without a socket_wrapper."""

from __future__ import annotations

import socket
import struct

import numpy as np
import pytest

from host import wire
from host.transport import packetio, transmit
from host.transport.chunking import plan_packets
from host.wire import DType

_SOL_UDP, _UDP_SEGMENT = 17, 103
KEY = bytes(range(200, 216))


@pytest.fixture
def pair():
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
    rx.settimeout(2)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    yield tx, rx
    tx.close()
    rx.close()


def _recv_one(rx: socket.socket) -> tuple[bytes, int | None]:
    """One datagram from ``rx`` with its TOS byte."""
    data, anc, _f, _a = rx.recvmsg(1 << 16, socket.CMSG_SPACE(4))
    return data, next((d[0] for lvl, typ, d in anc if lvl == socket.IPPROTO_IP and typ == socket.IP_TOS), None)


def _drain(rx: socket.socket) -> list[tuple[bytes, int]]:
    """Every datagram waiting on ``rx`` with its TOS byte."""
    out = []
    rx.setblocking(False)
    try:
        while True:
            out.append(_recv_one(rx))
    except BlockingIOError:
        pass
    rx.settimeout(2)
    return out


def _plan(n: int, mtu: int):
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    plan = plan_packets(nelems=n, dtype=DType.FLOAT32, mtu=mtu, job_id=3, transfer_id=9, nonce=77)
    hdr = memoryview(plan.headers.view(np.uint8))
    return x, plan, hdr, plan.offsets.tolist(), plan.lengths.tolist()


def test_the_extension_is_built():
    from host.transport import _txlane

    assert packetio._txlane is _txlane
    assert _txlane.HEADER_LEN == wire.HEADER_LEN and _txlane.MAX_RUN == transmit.GSO_MAX_SEGS


def test_c_tag_equals_the_reference_on_every_length():
    """The C tag (``_tag.h``: NH of the payload, then SipHash-2-4 over header, length and NH) equals the reference
    ``wire.packet_tag`` on payloads of 0..80 bytes (every split of NH's 32-byte blocks and SipHash's 8-byte words),
    a few keys, the largest payload a datagram can carry and all-ones bytes (the carries of NH's 32-bit adds)."""
    from host.transport import _txlane

    rng = np.random.default_rng(5)
    keys = [rng.bytes(16) for _ in range(3)]
    for n in range(81):
        key = keys[n % len(keys)]
        hdr, pay = rng.bytes(wire.HEADER_LEN), rng.bytes(n)
        assert _txlane.packet_tag(key, hdr, pay) == wire.packet_tag(key, hdr + pay), n
    hl = wire.HEADER_LEN
    for n in (1424, 8924, 65507 - hl):
        big = rng.bytes(hl + n)
        assert _txlane.packet_tag(KEY, big[:hl], big[hl:]) == wire.packet_tag(KEY, big), n
    ones = b"\xff" * (hl + 1000)
    assert _txlane.packet_tag(KEY, ones[:hl], ones[hl:]) == wire.packet_tag(KEY, ones)
    with pytest.raises(ValueError, match="16 bytes"):
        _txlane.packet_tag(b"k" * 15, big[:hl], b"")
    with pytest.raises(ValueError, match="no key"):
        _txlane.packet_tag(None, big[:hl], b"")
    with pytest.raises(ValueError, match=f"{hl} bytes"):
        _txlane.packet_tag(KEY, big[:hl - 4], b"")
    with pytest.raises(ValueError, match="at most 65536 bytes"):
        _txlane.packet_tag(KEY, big[:hl], bytes(65537))


def test_the_tag_covers_every_payload_byte_and_the_length():
    """NH pads the payload with zeros to whole blocks: the length in the PRF's input keeps a payload and the same
    payload with zeros appended apart; and a change of any payload byte, or of one bit, changes the C tag."""
    from host.transport import _txlane

    rng = np.random.default_rng(6)
    hdr, pay = rng.bytes(wire.HEADER_LEN), bytearray(rng.bytes(100))
    t = _txlane.packet_tag(KEY, hdr, pay)
    assert _txlane.packet_tag(KEY, hdr, bytes(pay) + b"\0") != t
    for i in range(len(pay)):
        for bit in (0, 7):
            pay[i] ^= 1 << bit
            assert _txlane.packet_tag(KEY, hdr, pay) != t, (i, bit)
            pay[i] ^= 1 << bit
    assert _txlane.packet_tag(KEY, hdr, pay) == t


@pytest.mark.parametrize("key", [None, KEY], ids=["unkeyed", "keyed"])
@pytest.mark.parametrize("mtu", [1500, 9000])
def test_send_run_puts_the_python_paths_datagrams_on_the_wire(pair, mtu, key):
    from host.transport import _txlane

    tx, rx = pair
    host, port = rx.getsockname()
    x, plan, hdr, offs, lens = _plan(40_000, mtu)
    pay = memoryview(x.view(np.uint8))
    hl = wire.HEADER_LEN
    seqs = list(range(plan.total))
    runs = [(0, 1), (1, 6), (6, 7), (plan.total - 3, plan.total)]  # single datagrams, GSO runs, the short last
    for tos in (0x60, 0x62):
        for i, j in runs:
            seg = hl + lens[seqs[i]] if j > i + 1 else 0
            sent = _txlane.send_run(tx.fileno(), hdr, pay, offs, lens, seqs, i, j, socket.inet_aton(host), port,
                                    tos, seg, key)
            assert sent == sum(hl + lens[s] for s in seqs[i:j])
            native = _drain_n(rx, j - i)
            for (d, _tos) in native:  # (the lane wrote the tags into hdr: the Python send below sends them too)
                tag = int.from_bytes(d[wire.TAG_AT: hl], "big")
                assert tag == (0 if key is None else wire.packet_tag(key, d))
            bufs = [b for s in seqs[i:j] for b in (hdr[s * hl:(s + 1) * hl], pay[offs[s]: offs[s] + lens[s]])]
            anc = [(socket.IPPROTO_IP, socket.IP_TOS, bytes([tos]))]
            if seg:
                anc.append((_SOL_UDP, _UDP_SEGMENT, struct.pack("=H", seg)))
            tx.sendmsg(bufs, anc, 0, (host, port))
            python = _drain_n(rx, j - i)
            assert native == python
            expect = [(bytes(hdr[s * hl:(s + 1) * hl]) + bytes(pay[offs[s]: offs[s] + lens[s]]), tos)
                      for s in seqs[i:j]]
            assert native == expect


def _drain_n(rx, k: int) -> list[tuple[bytes, int]]:
    """The next ``k`` datagrams (waiting up to the socket timeout for each)."""
    return [_recv_one(rx) for _ in range(k)]


def test_bad_arguments_send_nothing_and_say_what(pair):
    from host.transport import _txlane

    tx, rx = pair
    host, port = rx.getsockname()
    x, plan, hdr, offs, lens = _plan(5_000, 1500)
    pay = memoryview(x.view(np.uint8))
    ip4, fd = socket.inet_aton(host), tx.fileno()
    seg = wire.HEADER_LEN + lens[0]
    ok = (fd, hdr, pay, offs, lens, [0, 1, 2], 0, 3, ip4, port, 0, seg, KEY)

    def call(**kw):
        names = ("fd", "hdr", "pay", "offs", "lens", "seqs", "i", "j", "ip4", "port", "tos", "seg", "key")
        return _txlane.send_run(*[kw.get(n, v) for n, v in zip(names, ok)])

    with pytest.raises(IndexError, match="offs index"):
        call(seqs=[0, 1, 10_000])
    with pytest.raises(IndexError, match="seqs index"):
        call(j=5)
    with pytest.raises(ValueError, match="outside its buffers"):
        call(pay=pay[:100])
    with pytest.raises(ValueError, match="outside its buffers"):
        call(hdr=hdr[:40])
    with pytest.raises(ValueError, match="bad run"):
        call(seg=0)  # several datagrams need a segment size
    with pytest.raises(ValueError, match="bad run"):
        call(i=0, j=65, seqs=list(range(65)))
    with pytest.raises(ValueError, match="ip4"):
        call(ip4=b"\x7f\x00\x00")
    with pytest.raises(TypeError, match="lists"):
        call(offs=tuple(offs))
    with pytest.raises(TypeError, match="13 arguments"):
        _txlane.send_run(*ok[:12])
    with pytest.raises(ValueError, match="tag key must be 16 bytes"):
        call(key=b"x" * 8)
    with pytest.raises(BufferError):
        call(hdr=bytes(hdr))  # a keyed send writes the tags into the headers
    assert _drain(rx) == []  # none of these sent anything
    call()
    assert len(_drain_n(rx, 3)) == 3  # and the good call still works


def test_system_call_errors_raise_oserror_with_errno(pair):
    from host.transport import _txlane

    tx, rx = pair
    host, port = rx.getsockname()
    x, plan, hdr, offs, lens = _plan(1_000, 1500)
    pay = memoryview(x.view(np.uint8))
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    fd = s.fileno()
    s.close()
    with pytest.raises(OSError) as e:
        _txlane.send_run(fd, hdr, pay, offs, lens, [0], 0, 1, socket.inet_aton(host), port, 0, 0, None)
    assert e.value.errno == 9  # EBADF

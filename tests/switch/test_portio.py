"""The daemon's port I/O (``switch/daemon/portio.py``) on a real veth pair: the batched C calls
(``switch.daemon._portio``: recvmmsg/sendmmsg) and the per-frame Python loops they replace deliver the same frames,
in order, skip the port's own transmissions, and report the frames the kernel refuses without losing the others."""
from __future__ import annotations

import os
import random
import time

import pytest

from switch.daemon import portio
from switch.daemon.portio import Port

from switchd import sh, wait_up

pytestmark = pytest.mark.netns


@pytest.fixture
def veth(root_required):
    """A veth pair ``a``/``b`` in the root namespace (unique names), MTU 9000, IPv6 off (no stray frames)."""
    a, b = f"tpio{os.getpid() % 100000}a", f"tpio{os.getpid() % 100000}b"
    sh("ip", "link", "del", a, check=False)
    sh("ip", "link", "add", a, "type", "veth", "peer", "name", b)
    try:
        for ifn in (a, b):
            with open(f"/proc/sys/net/ipv6/conf/{ifn}/disable_ipv6", "w") as f:
                f.write("1")
            sh("ip", "link", "set", ifn, "mtu", "9000", "up")
        wait_up(a, b)
        yield a, b
    finally:
        sh("ip", "link", "del", a, check=False)


@pytest.fixture(params=["native", "python"])
def lane(request, monkeypatch):
    """Run a test with the C module and again with the Python loops."""
    if request.param == "python":
        monkeypatch.setattr(portio, "_portio", None)
    else:
        assert portio._portio is not None, "switch.daemon._portio is not built (make setup builds it)"
    return request.param


def frames(n: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    dst, src = bytes.fromhex("02aaaaaaaaaa"), bytes.fromhex("02bbbbbbbbbb")
    return [dst + src + b"\x88\xb5" + i.to_bytes(4, "big") + rng.randbytes(rng.choice((46, 200, 1500, 8990)))
            for i in range(n)]


def receive(p: Port, n: int, timeout: float = 5.0) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        if not p.recv_into(out):
            time.sleep(0.001)
    return out


def test_batches_arrive_whole_in_order_and_own_frames_are_skipped(veth, lane):
    a, b = veth
    pa, pb = Port(1, a), Port(2, b)
    try:
        sent = frames(150, 1)                   # more than one sendmmsg batch and one recv_into budget
        assert pa.send_batch(sent) == []
        got = receive(pb, len(sent))
        assert got == [(2, f) for f in sent]
        assert pb.recv_into(got) == 0           # nothing more
        out: list = []
        assert pa.recv_into(out) == 0 and out == []     # what a sent is not received back on a
        assert pb.recv_into(out, budget=1) == 0
    finally:
        pa.close()
        pb.close()


def test_refused_frames_are_reported_and_the_rest_still_sent(veth, lane):
    a, b = veth
    pa, pb = Port(1, a), Port(2, b)
    try:
        sent = frames(10, 2)
        too_big = sent[0][:14] + bytes(9100)     # over the MTU: EMSGSIZE
        batch = sent[:3] + [too_big] + sent[3:] + [too_big]
        assert pa.send_batch(batch) == [3, len(batch) - 1]
        assert receive(pb, len(sent)) == [(2, f) for f in sent]
    finally:
        pa.close()
        pb.close()


def test_native_calls_check_their_arguments():
    mod = portio._portio
    assert mod is not None, "switch.daemon._portio is not built (make setup builds it)"
    buf = bytearray(64 * 128)
    with pytest.raises(ValueError, match="budget"):
        mod.recv_frames(0, buf, 128, 65, 1, [])
    with pytest.raises(ValueError, match="cannot hold"):
        mod.recv_frames(0, buf, 128 * 2, 64, 1, [])
    with pytest.raises(TypeError, match="list"):
        mod.recv_frames(0, buf, 128, 4, 1, ())
    with pytest.raises(BufferError):
        mod.recv_frames(0, bytes(64 * 128), 128, 4, 1, [])     # read-only buffer
    with pytest.raises(TypeError, match="frame 1 is str"):
        mod.send_frames(0, [b"x" * 60, "no"])
    with pytest.raises(OSError):
        mod.recv_frames(-1, buf, 128, 4, 1, [])                # EBADF is an error, not "nothing to read"

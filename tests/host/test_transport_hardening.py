"""Hostile or mistaken input to a live endpoint: an address taken by another job, headers whose fields the receive
does not allow, data nobody claims, capped socket buffers. Every case is a clear error or a counted drop; nothing
is allocated on a stranger's word (issue 35). Real sockets on loopback; the crafted packets come from a socket
bound to the address of the rank they claim, as an attacker who guessed job id and nonce would send them."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from host import wire
from host.transport import Endpoint, Options, TransportError
from host.transport.chunking import chunk_elems
from host.transport.control import HDR
from host.transport.receiver import fits_transfer
from host.wire import DType, MsgType
from tests.host.conftest import loopback_map, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JOB, NONCE = 77, 0xBEEF


def _data(*, tid: int = 1, seq: int = 0, total: int = 1, eligible: int = 0, offset: int = 0, count: int = 2,
          dtype: DType = DType.FLOAT32) -> bytes:
    """A well-formed DATA packet from rank 0 (header and ``count`` elements of payload)."""
    hdr = HDR.pack((wire.VERSION << 4) | MsgType.DATA, 0, 0, int(dtype), 0, 0, JOB, tid, eligible, seq, total,
                   offset, count, NONCE, 0, 0)
    return hdr + bytes(count * dtype.itemsize)


@pytest.fixture
def impostor_pair():
    """(endpoint of rank 1, a raw socket bound to rank 0's address and port, rank 1's address): rank 0 is played by
    the raw socket, so its packets pass the source check."""
    amap = loopback_map(2)
    b = Endpoint(1, amap, JOB, NONCE, Options(peer_timeout=5.0))
    raw = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    raw.bind((amap[0], wire.UDP_PORT))
    yield b, raw, (amap[1], wire.UDP_PORT)
    raw.close()
    b.close()


def test_a_second_endpoint_on_a_taken_address_fails_naming_it():
    """Exclusive bind: a second job binding the address of a running one gets a clear error, and the first keeps
    receiving its own datagrams (with SO_REUSEADDR the kernel handed them to the newcomer, silently)."""
    amap = loopback_map(2)
    a = Endpoint(0, amap, 1, 1)
    b = Endpoint(1, amap, 1, 1)
    try:
        with pytest.raises(TransportError, match=rf"address {amap[1]}:{wire.UDP_PORT} is already in use") as ei:
            Endpoint(1, amap, 2, 2)  # another job, same address
        assert ei.value.peer == 1
        x = torch.randn(20_000)
        a.send(1, x, transfer_id=1)
        assert torch.equal(b.recv(0, 1, out=torch.empty_like(x), timeout=10).data, x)
    finally:
        a.close()
        b.close()
    c = Endpoint(1, amap, 3, 3)  # once closed, the address is free again
    c.close()


def test_a_huge_total_reserves_nothing(impostor_pair):
    """One packet claiming 2^32-1 packets for a transfer nobody posted: its bookkeeping would not fit the staging
    budget, so it is dropped and counted under ``total``, and no receive state is created."""
    b, raw, dst = impostor_pair
    raw.sendto(_data(tid=9, total=(1 << 32) - 1, seq=5), dst)
    assert wait_for(lambda: b.stats()["rejected_by_field"].get("total") == 1)
    s = b.stats()
    assert s["rejected"] == 1 and s["unclaimed_dropped"] == 1 and s["pending_recv"] == 0
    assert b._staged_bytes == 0 and s["internal_errors"] == 0


def test_a_posted_receive_bounds_total_dtype_and_offset(impostor_pair):
    """Against a posted receive of 1000 float32: a header claiming more packets than 1000 elements make, another
    dtype, or a payload past the end of the buffer is dropped and counted per field; the genuine transfer that
    follows completes exactly."""
    b, raw, dst = impostor_pair
    n = 1000
    chunk = chunk_elems(1500, 4)
    npk = -(-n // chunk)
    last = n - (npk - 1) * chunk
    assert fits_transfer(n, npk, chunk) and fits_transfer(n, npk, last)
    assert not fits_transfer(n, 1, 2) and not fits_transfer(n, npk + 1, chunk) and not fits_transfer(n, npk, last + 1)
    out = np.zeros(n, np.float32)
    h = b.post_recv(0, 5, out, timeout=10)
    raw.sendto(_data(tid=5, total=1 << 20, count=2), dst)  # 2^20 packets cannot carry 1000 elements
    raw.sendto(_data(tid=5, total=1, count=2), dst)  # nor can one packet of 2 (it would complete the transfer)
    raw.sendto(_data(tid=5, total=npk, count=2, dtype=DType.FLOAT16), dst)
    assert wait_for(lambda: b.stats()["rejected"] == 3)
    assert not h.done()
    # the genuine first packet, then one that runs past the buffer's end (dropped, not fatal)
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    counts = [min(chunk, n - i * chunk) for i in range(npk)]
    raw.sendto(_data(tid=5, total=npk, seq=0, count=counts[0])[:wire.HEADER_LEN] + x[:counts[0]].tobytes(), dst)
    raw.sendto(_data(tid=5, total=npk, seq=1, count=chunk, offset=4 * n - 8), dst)
    assert wait_for(lambda: b.stats()["rejected_by_field"].get("offset") == 1)
    for seq in range(1, npk):
        lo = seq * chunk
        raw.sendto(_data(tid=5, total=npk, seq=seq, offset=4 * lo, count=counts[seq])[:wire.HEADER_LEN]
                   + x[lo: lo + counts[seq]].tobytes(), dst)
    r = h.wait(5)
    assert np.array_equal(r.data, x) and r.report.lost_ranges == []
    assert b.stats()["rejected_by_field"] == {"total": 2, "dtype": 1, "offset": 1}


def test_a_receive_the_data_never_fits_times_out_naming_why(impostor_pair):
    """A sender whose tensor does not fit the posted buffer cannot fail the receive by its packets' word (a
    stranger could send the same ones): the receive times out, and its error names the rejected field."""
    b, raw, dst = impostor_pair
    h = b.post_recv(0, 6, np.zeros(100, np.float16), timeout=0.5)
    raw.sendto(_data(tid=6, count=3), dst)
    with pytest.raises(TransportError, match="1 packets rejected, the last for dtype: carries FLOAT32, recv"):
        h.wait()


def test_unposted_transfers_expire_with_their_staging(make_endpoints):
    """Data for a receive nobody posts is dropped with its staging after ``unposted_expiry``, both a completed
    transfer and one whose sender stopped midway; a later post_recv names the expiry."""
    a, b = make_endpoints(2, per_rank={0: Options(peer_timeout=5.0),
                                       1: Options(unposted_expiry=0.3, peer_timeout=5.0)})
    x = torch.randn(30_000)
    a.send(1, x, transfer_id=1).wait(5)  # completed, staged on b
    assert b._staged_bytes > 0
    assert wait_for(lambda: b.stats()["expired_unposted"] == 1)
    assert b._staged_bytes == 0 and not b._receiver.ready
    with pytest.raises(TransportError, match=r"no receive was posted for it within unposted_expiry \(0.3s\)"):
        b.post_recv(0, 1, torch.empty_like(x))
    # the address still works for new transfers
    y = torch.randn(1000)
    a.send(1, y, transfer_id=2)
    assert torch.equal(b.recv(0, 2, out=torch.empty_like(y), timeout=5).data, y)


def test_an_unposted_partial_transfer_expires(impostor_pair):
    b, raw, dst = impostor_pair
    b.opts.unposted_expiry = 0.3
    raw.sendto(_data(tid=8, total=4, seq=0, count=2), dst)  # three more packets never come
    assert wait_for(lambda: b.stats()["staged_transfers"] == 1)
    assert b._staged_bytes > 0
    assert wait_for(lambda: b.stats()["expired_unposted"] == 1)
    assert b._staged_bytes == 0 and b.stats()["pending_recv"] == 0


def test_a_capped_socket_buffer_is_reported():
    """Without the privilege to force them, SO_RCVBUF/SO_SNDBUF stop at the sysctl maximum: the endpoint warns and
    reports what it got in stats()["sock_buf_capped"]. (The script drops root after importing, as an unprivileged
    job would run.)"""
    rmem_max = int(open("/proc/sys/net/core/rmem_max").read())
    amap = loopback_map(1)
    code = textwrap.dedent(f"""
        import json, logging, os, sys
        sys.path.insert(0, {ROOT!r})
        from host.transport import Endpoint, Options
        logging.basicConfig(level=logging.WARNING, stream=sys.stdout, format="LOG %(message)s")
        if os.geteuid() == 0:
            os.setgid(65534); os.setuid(65534)
        ep = Endpoint(0, {amap!r}, 1, 1, Options(sock_buf={2 * rmem_max}))
        print(json.dumps({{k: list(v) for k, v in ep.stats()["sock_buf_capped"].items()}}))
        ep.close()
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    import json
    capped = json.loads(lines[-1])
    assert capped["SO_RCVBUF"][0] == 2 * rmem_max and capped["SO_RCVBUF"][1] < 2 * rmem_max
    assert any(ln.startswith("LOG dlcp rank 0: SO_RCVBUF is") and "net.core.rmem_max" in ln for ln in lines)


def test_uncapped_buffers_are_not_reported(make_endpoints):
    (a,) = make_endpoints(1)
    if os.geteuid() == 0:  # root forces the size past the sysctl maximum
        assert a.stats()["sock_buf_capped"] == {}
    else:
        assert set(a.stats()["sock_buf_capped"]) <= {"SO_RCVBUF", "SO_SNDBUF"}


def test_staging_is_bounded_by_what_the_claimed_packets_carry(impostor_pair):
    """Unclaimed data: a packet whose offset lies past what its transfer's ``total`` packets can carry is rejected
    (``offset``) instead of growing the staging buffer to that offset."""
    b, raw, dst = impostor_pair
    raw.sendto(_data(tid=11, total=2, seq=0, count=2), dst)  # opens the transfer (staged)
    raw.sendto(_data(tid=11, total=2, seq=1, count=2, offset=900_000_000), dst)
    assert wait_for(lambda: b.stats()["rejected_by_field"].get("offset") == 1)
    assert b._staged_bytes < 1 << 20


@pytest.mark.parametrize("mtu", [576, 1500, 9000])
@pytest.mark.parametrize("dtype", [DType.FLOAT32, DType.FLOAT16, DType.INT64, DType.UINT8])
def test_every_genuine_packet_fits_its_transfer(mtu, dtype):
    """``fits_transfer`` accepts every packet a real sender makes (any size, MTU, dtype; the receiver's MTU plays
    no part) and refuses one packet more than a full packet's chunk makes."""
    from host.transport.chunking import plan_packets

    rng = np.random.default_rng(mtu + int(dtype))
    for n in [0, 1, 2, 3, 365, 366, 367, 1000, 4096, *rng.integers(1, 200_000, size=20).tolist()]:
        plan = plan_packets(nelems=int(n), dtype=dtype, mtu=mtu, rank=0, job_id=1, transfer_id=1, nonce=1)
        for c in set((plan.lengths // dtype.itemsize).tolist()):
            assert fits_transfer(int(n), plan.total, c), (n, plan.total, c)
            if c == plan.chunk and n:  # more packets than a full one's chunk makes: no cut gives that
                assert not fits_transfer(int(n), plan.total + 1, c)


def test_the_link_refuses_a_loss_bound_on_integer_data(make_endpoints):
    """Integer and boolean tensors are control data: a loss bound for one is a caller's mistake, an error at the
    Link (it used to be made reliable silently); a float send with a bound and an exact integer send still work."""
    from host.collectives import EndpointLink

    a, b = make_endpoints(2)
    la, lb = EndpointLink(a), EndpointLink(b)
    for t in (torch.arange(10, dtype=torch.int64), torch.ones(10, dtype=torch.bool)):
        with pytest.raises(ValueError, match="only floating-point data may be lossy"):
            la.isend(1, t, 1, loss_bound=0.1)
        with pytest.raises(ValueError, match="only floating-point data may be lossy"):
            lb.irecv(0, torch.empty_like(t), 1, loss_bound=0.1)
    x, n = torch.randn(5000), torch.arange(7, dtype=torch.int32)
    rx, rn = lb.irecv(0, torch.empty_like(x), 2, loss_bound=0.1), lb.irecv(0, torch.empty_like(n), 3)
    la.isend(1, x, 2, loss_bound=0.1).wait(10)
    la.isend(1, n, 3).wait(10)
    assert sum(hi - lo for lo, hi in rx.wait().lost) <= 500 and rn.wait().lost == []

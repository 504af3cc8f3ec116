"""A large reliable send is classified in slices (``Options.classify_slice``): send() classifies the first slice
and the I/O thread each next one once half of the previous one has left; every slice's packets carry the policy's
classes of that slice; sends with drop-eligible packets and sends to peers on this host are classified whole; a
policy failing on a later slice fails the send (its handle raises) instead of leaving it hanging.

Slicing needs a peer that is not on a loopback address, so the two ends run in network namespaces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from host.policy import LayerMagnitudePolicy
from host.transport import Options
from host.transport.chunking import chunk_elems
from testbed.netns import Star
from tests.host.conftest import run_on_hosts

ROOT = Path(__file__).resolve().parents[2]
N = 1 << 19  # float32 elements: 2 MiB
SLICE = 256 << 10

PEER = """
import json, sys, threading
import numpy as np
sys.path.insert(0, {root!r})
from host.policy import LayerMagnitudePolicy
from host.transport import Endpoint, Options, TransportError

rank, addrs, scenario = int(sys.argv[1]), sys.argv[2].split(","), sys.argv[3]
calls, failed, ep = [], [], None

class Tap:
    '''A pass-through socket wrapper that keeps the header of every DATA datagram sent.'''
    def __init__(self, sock):
        self.sock, self.headers, self.seqs = sock, [], set()
    def __getattr__(self, name):
        return getattr(self.sock, name)
    def sendmsg(self, bufs, anc=(), flags=0, addr=None):
        h = bytes(bufs[0][:36])
        if h[0] & 15 == 0:
            self.headers.append(h.hex())
            self.seqs.add(int.from_bytes(h[20:24], "big"))
        return self.sock.sendmsg(bufs, anc, flags, addr)

class Watching(LayerMagnitudePolicy):
    '''Records what each classify() call covers, how many distinct DATA packets had been sent by then and on
    which thread; in the "fail" scenario its third call raises, once.'''
    def classify(self, values, counts, *, layer, loss_bound):
        sent = len(taps[0].seqs) if taps else 0
        calls.append([len(counts), 0 if values is None else int(values.size), sent,
                      threading.current_thread().name])
        if scenario == "fail" and len(calls) == 3 and not failed:
            failed.append(1)
            raise RuntimeError("policy failed on purpose")
        return super().classify(values, counts, layer=layer, loss_bound=loss_bound)

taps = []
def wrap(sock):
    taps.append(Tap(sock))
    return taps[-1]

opts = Options(mtu=1500, peer_timeout=10, recv_timeout=20, classify_slice={slice}, policy=Watching(),
               socket_wrapper=wrap if rank == 0 else None)
ep = Endpoint(rank, dict(enumerate(addrs)), 9, 9, opts)
print("ready", flush=True)
sys.stdin.readline()
x = np.random.default_rng(5).standard_normal({n}).astype(np.float32)
out = {{"calls": calls}}
if rank == 0:
    if scenario == "fail":
        h = ep.send(1, x, transfer_id=3)  # returns: the failing slice is classified later, on the I/O thread
        try:
            h.wait(30)
            out["raised"] = None
        except TransportError as e:
            out["raised"] = str(e)
        calls.clear()
        ep.send(1, x, transfer_id=4).wait(30)  # the endpoint goes on working
    else:
        ep.send(1, x, transfer_id=1, loss_bound=0.1 if scenario == "lossy" else 0.0).wait(30)
        out["headers"] = taps[0].headers
        out["calls"] = list(calls)
        ep.send(1, x[: {slice} // 4], transfer_id=2).wait(30)  # exactly one slice's bytes: classified whole
        out["one_slice_calls"] = calls[len(out["calls"]):]
else:
    if scenario == "fail":
        try:
            ep.recv(0, 3, out=np.empty_like(x), timeout=3)
            out["recv3"] = "completed"
        except TransportError as e:
            out["recv3"] = "TransportError: " + str(e)
        tid = 4
    else:
        tid = 1
    got = np.empty_like(x)
    res = ep.recv(0, tid, out=got, timeout=30)
    if scenario != "fail":
        ep.recv(0, 2, out=np.empty({slice} // 4, np.float32), timeout=30)
    out["identical"] = bool(np.array_equal(got, x)) if scenario != "lossy" else None
    out["zero_filled"] = res.report.zero_filled
print(json.dumps(out), flush=True)
ep.close()
"""


def _pair(scenario: str) -> tuple[dict, dict]:
    """Host 0 sends to host 1 in namespaces (no shaping); their JSON results (sender, receiver)."""
    with Star(2, rate=None, mtu=1500) as net:
        addrs = ",".join(h.ip for h in net.hosts)
        out = run_on_hosts(net, PEER.format(root=str(ROOT), slice=SLICE, n=N),
                           {i: [str(i), addrs, scenario] for i in (0, 1)})
        return out[0], out[1]


def _layout() -> tuple[int, int, int]:
    chunk = chunk_elems(1500, 4)
    return chunk, -(-N // chunk), -(-SLICE // (chunk * 4))  # a slice: the fewest packets holding SLICE bytes


@pytest.mark.netns
def test_slices_leave_while_the_rest_is_classified_and_carry_their_own_classes(root_required):
    tx, rx = _pair("reliable")
    assert rx["identical"] and rx["zero_filled"] == 0
    chunk, npk, per = _layout()
    calls = tx["calls"]
    # one classification per slice, in order, covering every packet once
    assert [c[0] for c in calls] == [per] * (npk // per) + ([npk % per] if npk % per else [])
    assert [c[1] for c in calls[:-1]] == [per * chunk] * (len(calls) - 1) and sum(c[1] for c in calls) == N
    # send()'s caller classified the first slice before any packet left; the I/O thread classified each next one
    # once no more than half a slice of written headers was left to send
    assert calls[0][2:] == [0, "MainThread"]
    assert all(c[3] == "dlcp-io-0" for c in calls[1:])
    assert all(k * per - per // 2 <= c[2] <= k * per for k, c in enumerate(calls[1:], 1))
    assert [c[:2] for c in tx["one_slice_calls"]] == [[per, SLICE // 4]]
    # on the wire: seq = position, no drop-eligible packet, LAST on the last one only, and each slice's packets
    # with the classes the policy gives that slice as a tensor of its own
    x = np.random.default_rng(5).standard_normal(N).astype(np.float32)
    counts = np.minimum(chunk, N - np.arange(npk) * chunk)
    want = np.concatenate([LayerMagnitudePolicy().classify(x[lo * chunk: lo * chunk + counts[lo:lo + per].sum()],
                                                           counts[lo:lo + per], layer=0, loss_bound=0.0).mag_class
                           for lo in range(0, npk, per)])
    first: dict[int, bytes] = {}
    for h in map(bytes.fromhex, tx["headers"]):
        first.setdefault(int.from_bytes(h[20:24], "big"), h)
    assert sorted(first) == list(range(npk))
    mag = np.array([(first[s][2] >> 2) & 7 for s in range(npk)], np.uint8)
    assert np.array_equal(mag, want)
    assert len(set(mag.tolist())) == 8  # (the classes are not all alike: the comparison means something)
    assert [int.from_bytes(first[s][28:32], "big") for s in range(npk)] == [s * chunk * 4 for s in range(npk)]
    flags = [first[s][1] for s in range(npk)]
    assert all(f & 1 == 0 for f in flags) and [bool(f & 8) for f in flags] == [False] * (npk - 1) + [True]


@pytest.mark.netns
def test_a_send_with_eligible_packets_is_classified_whole(root_required):
    tx, rx = _pair("lossy")
    _, npk, _ = _layout()
    assert [c[:2] for c in tx["calls"]] == [[npk, N]]
    assert rx["zero_filled"] <= 0.1 * N


@pytest.mark.netns
def test_a_policy_failing_on_a_later_slice_fails_the_send_not_the_endpoint(root_required):
    tx, rx = _pair("fail")
    assert "transfer 3 to rank 1 failed while classifying" in tx["raised"]
    assert "policy failed on purpose" in tx["raised"]
    assert rx["recv3"].startswith("TransportError")  # the receiver times out: it is not left waiting
    assert rx["identical"] and rx["zero_filled"] == 0  # the next send goes through


def test_sends_to_a_peer_on_this_host_are_classified_whole(make_endpoints):
    class Counting(LayerMagnitudePolicy):
        calls = 0

        def classify(self, values, counts, *, layer, loss_bound):
            Counting.calls += 1
            return super().classify(values, counts, layer=layer, loss_bound=loss_bound)

    a, b = make_endpoints(2, Options(mtu=1500, classify_slice=SLICE, policy=Counting()))
    x = np.random.default_rng(1).standard_normal(N).astype(np.float32)
    h = a.send(1, x, transfer_id=1)
    got = b.recv(0, 1, out=np.empty_like(x), timeout=20).data
    h.wait(20)
    assert np.array_equal(got, x) and Counting.calls == 1

"""An in-process Link between threads, for testing the collective *algorithms* alone (schedules, summation
order, shapes) quickly and deterministically. The same algorithms run over the real DLCP transport in
tests/host/test_backend*.py; this stands in only for the network, never for the code under test.

Optionally lossy: with ``loss=True`` and a positive loss bound, each transfer loses whole "packets" of
``packet`` elements at random positions, at least one and at most ``loss_bound`` of its elements in all, zero-fills
them and reports the ranges, as the transport's bounded-loss receiver does when a switch drops eligible packets.
"""

from __future__ import annotations

import queue
import random
import threading

import torch

from host.collectives import RecvReport


class _Done:
    def wait(self, timeout=None):
        return None

    def done(self) -> bool:
        return True


class DeferredRecv:
    """A posted receive of an in-memory link: the data moves when it is waited for. ``out`` must be unchanged
    from posting to waiting (the real transport writes it meanwhile), which ``wait`` checks."""

    def __init__(self, recv, out: torch.Tensor):
        self._recv, self._out, self._snapshot = recv, out, out.clone()

    def wait(self):
        assert torch.equal(self._out.view(torch.uint8), self._snapshot.view(torch.uint8)), \
            "the caller changed a posted receive's buffer before waiting for it"
        return self._recv()

    def cancel(self) -> None:
        pass


class MemNetwork:
    def __init__(self, size: int, *, loss: bool = False, seed: int = 0, packet: int = 64):
        self.size = size
        self.loss = loss
        self.packet = packet
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.boxes: dict[tuple[int, int, int], queue.Queue] = {}

    def box(self, src: int, dst: int, tid: int) -> queue.Queue:
        with self.lock:
            return self.boxes.setdefault((src, dst, tid), queue.Queue())

    def link(self, rank: int) -> "MemLink":
        return MemLink(self, rank)


class MemLink:
    def __init__(self, net: MemNetwork, rank: int):
        self.net, self.rank = net, rank
        self.sent: list[tuple[int, int, int]] = []  # (peer, tid, layer)

    def isend(self, peer, data, transfer_id, *, layer=0, loss_bound=0.0):
        assert data.is_contiguous() and data.dim() == 1
        self.sent.append((peer, transfer_id, layer))
        self.net.box(self.rank, peer, transfer_id).put((data.clone(), loss_bound))
        return _Done()

    def irecv(self, peer, out, transfer_id, *, loss_bound=0.0, timeout=None):
        return DeferredRecv(lambda: self.recv(peer, out, transfer_id, loss_bound=loss_bound, timeout=timeout), out)

    def packet_elems(self, itemsize: int) -> int:
        return self.net.packet

    def recv(self, peer, out, transfer_id, *, loss_bound=0.0, timeout=None):
        data, sender_bound = self.net.box(peer, self.rank, transfer_id).get(timeout=timeout or 30)
        assert data.numel() == out.numel() and data.dtype == out.dtype, (data.shape, out.shape, transfer_id)
        out.copy_(data)
        rep = RecvReport()
        if self.net.loss and loss_bound > 0:
            n, pk = out.numel(), self.net.packet
            budget = int(loss_bound * n + 1e-9)
            slots = -(-n // pk)
            with self.net.lock:
                k = self.net.rng.randint(1, budget // pk) if budget >= pk else 0
                drop = sorted(self.net.rng.sample(range(slots - 1), min(k, slots - 1)))  # the last may be short
            for i in drop:
                out[i * pk:(i + 1) * pk] = 0
                rep.lost.append((i * pk, (i + 1) * pk))
        return rep


def run_threads(size: int, fn) -> tuple[list, dict[int, BaseException]]:
    """Run ``fn(rank)`` on ``size`` threads (one torch thread each): (results in rank order, {rank: error} in the
    order the errors happened). Asserts that no rank hung."""
    results: list = [None] * size
    errors: dict[int, BaseException] = {}

    def body(r):
        try:
            torch.set_num_threads(1)
            results[r] = fn(r)
        except BaseException as e:  # noqa: BLE001 - returned to the caller
            errors[r] = e

    threads = [threading.Thread(target=body, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a rank hung"
    return results, errors


def run_ranks(size: int, fn, *, loss: bool = False, seed: int = 0):
    """Run ``fn(rank, link)`` on ``size`` threads; return the results in rank order (re-raising any error)."""
    net = MemNetwork(size, loss=loss, seed=seed)
    results, errors = run_threads(size, lambda r: fn(r, net.link(r)))
    if errors:
        raise next(iter(errors.values()))
    return results


def assert_loss_only_where_reported(res, exact: torch.Tensor, p: float) -> None:
    """``res`` is each rank's ``(result, lost ranges)``: results differ from ``exact`` only inside the union of the
    reported ranges, that union is not empty (or the test would prove nothing) and covers at most ``p``."""
    covered = torch.zeros(exact.numel(), dtype=torch.bool)
    for _, lost in res:
        for a, b in lost:
            covered[a:b] = True
    assert covered.any(), "the lossy link lost nothing: the test would prove nothing"
    assert covered.float().mean().item() <= p + 1e-9
    for t, _ in res:
        assert not (~torch.isclose(t, exact, rtol=1e-5) & ~covered).any()

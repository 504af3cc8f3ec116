"""Pairwise exchanges of x over the real DLCP transport (two endpoints on loopback UDP, one thread per side)."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from host.acid.worker import AcidState, StepTimer, exchange, gossip_transfer_id
from host.transport import TransportError


def _states(n: int, momentum: bool) -> list[AcidState]:
    timer = StepTimer()
    timer.add(0.01)
    g = torch.Generator().manual_seed(1)
    return [AcidState(torch.randn(n, generator=g), eta=0.3, alpha_tilde=0.9, momentum=momentum, timer=timer)
            for _ in range(2)]


@pytest.mark.parametrize("momentum", [False, True])
def test_exchanges_preserve_the_pair_sum_under_concurrent_steps(make_endpoints, momentum):
    eps = make_endpoints(2)
    st = _states(20_000, momentum)  # 80 kB: several packets even at the loopback MTU
    start = st[0].x + st[1].x
    start_all = start + (st[0].xt + st[1].xt if momentum else 0)
    applied = torch.zeros_like(start)
    stop = threading.Event()

    def steps() -> None:  # gradient steps on rank 0 while it exchanges
        g = torch.Generator().manual_seed(5)
        while not stop.is_set():
            d = torch.randn(start.numel(), generator=g) * 1e-3
            st[0].apply_gradient(d)
            applied.add_(d)
            time.sleep(0.0005)

    errors: list[BaseException] = []

    def side(r: int) -> None:
        try:
            for i in range(15):
                exchange(eps[r], st[r], 1 - r, gossip_transfer_id(i), timeout=10.0)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    th = [threading.Thread(target=side, args=(r,)) for r in range(2)] + [threading.Thread(target=steps)]
    for t in th:
        t.start()
    for t in th[:2]:
        t.join(60)
    stop.set()
    th[2].join()
    assert not errors, errors
    # each exchange moves (x_peer - x_sent)/2 into x and alpha~(x_peer - x_sent) into x~, antisymmetrically
    if momentum:  # mixing trades between x and x~ of one worker: the invariant is the sum of both
        total = st[0].x + st[1].x + st[0].xt + st[1].xt
        torch.testing.assert_close(total, start_all + 2 * applied, rtol=0, atol=1e-4)
    else:  # plain gossip: the pair's sum of x moves only by the gradient steps; 15 averagings bring them close
        torch.testing.assert_close(st[0].x + st[1].x, start + applied, rtol=0, atol=1e-4)
        assert float((st[0].x - st[1].x).abs().max()) < 0.05
    assert eps[0].stats()["transfers_sent"] == 15 and eps[1].stats()["transfers_received"] == 15


def test_exchange_with_a_dead_peer_fails_within_the_timeout_and_changes_nothing(make_endpoints):
    eps = make_endpoints(2)
    st = _states(1000, momentum=True)
    eps[1].close()
    before = st[0].x.clone()
    t0 = time.monotonic()
    with pytest.raises(TransportError) as ei:
        exchange(eps[0], st[0], 1, gossip_transfer_id(1), timeout=1.0)
    assert time.monotonic() - t0 < 6.0
    assert ei.value.peer == 1
    # mixing may have advanced x toward x~ (time passed), but no communication update was applied
    torch.testing.assert_close(st[0].x + st[0].xt, before * 2, rtol=0, atol=1e-5)


def test_gossip_ids_do_not_collide_with_collective_ids():
    assert gossip_transfer_id(0) >= 1 << 31
    assert gossip_transfer_id((1 << 31) + 5) == (1 << 31) | 5
    assert all(gossip_transfer_id(i) < 1 << 32 for i in (0, 1, 1 << 40))

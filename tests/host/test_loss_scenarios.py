"""Loss on real links: rank processes in network namespaces, DLCP datagrams dropped, blacked out and duplicated by
nftables on the bridge between them (tests/host/loss_scenarios.py). One run of each scenario; ``make
test-loss-soak`` runs them at P = 2..5 and the two scenarios of issue 43 that used to kill ranks 20 times each
(tests/host/loss_soak.py).

Every run must end with no rank dead, every exact call exact, every lossy call (and reduce-scatter shard) within
its bound, the same bits on every rank after every call, and the loss asked for counted by nftables. nftables can
duplicate (a ``netdev`` ``dup to`` rule), so duplication is one of the scenarios.
"""

from __future__ import annotations

import pytest

from tests.host.loss_scenarios import DEAR_STALL, SHORT, SHUTDOWN, Run, run

pytestmark = [pytest.mark.netns, pytest.mark.usefixtures("root_required")]


def _passes(r: Run) -> None:
    assert not r.problems(), "\n".join(r.problems())


@pytest.mark.parametrize("name", sorted(SHORT))
def test_scenario(name):
    r = run(SHORT[name])
    _passes(r)
    if name == "duplication":
        assert r.total("duplicates") > 0  # the copies reached the receivers, which dropped them
    elif name == "eligible-only":
        assert r.total("zero_filled_elements") > 0  # lost eligible packets were taken as loss, not resent
    else:
        assert r.total("retransmissions") > 0


@pytest.mark.slow
def test_dear_at_p5_under_loss_and_blackouts():
    """Issue 43's stall, short: DeAR at P=5, 5% random loss, 100 ms blackouts about every second, 6 steps (the
    soak: 30 steps, blackouts every 2 s, 20 runs). It stalled until the peer timeout killed the job."""
    r = run(DEAR_STALL.with_(blackout=(0.1, 1.0), env={"LOSS_STEPS": "6", "LOSS_FLUSH_EVERY": "2"}), seed=1)
    _passes(r)
    assert r.blackouts >= 1


def test_shutdown_with_one_way_loss():
    """Issue 43's death at the end, once: P=3, 10% of what each host sends lost, five all-reduces, barrier,
    destroy_process_group; no rank may be declared dead (a lost last DONE used to make a partner's retransmission
    meet the exited rank's closed port)."""
    _passes(run(SHUTDOWN))

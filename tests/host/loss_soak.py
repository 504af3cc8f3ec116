"""The loss soak (``make test-loss-soak``; marker ``loss_soak``; not collected by ``make test``, whose short runs are
tests/host/test_loss_scenarios.py): every scenario of tests/host/loss_scenarios.py once at each P of 2..5, and the
two scenarios of issue 43 that used to kill ranks ``DLCP_LOSS_SOAK_RUNS`` times each (20 by default; DeAR at P=5
with 30 steps under 5% loss and 100 ms blackouts about every 2 s takes about a minute a run on 2 cores).

Every run is made and judged (tests/host/loss_scenarios.py ``Run.problems``) before a test fails, so a failing
soak reports how many runs died, not only the first. Each test writes its runs (wall time, blackouts, transport
totals, problems) to ``build/loss-soak/<test>.json`` and prints one summary line; ``DLCP_LOSS_SOAK_SEED`` moves
the blackouts' seeds (to split a soak into parts that differ).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.host.loss_scenarios import DEAR_STALL, SHORT, SHUTDOWN, Run, Scenario, run

pytestmark = [pytest.mark.loss_soak, pytest.mark.netns, pytest.mark.usefixtures("root_required")]

OUT = Path(__file__).resolve().parents[2] / "build" / "loss-soak"
TOTALS = ("retransmissions", "rto_timeouts", "tail_probes", "nacks_sent", "duplicates", "zero_filled_elements")


def _soak(label: str, sc: Scenario, runs: int) -> list[Run]:
    """``runs`` runs of ``sc``; writes their record and prints how many died and how many failed a check."""
    first = int(os.environ.get("DLCP_LOSS_SOAK_SEED", "0"))
    done = [run(sc, seed=first + i) for i in range(runs)]
    record = [{"seed": first + i, "wall_s": r.wall_s, "blackouts": r.blackouts, "nft": r.counters,
               "deaths": r.deaths(), "problems": r.problems(), **{k: r.total(k) for k in TOTALS}}
              for i, r in enumerate(done)]
    OUT.mkdir(parents=True, exist_ok=True)
    name = f"{label}-seed{first}" if first else label
    (OUT / f"{name}.json").write_text(json.dumps({"scenario": sc.name, "world": sc.world, "runs": record},
                                                 indent=1, default=str))
    deaths = sum(bool(x["deaths"]) for x in record)
    failed = sum(bool(x["problems"]) for x in record)
    walls = sorted(x["wall_s"] for x in record)
    print(f"\nloss soak {label}: P={sc.world} {runs} runs, {deaths} with deaths, {failed} failing a check; "
          f"wall median {walls[len(walls) // 2]} s, max {walls[-1]} s; "
          f"{sum(x['blackouts'] for x in record)} blackouts, {sum(x['rto_timeouts'] for x in record)} RTOs")
    return done


@pytest.mark.timeout(900)
@pytest.mark.parametrize("world", [2, 3, 4, 5])
@pytest.mark.parametrize("name", sorted(SHORT))
def test_sweep(name, world):
    """Each scenario once at P = ``world``."""
    (r,) = _soak(f"sweep-{name}-P{world}", SHORT[name].with_(world=world), 1)
    assert not r.problems(), "\n".join(r.problems())


@pytest.mark.timeout(3600)
@pytest.mark.parametrize("sc", [DEAR_STALL, SHUTDOWN], ids=lambda s: s.name)
def test_failing_scenarios_of_issue_43(sc):
    """DeAR at P=5 under 5% loss plus blackouts (a stalled transfer killed the job in 4 of 8 runs), and the P=3
    job ending in barrier + destroy_process_group under 10% loss of what each host sends (a rank declared dead in
    3 of 8): no run may die or fail a check."""
    runs = int(os.environ.get("DLCP_LOSS_SOAK_RUNS", "20"))
    done = _soak(sc.name, sc, runs)
    bad = [(i, r.problems()) for i, r in enumerate(done) if r.problems()]
    assert not bad, "\n".join(f"run {i}: {p}" for i, p in bad)

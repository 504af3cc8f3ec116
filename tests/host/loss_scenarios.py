"""The loss scenarios: real rank processes in network namespaces, loss by nftables (tests/host/nftloss.py), each
rank checking its own results (tests/host/loss_scenario_worker.py). Shared by the short runs in ``make test``
(tests/host/test_loss_scenarios.py) and the soak (tests/host/loss_soak.py, ``make test-loss-soak``).

A run passes when no rank died (every rank exited 0, none raised, none holds another dead), every rank's calls
passed their checks (exact calls exact, lossy calls within their bound, per shard for reduce-scatters), every
rank holds the same bits after every call (digests equal), and the loss the scenario asked for happened (its
nftables counters are non-zero).
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field

from tests.host.dist_run import finish
from tests.host.nftloss import LossyStar

WORKER = "tests.host.loss_scenario_worker"


@dataclass(frozen=True)
class Drop:
    """``percent`` % of class ``cls`` dropped on ``links`` (None: all) in ``direction`` (LossyStar.drop)."""

    percent: float
    cls: str = "all"
    links: tuple[int, ...] | None = None
    direction: str = "both"


@dataclass(frozen=True)
class Scenario:
    name: str
    world: int
    workload: str  # the worker's scenario: colls, dear or tiny
    drops: tuple[Drop, ...] = ()
    blackout: tuple[float, float] | None = None  # (length, mean interval) in seconds
    duplicate: float = 0.0  # percent
    env: dict[str, str] = field(default_factory=dict)
    timeout: float = 240.0

    def with_(self, **kw) -> "Scenario":
        return dataclasses.replace(self, **kw)


@dataclass
class Run:
    """One run's outcome: each rank's exit status and JSON result, the nftables counters, the wall time."""

    scenario: Scenario
    results: list[dict]
    counters: dict[str, int]
    wall_s: float
    blackouts: int

    def deaths(self) -> list[str]:
        """The ranks that died or declared a peer dead, with why."""
        out = []
        for r in self.results:
            if r["rc"] != 0 or r.get("fatal"):
                out.append(f"rank {r['rank']}: exit {r['rc']}: {r.get('fatal') or r.get('stderr', '')[-600:]}")
            elif r.get("dead"):
                out.append(f"rank {r['rank']} declared dead: {r['dead']}")
        return out

    def problems(self) -> list[str]:
        """Everything wrong with the run (empty: it passed)."""
        out = self.deaths()
        if out:
            return out
        for r in self.results:
            out += [f"rank {r['rank']} {c['call']}: {e}" for c in r["calls"] for e in c["errors"]]
        digests = [r["digests"] for r in self.results]
        if any(d != digests[0] for d in digests):
            out.append(f"replicas differ: {digests}")
        sc = self.scenario
        wanted = (["drop"] if sc.drops else []) + (["dup"] if sc.duplicate else []) + \
            (["blackout"] if sc.blackout else [])
        out += [f"no datagram matched the {k} rules: {self.counters}" for k in wanted if not self.counters.get(k)]
        return out

    def total(self, counter: str) -> int:
        """A transport counter summed over the ranks."""
        return sum(r.get("transport", {}).get(counter) or 0 for r in self.results)


def run(sc: Scenario, seed: int = 0) -> Run:
    """Run scenario ``sc`` once (``seed`` places its blackouts)."""
    with LossyStar(sc.world) as net:
        for d in sc.drops:
            net.drop(d.percent, cls=d.cls, links=d.links, direction=d.direction)
        if sc.duplicate:
            net.duplicate(sc.duplicate)
        t0 = time.monotonic()
        starts: list[float] = []
        if sc.blackout:
            with net.blackouts(*sc.blackout, seed=seed) as starts:
                done = finish(net.spawn(WORKER, sc.workload, env=sc.env), sc.timeout)
        else:
            done = finish(net.spawn(WORKER, sc.workload, env=sc.env), sc.timeout)
        wall = time.monotonic() - t0
        counters = net.counters()
    results = []
    for rank, p in enumerate(done):
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
        res = json.loads(lines[-1]) if lines else {"rank": rank, "fatal": f"no result (exit {p.returncode})"}
        res["rc"] = p.returncode
        if p.returncode or res.get("fatal"):
            res["stderr"] = p.stderr[-2000:]
        results.append(res)
    return Run(sc, results, counters, round(wall, 2), len(starts))


#: The scenarios, short enough for ``make test`` (a few seconds each); the soak runs them at every P of 2..5 and
#: the two that used to fail 20 times each. The lossy calls' bound is the worker's (LOSS_P, 5%).
SHORT = {
    "random": Scenario("random", 3, "colls", (Drop(5),)),
    "blackouts": Scenario("blackouts", 3, "colls", (Drop(2),), blackout=(0.1, 0.5), env={"LOSS_ROUNDS": "2"}),
    "one-way": Scenario("one-way", 3, "colls", (Drop(10, links=(1,), direction="in"),)),
    "eligible-only": Scenario("eligible-only", 3, "colls", (Drop(50, cls="eligible"),)),
    "protected-only": Scenario("protected-only", 3, "colls", (Drop(10, cls="protected"),)),
    "feedback-only": Scenario("feedback-only", 3, "colls", (Drop(10, cls="control"),)),
    "duplication": Scenario("duplication", 3, "colls", (Drop(2),), duplicate=10),
}
#: The two failures of issue 43: (a) DeAR at P=5 under 5% random loss plus 100 ms blackouts every 2 s stalled a
#: transfer until the peer timeout (4 of 8 runs of 30 steps); (b) P=3 with 10% loss of what each host sends, a few
#: all-reduces, then barrier + destroy_process_group: a rank was declared dead at the end (3 of 8 runs).
DEAR_STALL = Scenario("dear-stall", 5, "dear", (Drop(5),), blackout=(0.1, 2.0),
                      env={"LOSS_STEPS": "30", "LOSS_FLUSH_EVERY": "0"}, timeout=290)
SHUTDOWN = Scenario("shutdown", 3, "tiny", (Drop(10, direction="in"),))

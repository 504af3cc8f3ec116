"""The evaluation machinery end to end on the embedded switch (issue 32): a short sweep whose report is computed
from its runs' JSON, host DSCP marking seen in the switches' per-priority counters, per-flow vs per-packet load
balancing in the spine counters, and the run deadline when rank 0 prints nothing."""

import json
import re
import time
from pathlib import Path

import pytest

from testbed.run import RunError, run_spec
from testbed.spec import load_spec
from testbed.sweep import load_sweep, median_ci, run_sweep

ROOT = Path(__file__).resolve().parents[2]
STAR2 = ROOT / "examples" / "testbed" / "star2.yaml"

pytestmark = [pytest.mark.netns, pytest.mark.slow]


def test_median_ci_order_statistics():
    assert median_ci([3.0, 1.0, 2.0]) == {"n": 3, "median": 2.0, "lo": 1.0, "hi": 3.0, "coverage": 0.75}
    ten = median_ci(list(range(10)))  # k = 2: 1 - 2 * 11/1024 >= 0.95; k = 3 would be 0.89
    assert (ten["median"], ten["lo"], ten["hi"]) == (4.5, 1.0, 8.0) and ten["coverage"] > 0.95
    assert median_ci([None, None])["median"] is None


def test_sweep_report_comes_from_the_runs(root_required, tmp_path):
    """2 cells x 2 repetitions, interleaved; Gloo's TCP is marked CS5 on the hosts and counted in queue 5."""
    sweep_file = tmp_path / "sweep.yaml"
    sweep_file.write_text(f"""
base: {STAR2}
set: {{steps: 6, eval_every: 3, timeout_s: 90}}
cells:
  gloo-cs5: {{algorithm: ddp-gloo, loss_bound: 0, job_dscp: 40}}
  dlcp: {{algorithm: dlcp-allreduce}}
repetitions: 2
seeds: [1, 2]
""")
    sweep = load_sweep(sweep_file)
    doc = run_sweep(sweep, tmp_path / "out")
    assert [(r["cell"], r["seed"]) for r in doc["runs"]] == [("gloo-cs5", 1), ("dlcp", 1), ("gloo-cs5", 2),
                                                              ("dlcp", 2)]
    raw = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert re.fullmatch(r"[0-9a-f]{40}", raw["metadata"]["git_commit"]) and raw["metadata"]["packages"]["torch"]
    report = (tmp_path / "out" / "report.md").read_text()
    for cell in ("gloo-cs5", "dlcp"):
        results = [json.loads((tmp_path / "out" / r["results"]).read_text()) for r in raw["runs"] if r["cell"] == cell]
        its = sorted(r["summary"]["iter_p50_s"] for r in results)
        st = raw["cells"][cell]["iter_p50_s"]
        assert st["median"] == pytest.approx(sum(its) / 2) and (st["lo"], st["hi"]) == (its[0], its[1])
        row = next(line for line in report.splitlines() if line.startswith(f"| {cell} |"))
        assert f"{st['median'] * 1000:.3g} ms [{its[0] * 1000:.3g}, {its[1] * 1000:.3g}]" in row
        assert raw["cells"][cell]["final_accuracy"]["median"] == pytest.approx(
            sorted(r["summary"]["final_accuracy"] for r in results)[0] / 2
            + sorted(r["summary"]["final_accuracy"] for r in results)[1] / 2)
        for r in results:
            fwd = r["switches"]["forwarded_by_priority"]
            if cell == "gloo-cs5":  # every worker packet is TCP marked CS5 -> queue 5; nothing in the DLCP queues
                assert fwd.get("5", 0) > 100 and sum(fwd.get(str(q), 0) for q in (1, 2, 3, 4, 6, 7)) == 0
                assert fwd.get("0", 0) < fwd["5"] // 10  # only what the shim cannot see (none expected: ARP is static)
            else:
                assert fwd.get("5", 0) + fwd.get("0", 0) < sum(fwd.values())  # DLCP's own queues
    assert (tmp_path / "out" / "sweep_iter_p50_s.png").stat().st_size > 0


def _data_per_spine_port(result) -> dict[tuple[str, str], int]:
    out = {}
    for spine in ("spine1", "spine2"):
        for port, prios in result["switches"]["per_switch"][spine]["ports"].items():
            out[(spine, port)] = sum(c["forwarded_packets"] for q, c in prios.items() if 1 <= int(q) <= 6)
    return out


def test_per_flow_vs_per_packet_in_spine_counters(root_required, tmp_path):
    """Spraying puts each direction's DLCP data on both spines; per-flow hashing keeps it on one. Both runs use 4
    queues per port: the switches and the network file agree, so DLCP's ACK/NACK/control messages go to queue 3
    (the top one that exists) and reach their senders, the runs complete, and nothing is counted above queue 3.

    Queues 1..3 must carry DLCP only for the counters to measure it. The one other packet a run can send there is
    the kernel's ICMP "port unreachable" when a rank's last control message reaches a peer that has already exited
    (common on a loaded machine). Linux sends ICMP errors with precedence 6 (TOS 0xc0, DSCP 48, CS6), the default
    DSCP map puts CS6 in the top queue, and an ICMP error is a flow of its own, so per-flow hashing may send it over
    the other spine. The runs map DSCP 48 to queue 0 with the rest of the non-DLCP traffic."""
    shares = {}
    for lb in ("spray", "per-flow"):
        spec = load_spec(STAR2, {"topology": {"kind": "leaf-spine", "hosts": 2, "link": {"rate": "100mbit"}},
                                 "steps": 6, "eval_every": 3, "load_balancing": lb, "priority_queues": 4,
                                 "dscp_map": {48: 0}, "name": f"t-{lb}"})
        result = json.loads(run_spec(spec, tmp_path / lb, plots=False).read_text())
        fwd = result["switches"]["forwarded_by_priority"]
        assert result["summary"]["steps"] == 6 and fwd.get("3", 0) > 0 and all(int(q) <= 3 for q in fwd)
        per = _data_per_spine_port(result)
        # spine port p leads to leaf p: the share of the traffic towards each leaf that spine1 carried
        shares[lb] = [per[("spine1", p)] / max(1, per[("spine1", p)] + per[("spine2", p)]) for p in ("1", "2")]
        assert all(per[("spine1", p)] + per[("spine2", p)] > 100 for p in ("1", "2"))
    assert all(0.3 < s < 0.7 for s in shares["spray"]), shares
    assert all(s in (0.0, 1.0) for s in shares["per-flow"]), shares


def test_timeout_kills_a_silent_rank0(root_required, tmp_path):
    """Rank 0 prints nothing for 10 s (its first step's emulated compute); timeout_s=4 ends the run at the
    deadline instead of at rank 0's first line."""
    spec = load_spec(STAR2, {"algorithm": "ddp-gloo", "loss_bound": 0, "steps": 1, "compute_ms": 10000,
                             "timeout_s": 4, "name": "t-silent"})
    t0 = time.monotonic()
    with pytest.raises(RunError, match="timeout_s=4"):
        run_spec(spec, tmp_path / "out", plots=False)
    assert time.monotonic() - t0 < 10


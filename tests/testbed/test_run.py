"""End to end on the embedded switch: Mininet hosts, dlcp-switch processes programmed by the controller, real
training workers; teardown leaves nothing behind, even when a worker dies."""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from testbed.run import RunError, leftovers, run_spec
from testbed.spec import load_spec
from testbed.topos import plan

ROOT = Path(__file__).resolve().parents[2]
STAR2 = ROOT / "examples" / "testbed" / "star2.yaml"

pytestmark = [pytest.mark.netns, pytest.mark.slow]


def our_processes() -> list[str]:
    out = subprocess.run(["pgrep", "-af", "testbed.worker|switch.daemon -i"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]


def assert_clean(spec) -> None:
    assert leftovers(plan(spec.topology)) == []
    deadline = time.monotonic() + 5
    while our_processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert our_processes() == []


@pytest.mark.parametrize("algorithm", ["ddp-gloo", "dlcp-allreduce"])
def test_star_run_end_to_end(root_required, tmp_path, algorithm):
    import json

    spec = load_spec(STAR2, {"algorithm": algorithm, "steps": 12, "eval_every": 6, "name": f"t-{algorithm}"})
    path = run_spec(spec, tmp_path / "out")
    r = json.loads(path.read_text())
    s = r["summary"]
    assert s["steps"] == 12 and s["final_accuracy"] > 0.3
    assert len(r["workers"]) == 2 and all(len(w["iterations"]) == 12 for w in r["workers"])
    # Both ranks trained the same model: synchronous training gives them the same evaluation.
    assert r["workers"][0]["final_accuracy"] == r["workers"][1]["final_accuracy"]
    fwd = r["switches"]["forwarded_by_priority"]
    assert sum(fwd.values()) > 0
    if algorithm == "dlcp-allreduce":
        # DLCP packets were classified by the switch into the data/control queues, not best effort.
        assert any(int(p) > 0 for p in fwd)
        assert r["workers"][0]["transport"]["tx_data_packets"] > 0
    else:
        assert set(fwd) == {"0"}
    for name in ("iteration_cdf.png", "accuracy.png", "drops_marks.png"):
        assert (tmp_path / "out" / name).stat().st_size > 1000
    assert (tmp_path / "out" / "network.yaml").exists()
    check_tails(r)
    assert_clean(spec)


def check_tails(r: dict) -> None:
    """The tail figures of a real run: present, ordered, counted in whole steps, and made of the workers' own
    records (every measured step's collective calls on every rank, its timeouts)."""
    s = r["summary"]
    assert s["iter_p50_s"] <= s["iter_p90_s"] <= s["iter_p99_s"]
    for name in ("p50", "p90", "p99"):
        q = s["iter_quantiles"][name]
        assert q["n"] == s["steps"] - 2 and q["lo"] <= q["value"] <= q["hi"] and 0 < q["coverage"] <= 1
    assert s["coll_calls"] > 0 and 0 < s["coll_p50_s"] <= s["coll_p90_s"] <= s["coll_p99_s"]
    # a collective completes within the step that waits for it (DDP: every bucket's all-reduce)
    assert s["coll_p99_s"] <= max(max(i["dt"] for i in w["iterations"]) for w in r["workers"])
    assert sum(op["calls"] for op in s["collectives"].values()) == s["coll_calls"]
    assert "all_reduce" in s["collectives"]
    for w in r["workers"]:
        assert all(isinstance(i["rto"], int) and i["rto"] >= 0 for i in w["iterations"])
        steps = {c["step"] for c in w["collectives"]}
        assert steps >= set(range(2, s["steps"]))  # every measured step communicated
    assert isinstance(s["rto_steps"], int) and 0 <= s["rto_steps"] <= s["steps"] - 2
    assert isinstance(s["rto_timeouts"], int) and s["rto_timeouts"] >= s["rto_steps"]


def test_worker_crash_tears_everything_down(root_required, tmp_path):
    spec = load_spec(STAR2, {"algorithm": "dlcp-allreduce", "steps": 100000, "eval_every": 1000, "name": "crash",
                             "timeout_s": 120})
    killed = []

    def kill_rank1():
        log0 = tmp_path / "out" / "worker-0.log"
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not killed:
            time.sleep(0.2)
            if not log0.exists() or "step 3/" not in log0.read_text(errors="replace"):
                continue
            out = subprocess.run(["pgrep", "-f", f"testbed.worker {tmp_path}"], capture_output=True, text=True)
            for pid in (int(p) for p in out.stdout.split()):
                try:
                    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                except OSError:
                    continue
                if b"RANK=1" in environ:
                    os.kill(pid, 9)
                    killed.append(pid)

    t = threading.Thread(target=kill_rank1, daemon=True)
    t.start()
    with pytest.raises(RunError, match="worker"):
        run_spec(spec, tmp_path / "out", plots=False)
    assert killed, "the test never found rank 1 to kill"
    assert_clean(spec)


def test_bmv2_switch_names_missing_binary(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path)}
    code = ("from testbed.nodes import Bmv2Switch, MissingBinary\n"
            "try:\n    Bmv2Switch('s1')\nexcept MissingBinary as e:\n    print('ERR', e)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT)
    assert "ERR" in out.stdout and "simple_switch_grpc" in out.stdout, out.stderr


def test_cli_reports_unknown_spec_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nworkers: 2\nalgoritm: dear\n")
    out = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(bad)], capture_output=True, text=True,
                         cwd=ROOT)
    assert out.returncode == 2 and "algoritm" in out.stderr and ":3" in out.stderr


def test_acid_run_end_to_end(root_required, tmp_path):
    import json

    spec = load_spec(STAR2, {"algorithm": "acid", "steps": 40, "name": "t-acid"})
    r = json.loads(run_spec(spec, tmp_path / "out", plots=False).read_text())
    assert len(r["workers"]) == 2
    # Every worker gossiped over the DLCP transport, through the switch's DLCP queues.
    assert all(w["acid"]["comms"] > 0 and w["transport"]["transfers_sent"] > 0 for w in r["workers"])
    assert any(int(p) > 0 for p in r["switches"]["forwarded_by_priority"])
    assert r["summary"]["final_accuracy"] > 0.5
    assert_clean(spec)


def test_switch_drops_eligible_packets_within_the_bound(root_required, tmp_path):
    """Bounded loss that really happens: with a drop threshold of one packet the switch drops drop-eligible DLCP
    packets whenever a queue builds; the run reports the zero-filled fraction (never above the bound in any step),
    the ranks stay in step (the same evaluation), and the switches counted the eligible drops."""
    import json

    spec = load_spec(STAR2, {"algorithm": "dlcp-allreduce", "loss_bound": 0.05, "steps": 12, "eval_every": 6,
                             "thresholds": {"drop": 1}, "name": "t-lossy"})
    r = json.loads(run_spec(spec, tmp_path / "out").read_text())
    s = r["summary"]
    assert s["steps"] == 12 and s["zero_filled_elements"] > 0
    assert 0 < s["zero_filled_fraction"] <= s["zero_filled_step_max"] <= 0.05
    assert r["workers"][0]["final_accuracy"] == r["workers"][1]["final_accuracy"]
    assert sum(r["switches"]["drops_by_priority"].values()) > 0
    assert_clean(spec)


def test_incast_of_bursts_into_a_worker(root_required, tmp_path):
    """Two background hosts burst UDP into worker h1 together (testbed.onoff): the run finishes, its background
    goodput comes from the on-off receivers' reports, and its tails are reported as in any run."""
    import json

    spec = load_spec(STAR2, {"algorithm": "dlcp-allreduce", "steps": 12, "eval_every": 6, "name": "t-incast",
                             "topology.background_hosts": 2, "topology.link.rate": "50mbit",
                             "background": [{"kind": "udp", "src": ["b1", "b2"], "dst": "h1", "rate": "40mbit",
                                             "on_ms": 50, "off_ms": 100}]})
    assert len(spec.background) == 2
    r = json.loads(run_spec(spec, tmp_path / "out", plots=False).read_text())
    assert len(r["background"]) == 2 and all(b["goodput_bps"] > 0 for b in r["background"]), r["background"]
    assert r["summary"]["background_goodput_bps"] > 0
    check_tails(r)
    assert_clean(spec)


def test_flapping_spine_under_spraying(root_required, tmp_path):
    """A leaf-spine whose spine2 flaps between 2 Mb/s with loss and its normal rate every 300 ms while two workers
    spray over both spines: the path changed several times, none failed, and the run reports its tails."""
    import json

    spec = load_spec(STAR2, {"algorithm": "dlcp-allreduce", "steps": 14, "eval_every": 7, "name": "t-flap",
                             "topology": {"kind": "leaf-spine", "hosts": 2, "link": {"rate": "50mbit"},
                                          "degraded": {"spine": "spine2", "rate": "2mbit", "loss": 0.05,
                                                       "flap_ms": 300}}})
    r = json.loads(run_spec(spec, tmp_path / "out", plots=False).read_text())
    changes = r["path_changes"]
    assert r["summary"]["path_changes"] == len(changes) >= 2 and all("error" not in c for c in changes), changes
    check_tails(r)
    assert_clean(spec)

"""``make fuzz``: every fuzz campaign of the project, each for a bounded time, and one JSON of their counts.

Targets (each ``--seconds`` long; the transport's runs (three tag modes, one on the Python path) share its budget):

* ``transport``: mutated DLCP datagrams into a live transport (``tests/fuzz/transport_fuzz.py``), per tag mode
  (and the unkeyed mode once more on the Python receive path alone);
* ``switch``: mutated DLCP frames into a live ``dlcp-switch`` between namespaces (``tests/fuzz/switch_fuzz.py``);
* ``p4runtime``: mutated P4Runtime requests against the daemon's server (``tests/fuzz/p4rt_fuzz.py``);
* ``p4``: mutated P4 programs into the front end (``tests/switch/p4fuzz.py``, a few seconds in ``make test``).

``python -m tests.fuzz.run --seconds 60 --seed 1 --out results/fuzz.json [--only transport,switch]`` writes the
counts (inputs tried, crashes, hangs, corrupted results, each campaign's own counters, the machine and commit) and
exits 1 when any campaign broke its property. ``docs/fuzzing.md``'s table is generated from ``results/fuzz.json``
by ``make report`` (``testbed.report``), which ``make fuzz`` runs after the campaigns.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
TARGETS = ("transport", "switch", "p4runtime", "p4")


def campaign_main(doc: str | None, run: Callable[..., Any], ok: Callable[[Any], bool],
                  extra: Callable[[argparse.ArgumentParser], None] | None = None) -> int:
    """The command line of one campaign module (``python -m tests.fuzz.<name> --seed S --seconds T``): runs
    ``run(seed, seconds, **extra options)``, prints its result as JSON, exits 1 when ``ok(result)`` is false."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=30.0)
    if extra is not None:
        extra(ap)
    a = vars(ap.parse_args())
    r = run(a.pop("seed"), a.pop("seconds"), **a)
    print(json.dumps(asdict(r), indent=1))
    return 0 if ok(r) else 1


def _transport(seed: int, seconds: float) -> dict[str, Any]:
    from tests.fuzz.transport_fuzz import MODES, campaign
    from host import wire
    modes = MODES if any(f.name == "tag" for f in wire.FIELDS) else ("off",)
    out: dict[str, Any] = {"inputs": 0, "crashes": 0, "hangs": 0, "corrupted": 0, "failures": [], "modes": {}}
    runs = [(m, True) for m in modes] + [("off", False)]  # the C fast lanes, and the Python paths alone
    for mode, native in runs:
        r = campaign(seed, seconds / len(runs), mode=mode, native=native)
        d = asdict(r)
        out["modes"][mode if native else mode + "-python"] = d
        out["inputs"] += r.datagrams_sent
        for k in ("crashes", "hangs", "corrupted"):
            out[k] += d[k]
        out["failures"] += r.failures
    out["unit"] = "hostile datagrams sent (mutants, replays and duplicates), beside one genuine transfer per round"
    return out


def _switch(seed: int, seconds: float) -> dict[str, Any]:
    from tests.fuzz.switch_fuzz import campaign
    r = campaign(seed, seconds)
    d = asdict(r)
    return {"inputs": r.frames_sent, "crashes": r.crashes, "hangs": r.hangs, "corrupted": r.counter_errors,
            "failures": r.failures, "unit": "hostile frames sent into the switch", "detail": d}


def _p4runtime(seed: int, seconds: float) -> dict[str, Any]:
    from tests.fuzz.p4rt_fuzz import campaign
    r = campaign(seed, seconds)
    d = asdict(r)
    return {"inputs": r.requests, "crashes": r.crashes, "hangs": r.hangs, "corrupted": r.partial_states,
            "failures": r.failures, "unit": "mutated P4Runtime requests (Write, Read, SetForwardingPipelineConfig, "
                                            "StreamChannel)", "detail": d}


def _p4(seed: int, seconds: float) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT / "tests" / "switch"))
    from p4fuzz import campaign
    r = campaign(seed, 10**9, seconds)
    hangs = sum("no answer within" in f for f in r.failures)
    return {"inputs": r.tried, "crashes": len(r.failures) - hangs, "hangs": hangs, "corrupted": 0,
            "failures": r.failures, "unit": "mutated P4 programs compiled",
            "detail": {"tried": r.tried, "compiled": r.compiled, "located_errors": r.located_errors}}


_RUN: dict[str, Callable[[int, float], dict[str, Any]]] = {
    "transport": _transport, "switch": _switch, "p4runtime": _p4runtime, "p4": _p4}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0, help="budget of each target (default 60)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None, help="write the counts as JSON here")
    ap.add_argument("--only", default=",".join(TARGETS), help=f"comma-separated subset of {','.join(TARGETS)}")
    a = ap.parse_args(argv)
    only = [t for t in a.only.split(",") if t]
    bad = [t for t in only if t not in _RUN]
    if bad:
        ap.error(f"unknown target(s) {bad}; choose from {TARGETS}")
    sys.path.insert(0, str(ROOT / "bench"))
    from harness import machine_info  # the benchmarks' record of host, CPU, load and commit
    report: dict[str, Any] = {
        "name": "fuzz", "command": "make fuzz FUZZ_SECONDS=%g FUZZ_SEED=%d" % (a.seconds, a.seed),
        "seconds_per_target": a.seconds, "seed": a.seed, "targets": {}}
    for t in only:
        t0 = time.monotonic()
        r = _RUN[t](a.seed, a.seconds)
        r["wall_s"] = round(time.monotonic() - t0, 1)
        report["targets"][t] = r
        print(f"fuzz {t}: {r['inputs']} inputs ({r['unit']}), {r['crashes']} crashes, {r['hangs']} hangs, "
              f"{r['corrupted']} corrupted results, {r['wall_s']} s", flush=True)
        for f in r["failures"][:10]:
            print("  " + f.replace("\n", "\n  "))
    tot = {k: sum(r[k] for r in report["targets"].values()) for k in ("inputs", "crashes", "hangs", "corrupted")}
    report["totals"] = tot
    report["machine"] = machine_info()  # (at the end: the load average covers the campaigns)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    print(f"fuzz total: {tot['inputs']} inputs, {tot['crashes']} crashes, {tot['hangs']} hangs, "
          f"{tot['corrupted']} corrupted results")
    return 0 if not (tot["crashes"] or tot["hangs"] or tot["corrupted"]) and \
        not any(r["failures"] for r in report["targets"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())

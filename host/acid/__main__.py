"""``python -m host.acid``: A²CiD² training with the library (:class:`host.acid.library.Acid`).

    python -m host.acid run --workers 8 --data acid --algo acid --rate 1 --steps 300 --log-interval 0.25 --out r.json
    torchrun --nproc-per-node 4 -m host.acid train --model cnn --data digits --algo acid --out run.json
    # several hosts: the same ``train`` under torchrun (or MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE) on each

``train`` is one rank (:mod:`host.acid.train`); ``run`` starts ``--workers`` local ranks of it as torchrun would
(:mod:`host.acid.launch`), prints rank 0's summary and writes its record to ``--out``. Workers pair on the process
group's rendezvous store: there is no coordinator to start.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from host.acid.train import add_arguments


def _summary(res: dict[str, Any]) -> str:
    exchanges = f" exchanges={res['exchange_backend']}" if res.get("exchange_backend") else ""
    lines = [f"algo={res.get('algo')} graph={res.get('graph')} workers={res.get('world')} rate={res.get('rate')} "
             f"backend={res.get('backend')}{exchanges}: "
             f"{res.get('steps')} steps, {res.get('comms')} communications (counted per worker) in "
             f"{res.get('train_seconds', 0):.2f}s of training"]
    if res.get("constants"):
        lines.append("eta={eta:.4f} alpha~={alpha_tilde:.4f} (chi1={chi1:.4f}, chi2={chi2:.4f})".format(
            **res["constants"]))
    if res.get("series"):
        last = res["series"][-1]
        lines.append(f"last sample: consensus={last['consensus']:.3e} loss(avg)={last.get('loss')}")
    if res.get("final"):
        lines.append(f"final averaged model: loss={res['final']['loss']:.4f} acc={res['final']['acc']:.3f} "
                     f"(identical on every survivor: {res['final_identical']})")
    if res.get("dropped"):
        lines.append(f"dropped: {res['dropped']}")
    if res.get("error"):
        lines.append(f"ERROR: {res['error']} (logs: {res['log_dir']})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m host.acid", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    tr = sub.add_parser("train", help="one rank (run it under torchrun or with its env:// variables)")
    add_arguments(tr)
    run = sub.add_parser("run", help="--workers local ranks of `train`, started as torchrun would")
    run.add_argument("--workers", type=int, default=8)
    run.add_argument("--log-dir", help="worker logs and rank 0's record (default: a new temporary directory)")
    run.add_argument("--timeout", type=float, default=900.0, help="seconds before the launcher kills the ranks")
    add_arguments(run)
    argv = list(sys.argv[1:] if argv is None else argv)
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if a.cmd == "train":
        from host.acid.train import train
        try:
            train(a)
        except ValueError as e:
            ap.error(str(e))
        return 0
    from host.acid.launch import launch_local
    for r in (*dict(a.slow), *dict(a.kill)):
        if not 0 <= r < a.workers:
            ap.error(f"fault for rank {r}, outside the {a.workers} workers")
    if 0 in dict(a.kill):
        ap.error("--kill 0:...: rank 0 hosts the rendezvous store; killing it ends the whole run")
    # the ranks get the command line as given, less the launcher's own options
    rest, skip = [], False
    for tok in argv[argv.index("run") + 1:]:
        if skip:
            skip = False
            continue
        name = tok.split("=", 1)[0]
        if name in ("--workers", "--log-dir", "--timeout", "--out"):
            skip = "=" not in tok
            continue
        rest.append(tok)
    try:
        res = launch_local(a.workers, rest, log_dir=a.log_dir, timeout=a.timeout)
    except ValueError as e:
        ap.error(str(e))
    print(_summary(res))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1, default=float)
    return 0 if not res.get("error") else 1


if __name__ == "__main__":
    from host.procexit import exit_process

    exit_process(main())  # not interpreter finalization: see host/procexit.py

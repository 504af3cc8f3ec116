"""``python -m host.acid``: run an A²CiD² job locally, or its coordinator / one worker for a multi-host run.

    python -m host.acid run --workers 8 --graph ring --algo acid --rate 1 --steps 300 --out run.json
    python -m host.acid coordinator --bind 0.0.0.0:7300 --workers 8 ... --out run.json   # on one host
    python -m host.acid worker --coordinator 10.0.0.1:7300 --rank 3 [--addr 10.0.0.4]     # on each worker host
    torchrun --nproc-per-node 4 -m host.acid train --model cnn --data digits --algo acid   # the library, torchrun

``run``/``coordinator``/``worker`` drive the research harness (synthetic MLP, pairing service, DLCP transport,
consensus monitor); ``train`` is a plain user of the library (:mod:`host.acid.library`, see :mod:`host.acid.train`).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from host import wire
from host.acid.config import ALGOS, RunConfig
from host.acid.constants import TOPOLOGIES
from host.acid.problem import ProblemSpec


def _host_port(s: str, default_port: int | None = None) -> tuple[str, int]:
    host, sep, port = s.rpartition(":")
    if not sep:
        if default_port is None:
            raise argparse.ArgumentTypeError(f"{s!r}: expected host:port")
        return s, default_port
    try:
        return host, int(port)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r}: port {port!r} is not a number") from None


def _rank_value(kind: type):
    def parse(s: str) -> tuple[int, Any]:
        r, sep, v = s.partition(":")
        try:
            if not sep:
                raise ValueError
            return int(r), kind(v)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{s!r}: expected RANK:{kind.__name__.upper()}") from None
    return parse


def _config_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--algo", choices=ALGOS, default="acid")
    ap.add_argument("--graph", choices=TOPOLOGIES, default="ring")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--rate", type=float, default=1.0, help="communications per gradient step of each worker")
    ap.add_argument("--steps", type=int, default=200, help="mean gradient steps per worker (global budget / n)")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--mtu", type=int, default=None, help="DLCP path MTU (default: the kernel's path MTU)")
    ap.add_argument("--step-seconds", type=float, default=0.0,
                    help="pad each gradient step to this long by sleeping (emulates an accelerator)")
    ap.add_argument("--exchange-timeout", type=float, default=5.0)
    ap.add_argument("--collective-timeout", type=float, default=60.0)
    ap.add_argument("--dead-after", type=float, default=10.0)
    ap.add_argument("--log-interval", type=float, default=0.25)
    ap.add_argument("--max-seconds", type=float, default=600.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--features", type=int, default=32)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--samples", type=int, default=1024, help="samples per worker")
    ap.add_argument("--skew", type=float, default=0.8, help="fraction of a worker's samples from its home classes")
    ap.add_argument("--slow", type=_rank_value(float), action="append", default=[], metavar="RANK:SECONDS",
                    help="fault: add SECONDS of sleep to every gradient step of RANK")
    ap.add_argument("--kill", type=_rank_value(int), action="append", default=[], metavar="RANK:STEP",
                    help="fault: RANK kills itself (SIGKILL) at gradient step STEP")
    ap.add_argument("--out", help="write the run's record (JSON) here")


def _config(a: argparse.Namespace) -> RunConfig:
    return RunConfig(algo=a.algo, topology=a.graph, world=a.workers, rate_com=a.rate, steps=a.steps, lr=a.lr,
                     momentum=a.momentum, weight_decay=a.weight_decay, mtu=a.mtu, step_seconds=a.step_seconds,
                     exchange_timeout=a.exchange_timeout, collective_timeout=a.collective_timeout,
                     dead_after=a.dead_after, log_interval=a.log_interval, max_seconds=a.max_seconds, seed=a.seed,
                     problem=ProblemSpec(features=a.features, classes=a.classes, hidden=a.hidden, batch=a.batch,
                                         samples_per_worker=a.samples, skew=a.skew, seed=a.seed),
                     slow=dict(a.slow), kill=dict(a.kill))


def _summary(res: dict[str, Any]) -> str:
    lines = [f"algo={res['config']['algo']} graph={res['config']['topology']} workers={res['config']['world']} "
             f"rate={res['config']['rate_com']}: {res['steps']} steps, {res['comms']} communications (counted per "
             f"worker) in {res.get('train_seconds', 0):.2f}s of training"]
    if res.get("constants"):
        lines.append("eta={eta:.4f} alpha~={alpha_tilde:.4f} (chi1={chi1:.4f}, chi2={chi2:.4f})".format(
            **res["constants"]))
    if res["series"]:
        last = res["series"][-1]
        lines.append(f"last snapshot: consensus={last['consensus']:.3e} loss(avg)={last.get('loss')}")
    if res.get("final"):
        lines.append(f"final averaged model: loss={res['final']['loss']:.4f} acc={res['final']['acc']:.3f} "
                     f"(identical on every survivor: {res['final_identical']})")
    if res["dropped"]:
        lines.append(f"dropped: {res['dropped']}")
    if res.get("error"):
        lines.append(f"ERROR: {res['error']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m host.acid", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="the whole job on this machine (service + worker processes)")
    _config_args(run)
    run.add_argument("--log-dir", help="worker logs (default: a new temporary directory)")
    coord = sub.add_parser("coordinator", help="only the pairing service; workers join from elsewhere")
    _config_args(coord)
    coord.add_argument("--bind", type=_host_port, default=("0.0.0.0", 7300))
    wk = sub.add_parser("worker", help="one worker joining a coordinator")
    wk.add_argument("--coordinator", type=_host_port, required=True)
    wk.add_argument("--rank", type=int, required=True)
    wk.add_argument("--addr", help="host[:port] this worker's DLCP endpoint binds (default: the source address "
                                   f"towards the coordinator, port {wire.UDP_PORT})")
    wk.add_argument("--join-timeout", type=float, default=120.0)
    from host.acid.train import add_arguments
    tr = sub.add_parser("train", help="the library on the testbed's models and data (run under torchrun)")
    add_arguments(tr)
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    if a.cmd == "train":
        from host.acid.train import train
        train(a)
        return 0

    if a.cmd == "worker":
        from host.acid.worker import default_udp_addr, run_worker
        udp = _host_port(a.addr, wire.UDP_PORT) if a.addr else default_udp_addr(a.coordinator[0], wire.UDP_PORT)
        return run_worker(a.rank, a.coordinator, udp, join_timeout=a.join_timeout)

    try:
        cfg = _config(a)
    except ValueError as e:
        ap.error(str(e))
    if a.cmd == "run":
        from host.acid.launch import launch
        res = launch(cfg, log_dir=a.log_dir)
    else:
        from host.acid.launch import make_evaluator
        from host.acid.monitor import Monitor
        from host.acid.pairing import PairingService
        evaluator = make_evaluator(cfg)
        monitor = Monitor(cfg.world, evaluator)
        svc = PairingService(cfg, a.bind, monitor)
        logging.getLogger("host.acid").info("pairing service listening on %s:%d", *svc.address)
        svc.wait()
        monitor.flush()
        res = {"config": cfg.to_dict(), **svc.result(), "series": monitor.series}
        x = svc.final_model()
        res["final"] = evaluator(x) if x is not None else None
        res["steps"] = sum(r.get("steps", 0) for r in res["reports"].values())
        res["comms"] = sum(r.get("comms", 0) for r in res["reports"].values())
        svc.close()
    print(_summary(res))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1, default=float)
    return 0 if not res.get("error") else 1


if __name__ == "__main__":
    sys.exit(main())

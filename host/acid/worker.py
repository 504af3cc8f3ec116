"""One asynchronous worker: gradient steps, Poisson-timed pairwise averaging over the DLCP transport, the
continuous momentum, and the synchronous all-reduce baseline.

Threads of a worker process:

* **main** (gradient loop): copy x into the model's working buffer, forward/backward on a local minibatch, the
  optimiser step on the buffer; its change ``delta`` is then applied to x (and to x~) under the state lock, after
  mixing up to now. A slow or busy communication never blocks it beyond that short critical section.
* **communication**: a Poisson clock of rate ``rate_com`` per mean gradient-step time; when it fires the worker
  tells the pairing service it is free and waits for a partner (a free graph neighbour). The pair then exchanges
  x over the transport, the lower rank sending first (the higher one receives, then sends), and both apply the
  communication update. Events that lag more than ``max_backlog`` events behind the clock lapse.
* **monitor**: every ``log_interval`` a snapshot of x (and counters) to the service, which doubles as heartbeat.
* the transport's receive and progress threads.

Time is measured in units of the running mean gradient-step time (:class:`StepTimer`): mixing over a wall-clock
interval ``s`` uses ``dt = s / mean_step``, and the Poisson clock's gaps are ``Exp(rate_com) * mean_step``.

``algo = "gossip"``: the same without x~ (eta = alpha~ = 0). ``algo = "allreduce"``: every step averages the
gradients of all workers (ring/recursive-doubling all-reduce from :mod:`host.collectives`) before the optimiser
step; exactly ``steps`` steps each, no pairing. All algorithms start from the global average of the workers'
initial models and end with the global average of the survivors' models.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import time
from collections import Counter
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from host.acid.config import RunConfig
from host.acid.constants import acid_constants
from host.acid.mixing import sgd_momentum_delta
from host.acid.pairing import CoordinatorClient
from host.acid.problem import FlatModel, build_model, make_shard
from host.acid.state import AcidState, StepTimer
from host.collectives import Collectives, EndpointLink, ReduceOp
from host.transport import Endpoint, Options, TransportError, path_mtu

__all__ = ["StepTimer", "AcidState", "exchange", "gossip_transfer_id", "Worker", "run_worker",
           "default_udp_addr"]

log = logging.getLogger("host.acid.worker")

SWITCH_INTERVAL = 0.0005  # seconds; see run_worker
GOSSIP_TID_BIT = 1 << 31  # collectives use group tags 0 and 1 (ids < 2^27): gossip ids never collide with them


def gossip_transfer_id(pair_id: int) -> int:
    return GOSSIP_TID_BIT | (pair_id & (GOSSIP_TID_BIT - 1))


def exchange(ep: Endpoint, state: AcidState, peer: int, transfer_id: int, timeout: float) -> None:
    """Pairwise averaging of x with ``peer`` over the transport; the lower rank sends first. Raises
    :class:`TransportError` (nothing applied locally) if the peer does not deliver within ``timeout``."""
    other = torch.empty_like(state.x)
    if ep.rank < peer:
        sent = state.snapshot()
        h = ep.send(peer, sent, transfer_id=transfer_id)
        ep.recv(peer, transfer_id, other, timeout=timeout)
        h.wait(timeout)
    else:
        ep.recv(peer, transfer_id, other, timeout=timeout)
        sent = state.snapshot()
        h = ep.send(peer, sent, transfer_id=transfer_id)
        h.wait(timeout)
    state.apply_communication(sent, other)


class Worker:
    """One rank of a run, from the service's ``start`` message to the final average."""

    def __init__(self, rank: int, client: CoordinatorClient, start: dict[str, Any]):
        self.rank = rank
        self.client = client
        self.cfg = cfg = RunConfig.from_dict(start["config"])
        self.neighbors = list(start["neighbors"][rank])
        self.addr_map = {int(r): (a[0], int(a[1])) for r, a in start["addr_map"].items()}
        self.job_id, self.nonce = int(start["job_id"]), int(start["nonce"])
        spec = cfg.problem
        self.X, self.y = make_shard(spec, cfg.world, rank)
        self.flat = FlatModel(build_model(spec, seed=cfg.seed * 7919 + rank))
        self.mom_buf = torch.zeros_like(self.flat.flat) if cfg.momentum else None
        self.gen = torch.Generator().manual_seed(cfg.seed * 104729 + rank)
        self.timer = StepTimer()
        self.acid = cfg.algo == "acid"
        if self.acid:
            k = acid_constants(cfg.topology, cfg.world, cfg.rate_com)
            self.eta, self.alpha_tilde = k.eta, k.alpha_tilde
        else:
            self.eta = self.alpha_tilde = 0.0
        self.state = AcidState(self.flat.flat.clone(), eta=self.eta, alpha_tilde=self.alpha_tilde,
                               momentum=self.acid, timer=self.timer)
        self.steps = 0
        self.comms = 0
        self.failed_exchanges = 0
        self.lapsed_events = 0
        self.pair_wait_seconds = 0.0  # time free workers waited for a partner
        self.exchange_seconds = 0.0  # time spent in exchanges
        self.peer_counts: Counter[int] = Counter()
        self._loss_sum = 0.0
        self._loss_n = 0
        self._training = threading.Event()
        self._finished = threading.Event()
        self._t_train = time.monotonic()
        self.error: BaseException | None = None
        self.mtu = cfg.mtu or path_mtu(self.addr_map[rank][0],
                                       [a[0] for r, a in self.addr_map.items() if r != rank])
        self.ep = Endpoint(rank, self.addr_map, self.job_id, self.nonce,
                           Options(mtu=self.mtu, peer_timeout=max(cfg.exchange_timeout, 1.0),
                                   recv_timeout=cfg.exchange_timeout))
        self.link = EndpointLink(self.ep)

    # --- the run ----------------------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        cfg = self.cfg
        monitor = threading.Thread(target=self._monitor_loop, name=f"acid-monitor-{self.rank}", daemon=True)
        monitor.start()
        try:
            everyone = Collectives(self.link, list(range(cfg.world)), self.rank, group_tag=0,
                                   timeout=cfg.collective_timeout)
            with torch.no_grad():  # start from the global average (x~ = x)
                everyone.allreduce(self.state.x, ReduceOp.AVG)
                if self.state.xt is not None:
                    self.state.xt.copy_(self.state.x)
            self._t_train = time.monotonic()
            self._training.set()
            if cfg.algo == "allreduce":
                self._sync_loop(everyone)
            else:
                self._async_loop()
            self._training.clear()
            train_seconds = time.monotonic() - self._t_train
            if self.error is not None:
                raise self.error
            # the final global average over the workers still alive
            self.client.send({"op": "final_ready", "steps": self.steps})
            survivors = self.client.wait_survivors(cfg.collective_timeout + cfg.exchange_timeout)
            x = self.state.x.clone()
            if len(survivors) > 1:
                Collectives(self.link, survivors, self.rank, group_tag=1,
                            timeout=cfg.collective_timeout).allreduce(x, ReduceOp.AVG)
            report = self._report(train_seconds, survivors)
            self.client.send({"op": "done", "report": report}, memoryview(x.numpy()).cast("B"))
            return report
        finally:
            self._finished.set()
            self._training.set()  # release the monitor thread if training never started
            monitor.join(5)
            self.ep.close()

    def _gradient(self, work: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Loss and flat gradient on a local minibatch at the parameters ``work`` (the model's flat buffer)."""
        self.state.read_into(work)
        b = self.cfg.problem.batch
        idx = torch.randint(0, self.X.shape[0], (b,), generator=self.gen)
        for p in self.flat.params:
            p.grad = None
        loss = F.cross_entropy(self.flat.module(self.X[idx]), self.y[idx])
        loss.backward()
        return loss.detach(), self.flat.flat_grad()

    def _delta(self, work: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        return sgd_momentum_delta(work, g, self.mom_buf, lr=cfg.lr, momentum=cfg.momentum,
                                  weight_decay=cfg.weight_decay)

    def _after_step(self, loss: torch.Tensor, seconds_start: float) -> None:
        cfg = self.cfg
        self.steps += 1
        self._loss_sum += float(loss)
        self._loss_n += 1
        if cfg.step_seconds:
            rest = cfg.step_seconds - (time.monotonic() - seconds_start)
            if rest > 0:
                time.sleep(rest)
        if self.rank in cfg.slow:
            time.sleep(cfg.slow[self.rank])
        if cfg.kill.get(self.rank) == self.steps:
            log.warning("rank %d: fault injection, killing this worker at step %d", self.rank, self.steps)
            os.kill(os.getpid(), signal.SIGKILL)
        self.timer.add(time.monotonic() - seconds_start)

    def _async_loop(self) -> None:
        work = self.flat.flat
        comm: threading.Thread | None = None
        stopped = self.client.stopped
        while not stopped.is_set():
            t0 = time.monotonic()
            loss, g = self._gradient(work)
            self.state.apply_gradient(self._delta(work, g))
            self._after_step(loss, t0)
            if comm is None:  # the first step measured the unit of time: start the clock and the communications
                self.state.start_clock()
                comm = threading.Thread(target=self._comm_loop, name=f"acid-comm-{self.rank}", daemon=True)
                comm.start()
            if self.error is not None:
                break
        if comm is not None:
            comm.join()

    def _comm_loop(self) -> None:
        cfg = self.cfg
        rng = np.random.default_rng([cfg.seed, self.rank, 1])
        gap = lambda: rng.exponential(1.0 / cfg.rate_com) * (self.timer.mean or 0.0)  # noqa: E731
        next_t = time.monotonic() + gap()
        try:
            while not self.client.stopped.is_set():
                wait = next_t - time.monotonic()
                if wait > 0 and self.client.stopped.wait(wait):
                    break
                t_free = time.monotonic()
                pair = self.client.request_pair(self.steps)
                t_pair = time.monotonic()
                self.pair_wait_seconds += t_pair - t_free
                if pair is None:
                    break
                peer, pair_id = pair
                try:
                    exchange(self.ep, self.state, peer, gossip_transfer_id(pair_id), cfg.exchange_timeout)
                    self.comms += 1
                    self.peer_counts[peer] += 1
                    self.exchange_seconds += time.monotonic() - t_pair
                except TransportError as e:
                    self.failed_exchanges += 1
                    log.warning("rank %d: exchange %d with rank %d failed: %s", self.rank, pair_id, peer, e)
                    self.client.send({"op": "exchange_failed", "peer": peer, "error": str(e), "steps": self.steps})
                now = time.monotonic()
                next_t += gap()
                lag = cfg.max_backlog / cfg.rate_com * (self.timer.mean or 0.0)
                if next_t < now - lag:  # the clock ran ahead of what pairing and the network could serve
                    self.lapsed_events += 1
                    next_t = now - lag
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            log.exception("rank %d: communication thread failed", self.rank)
            self.error = e
            self.client.stopped.set()

    def _sync_loop(self, group: Collectives) -> None:
        work = self.flat.flat
        for _ in range(self.cfg.steps):
            t0 = time.monotonic()
            loss, g = self._gradient(work)
            group.allreduce(g, ReduceOp.AVG)
            self.state.apply_gradient(self._delta(work, g))
            self._after_step(loss, t0)

    def _monitor_loop(self) -> None:
        """Snapshots of x every ``log_interval`` of training (heartbeats otherwise come from the client)."""
        interval = self.cfg.log_interval
        self._training.wait()
        tick = 0
        while self._training.is_set() and not self._finished.is_set():
            now = time.monotonic()
            tick = max(tick + 1, int((now - self._t_train) / interval))
            if self._finished.wait(max(0.0, self._t_train + tick * interval - now)):
                return
            if not self._training.is_set():
                return
            # x at the tick time: mixing is a flow, so advancing the state now changes nothing later, while an
            # unmixed x is x as of this worker's last event (up to a step old; over one step with eta = 0.29 the
            # mixing moves x a fifth of the way to x~), so workers' snapshots would not be at the same time
            x = self.state.snapshot(mix=True)
            loss = self._loss_sum / self._loss_n if self._loss_n else None
            self._loss_sum, self._loss_n = 0.0, 0
            self.client.send({"op": "progress", "steps": self.steps, "tick": tick,
                              "t": time.monotonic() - self._t_train,
                              "info": {"steps": self.steps, "comms": self.comms, "loss": loss}},
                             memoryview(x.numpy()).cast("B"))

    def _report(self, train_seconds: float, survivors: list[int]) -> dict[str, Any]:
        st = self.ep.stats()
        return {
            "rank": self.rank, "steps": self.steps, "comms": self.comms,
            "comms_per_step": self.comms / self.steps if self.steps else 0.0,
            "failed_exchanges": self.failed_exchanges, "lapsed_events": self.lapsed_events,
            "pair_wait_seconds": self.pair_wait_seconds,
            "mean_exchange_seconds": self.exchange_seconds / self.comms if self.comms else None,
            "mean_step_seconds": self.timer.mean, "train_seconds": train_seconds,
            "peers": {str(p): n for p, n in sorted(self.peer_counts.items())}, "survivors": survivors,
            "eta": self.eta, "alpha_tilde": self.alpha_tilde, "params": self.state.x.numel(), "mtu": self.mtu,
            "transport": {k: st[k] for k in ("tx_bytes", "rx_bytes", "retransmissions", "transfers_sent",
                                             "transfers_received", "peer_timeouts", "recv_timeouts")},
        }


def default_udp_addr(coordinator_host: str, port: int) -> tuple[str, int]:
    """Our source address towards the coordinator (no packet is sent), with the given UDP port."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect((socket.gethostbyname(coordinator_host), 9))
        return s.getsockname()[0], port
    finally:
        s.close()


def run_worker(rank: int, coordinator: tuple[str, int], udp_addr: tuple[str, int], *,
               join_timeout: float = 120.0, log_path: str | None = None) -> int:
    """Process entry: join the run, train, average, report. Returns the exit status (0 = done)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    # The gradient thread holds the GIL for long stretches; an exchange hands over between the communication
    # thread and the transport's threads several times, each waiting up to the switch interval (5 ms default).
    sys.setswitchinterval(SWITCH_INTERVAL)
    if log_path:
        logging.basicConfig(filename=log_path, level=logging.INFO, force=True,
                            format=f"%(asctime)s rank{rank} %(name)s %(levelname)s %(message)s")
    client = CoordinatorClient(coordinator, rank, udp_addr)
    try:
        start = client.wait_start(join_timeout)
        client.start_heartbeat(min(1.0, float(start["config"].get("log_interval", 0.25))))
        Worker(rank, client, start).run()
        return 0
    except BaseException as e:  # noqa: BLE001 - the process reports and exits non-zero
        log.error("rank %d failed: %s: %s", rank, type(e).__name__, e, exc_info=not isinstance(
            e, (TransportError, ConnectionError, TimeoutError)))
        return 1
    finally:
        client.close()


"""A²CiD² (and plain asynchronous gossip) as a library: wrap any ``nn.Module`` and any optimizer (and LR
scheduler) on an existing process group, e.g. one ``torchrun`` started. See ``docs/acid.md``.

    dist.init_process_group("gloo")                      # torchrun's env:// rendezvous
    acid = Acid(model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), topology="ring")
    for x, y in data:
        optimizer.zero_grad()
        loss_fn(acid(x), y).backward()
        acid.step()                                      # the optimizer's step (and the scheduler's)
    acid.finish()                                        # stop gossiping, average the models

Design (one rank):

* **x and x~**: ``x`` is a flat master copy of the trainable parameters; the model's parameters are a *working
  copy* refreshed from ``x`` after every ``step()``, so the communication thread never writes tensors autograd
  saved. ``step()`` runs the user's optimizer on the working copy and applies its change (whatever the optimizer:
  SGD, momentum, Adam...) to ``x`` and to ``x~`` alike, after mixing both up to now (``host.acid.mixing``).
* **time** is counted in mean gradient-step times (the running mean of the intervals between ``step()`` calls):
  mixing over ``s`` seconds uses ``dt = s / mean``, and the communication clock is a Poisson process of rate
  ``rate_com`` per mean step time.
* **pairing** runs on the process group's store (the TCPStore of the rendezvous): no coordinator. Every rank owns
  a slot ``idle | wait | pair:<peer>:<id> | stopped``. A rank whose clock fired tries to take a waiting graph
  neighbour (compare-and-set ``wait -> pair:<me>:<id>`` on the neighbour's slot); if none waits it sets its own
  slot to ``wait`` and polls it. A waiting rank periodically withdraws (``wait -> idle``; if that fails it was just
  taken), retries taking a waiting neighbour and waits again, so two neighbours that both wait pair up. A rank is
  in at most one pair at a time, and only ``wait`` slots are ever taken, so pairs never conflict.
* **exchange**: the pair swaps ``x`` with ``isend``/``irecv`` on a private gloo group over the same ranks (tag =
  pair id), each within ``exchange_timeout``; both apply ``x~ += alpha~ (x_peer - x_sent)``,
  ``x += (x_peer - x_sent)/2``. A failed exchange (dead peer) is counted and logged; nothing is applied.
* **liveness and the end**: every rank bumps a heartbeat counter on the store (``beat/<rank>``) every
  ``dead_after / 4`` seconds from a thread of its own. ``finish()`` marks the rank arrived and waits until every
  other rank has either arrived or left its counter unchanged for ``dead_after`` seconds (dead); the first rank
  to see that writes the list of arrived ranks (the survivors) once, by compare-and-set, and everyone uses that
  list, so all survivors agree even when a death races with an arrival. The final average runs over the whole
  group when nobody died, else over a group of the survivors (``new_group(use_local_synchronization=True)``:
  the dead rank takes no part). A rank missing from the list (it was silent too long) gets :class:`AcidError`.
  The store lives in rank 0's process (torchrun's default rendezvous), so rank 0's death ends the run with an
  error from the store (its timeout), not a hang.
* ``algo="gossip"`` is plain asynchronous gossip (``eta = alpha~ = 0``, no x~): the baseline at the same rate.
"""

from __future__ import annotations

import itertools
import logging
import random
import threading
import time
from collections import Counter
from datetime import timedelta
from typing import Any, Callable

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from host.acid.constants import TOPOLOGIES, acid_constants, neighbors
from host.acid.state import AcidState, StepTimer

__all__ = ["Acid", "AcidError", "StorePairing"]

log = logging.getLogger("host.acid.library")

IDLE, WAIT, STOPPED = b"idle", b"wait", b"stopped"
_instances = itertools.count()


class AcidError(RuntimeError):
    """A²CiD² was used against its contract, or its pairing or communication failed."""


class StorePairing:
    """Pairs graph neighbours through a key-value store's compare-and-set (see the module's docstring).

    ``store``: a ``torch.distributed.Store`` shared by the ranks (prefixed per instance by the caller);
    ``neigh``: this rank's graph neighbours. Every rank must construct it (it initialises its own slot) before
    any rank pairs: :class:`Acid` puts a barrier in between."""

    def __init__(self, store, rank: int, neigh: list[int], *, poll: float = 0.002, seed: int = 0):
        self.store, self.rank, self.neigh, self.poll = store, rank, list(neigh), poll
        self._rng = random.Random(seed * 1_000_003 + rank)
        self.store.set(self._slot(rank), IDLE)

    @staticmethod
    def _slot(r: int) -> str:
        return f"slot/{r}"

    @staticmethod
    def _parse(v: bytes) -> tuple[int, int] | None:
        if v.startswith(b"pair:"):
            _, peer, pid = v.decode().split(":")
            return int(peer), int(pid)
        return None

    def _try_take(self) -> tuple[int, int] | None:
        """Take a waiting neighbour, if there is one: ``(peer, pair id)``."""
        order = self.neigh[:]
        self._rng.shuffle(order)
        for j in order:
            if self.store.get(self._slot(j)) != WAIT:
                continue
            pid = int(self.store.add("pairs", 1))
            want = f"pair:{self.rank}:{pid}".encode()
            if self.store.compare_set(self._slot(j), WAIT.decode(), want.decode()) == want:
                return j, pid
        return None

    def request(self, stop: threading.Event, timeout: float | None = None) -> tuple[int, int] | None:
        """A partner for one exchange, ``(peer, pair id)``; None once ``stop`` is set (or after ``timeout``)."""
        me = self._slot(self.rank)
        got = self._try_take()
        if got is not None:
            return got
        if self.store.compare_set(me, IDLE.decode(), WAIT.decode()) != WAIT:
            raise AcidError(f"rank {self.rank}: pairing slot not idle when requesting a pair")
        deadline = None if timeout is None else time.monotonic() + timeout
        polls = 0
        while True:
            v = self.store.get(me)
            p = self._parse(v)
            if p is not None:
                self.store.set(me, IDLE)
                return p
            polls += 1
            ending = stop.is_set() or (deadline is not None and time.monotonic() > deadline)
            if ending or polls % 8 == 0:  # withdraw: either we were just taken, or we may take a waiting neighbour
                v = self.store.compare_set(me, WAIT.decode(), IDLE.decode())
                p = self._parse(v)
                if p is not None:
                    self.store.set(me, IDLE)
                    return p
                if ending:
                    return None
                got = self._try_take()
                if got is not None:
                    return got
                if self.store.compare_set(me, IDLE.decode(), WAIT.decode()) != WAIT:
                    raise AcidError(f"rank {self.rank}: pairing slot changed while idle")
            stop.wait(self.poll * (0.5 + self._rng.random()))

    def stop(self) -> tuple[int, int] | None:
        """Leave the pairing for good. Returns a pair that took this rank just before (it must still be served)."""
        me = self._slot(self.rank)
        while True:
            v = self.store.compare_set(me, IDLE.decode(), STOPPED.decode())
            if v == STOPPED:
                return None
            p = self._parse(v)
            if p is not None:
                self.store.set(me, IDLE)
                return p
            if v == WAIT:
                self.store.compare_set(me, WAIT.decode(), IDLE.decode())


class Acid:
    """A²CiD² data-parallel training of ``model`` with ``optimizer`` (and ``scheduler``) over ``process_group``.

    ``topology``: ``ring``, ``exponential`` or ``complete`` over the group's ranks; ``rate_com``: expected
    pairwise communications per gradient step of each worker; ``algo``: ``"acid"`` = A²CiD² (x~, eta, alpha~ of
    the graph), ``"gossip"`` = plain asynchronous gossip (the optimizer's own momentum is another matter); ``start_average``: average the ranks' initial models at
    construction (then x~ = x); ``communicate``: False = no background communication (only explicit
    :meth:`exchange` calls, e.g. deterministic tests); ``exchange_timeout``: seconds an exchange may take;
    ``dead_after``: seconds without a heartbeat after which ``finish()`` leaves a rank out of the final average;
    ``exchange_backend``: the backend of the exchanges' private group (``"gloo"``; ``None``: the process group's
    own, e.g. ``"dlcp"`` to gossip over the DLCP transport); ``store``: the store to pair on (default: the
    default process group's); ``clock``: the time source (seconds).
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, process_group=None, *,
                 scheduler: Any = None, topology: str = "ring", rate_com: float = 1.0, algo: str = "acid",
                 start_average: bool = True, communicate: bool = True, exchange_timeout: float = 10.0,
                 dead_after: float = 30.0, exchange_backend: str | None = "gloo", store=None, seed: int = 0,
                 clock: Callable[[], float] = time.monotonic):
        if not dist.is_initialized():
            raise AcidError("Acid needs torch.distributed initialised (dist.init_process_group, e.g. by torchrun)")
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
        if topology not in TOPOLOGIES:
            raise ValueError(f"topology must be one of {', '.join(TOPOLOGIES)}, got {topology!r}")
        if not rate_com > 0:
            raise ValueError(f"rate_com must be > 0, got {rate_com!r}")
        if not exchange_timeout > 0:
            raise ValueError(f"exchange_timeout must be > 0, got {exchange_timeout!r}")
        if not dead_after > 0:
            raise ValueError(f"dead_after must be > 0, got {dead_after!r}")
        self.dead_after = float(dead_after)
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.process_group = process_group
        self.world = dist.get_world_size(process_group)
        self.rank = dist.get_rank(process_group)
        if self.world < 2:
            raise ValueError("A²CiD² needs at least 2 workers")
        if algo not in ("acid", "gossip"):
            raise ValueError(f"algo must be 'acid' or 'gossip', got {algo!r}")
        momentum = algo == "acid"
        self.algo, self.topology, self.rate_com, self.momentum = algo, topology, float(rate_com), momentum
        self.exchange_timeout = exchange_timeout
        self.params = [p for p in model.parameters() if p.requires_grad]
        if not self.params:
            raise ValueError("the model has no trainable parameters")
        dtypes = {p.dtype for p in self.params}
        if len(dtypes) != 1 or not next(iter(dtypes)).is_floating_point:
            raise ValueError(f"Acid needs every trainable parameter in one floating-point dtype, got {dtypes}")
        in_opt = {id(p) for g in optimizer.param_groups for p in g["params"]}
        names = {id(p): n for n, p in model.named_parameters()}
        missing = [names.get(id(p), "?") for p in self.params if id(p) not in in_opt]
        if missing:
            raise ValueError(f"trainable parameters not in the optimizer: {missing}")
        self.neighbors = neighbors(topology, self.world)[self.rank]
        if momentum:
            k = acid_constants(topology, self.world, self.rate_com)
            self.eta, self.alpha_tilde = k.eta, k.alpha_tilde
        else:
            self.eta = self.alpha_tilde = 0.0
        self._clock = clock
        self.timer = StepTimer()
        with torch.no_grad():
            x = torch.cat([p.detach().reshape(-1) for p in self.params]).clone()
        if start_average:
            w = dist.all_reduce(x, group=process_group, async_op=True)
            w.wait()
            x.div_(self.world)
        self.state = AcidState(x, eta=self.eta, alpha_tilde=self.alpha_tilde, momentum=momentum, timer=self.timer,
                               clock=clock)
        self._work = x.clone()  # the working copy's value when the optimizer last saw it
        self._write_params()
        self._t_step: float | None = None
        self.steps = 0
        self.comms = 0
        self.failed_exchanges = 0
        self.exchange_seconds = 0.0  # time spent in successful exchanges
        self.peer_counts: Counter[int] = Counter()
        self._error: BaseException | None = None
        self._closed = False

        ranks = (list(range(dist.get_world_size())) if process_group is None
                 else dist.get_process_group_ranks(process_group))
        # the exchanges' own group (every rank, in order)
        self._p2p = dist.new_group(ranks=ranks, backend=exchange_backend or dist.get_backend(process_group))
        self.exchange_backend = str(dist.get_backend(self._p2p))  # what the exchanges run on (records say it)
        self._glob = ranks
        inst = next(_instances)
        base = store if store is not None else dist.distributed_c10d._get_default_store()
        self._store = dist.PrefixStore(f"acid/{inst}/{'-'.join(map(str, ranks))}/", base)
        self.pairing = StorePairing(self._store, self.rank, self.neighbors, seed=seed)
        self.survivors: list[int] | None = None  # group ranks in the final average (set by finish())
        self.final_group = process_group  # the group over the survivors (set by finish())
        self._beating = threading.Event()
        self._beat_thread = threading.Thread(target=self._beat_loop, name=f"acid-beat-{self.rank}", daemon=True)
        self._beat_thread.start()
        dist.barrier(group=self._p2p)  # every slot exists before anyone pairs
        self._stop = threading.Event()
        self._rng = np.random.default_rng([seed, self.rank, 7])
        self._comm: threading.Thread | None = None
        self.communicate = communicate

    # ------------------------------------------------------------------------------------------------ training
    def __call__(self, *args, **kwargs):
        return self.model(*args, **kwargs)

    def step(self) -> None:
        """The optimizer's step on the working copy; its change goes to x and x~ (after mixing them up to now);
        then the scheduler's step and a fresh working copy from x. Starts the communication after the first."""
        self._check()
        now = self._clock()
        if self._t_step is not None:
            self.timer.add(now - self._t_step)
        self._t_step = now
        self.optimizer.step()
        with torch.no_grad():
            delta = torch.cat([p.detach().reshape(-1) for p in self.params]).sub_(self._work)
            self.state.apply_gradient(delta)
            self.state.read_into(self._work)
            self._write_params()
        if self.scheduler is not None:
            self.scheduler.step()
        self.steps += 1
        if self.communicate and self._comm is None and self.timer.mean is not None:
            self._comm = threading.Thread(target=self._comm_loop, name=f"acid-comm-{self.rank}", daemon=True)
            self._comm.start()

    def finish(self, average: bool = True) -> None:
        """Stop communicating; with ``average`` (every live rank calls it) replace every surviving rank's model by
        the average of the survivors' x (x~ too), and average its floating-point buffers (BatchNorm statistics,
        which are local during training). Survivors: the ranks that reached ``finish`` while the others were
        silent for ``dead_after`` seconds (see the module's docstring); :attr:`survivors` and
        :attr:`final_group` say who and over which group."""
        try:
            self.stop_communication()
            if average:
                self.survivors = self._agree_survivors()
                if len(self.survivors) < self.world:
                    self.final_group = dist.new_group([self._glob[r] for r in self.survivors],
                                                      use_local_synchronization=True)
                n = len(self.survivors)
                st = self.state
                with torch.no_grad(), st.lock:
                    w = dist.all_reduce(st.x, group=self.final_group, async_op=True)
                    w.wait()
                    st.x.div_(n)
                    if st.xt is not None:
                        st.xt.copy_(st.x)
                    self._work.copy_(st.x)
                self._write_params()
                with torch.no_grad():  # floating-point buffers (BatchNorm statistics) are local until now
                    for b in self.model.buffers():
                        if b.is_floating_point():
                            dist.all_reduce(b, group=self.final_group)
                            b.div_(n)
        finally:
            self._beating.set()
        self._check()

    def _agree_survivors(self) -> list[int]:
        """The group ranks in the final average, the same list on every survivor (see the module's docstring)."""
        store, me = self._store, self.rank
        store.set(f"arrived/{me}", b"1")
        seen: dict[int, tuple[int, float]] = {}
        while True:
            if store.check(["survivors"]):
                survivors = [int(r) for r in store.get("survivors").decode().split(",")]
                break
            now = time.monotonic()
            arrived, silent = [], []
            for r in range(self.world):
                if store.check([f"arrived/{r}"]):
                    arrived.append(r)
                    continue
                beat = int(store.add(f"beat/{r}", 0))
                if r not in seen or seen[r][0] != beat:
                    seen[r] = (beat, now)
                elif now - seen[r][1] > self.dead_after:
                    silent.append(r)
            if len(arrived) + len(silent) == self.world:
                store.compare_set("survivors", "", ",".join(map(str, arrived)))
                continue  # read back whatever list won
            time.sleep(min(0.05, self.dead_after / 20))
        gone = sorted(set(range(self.world)) - set(survivors))
        if gone:
            log.warning("rank %d: ranks %s silent for %.0fs: left out of the final average", me, gone,
                        self.dead_after)
        if me not in survivors:
            raise AcidError(f"rank {me}: left out of the final average (the others saw no heartbeat from it for "
                            f"{self.dead_after}s); survivors: {survivors}")
        return survivors

    def _beat_loop(self) -> None:
        key = f"beat/{self.rank}"
        try:
            while True:
                self._store.add(key, 1)
                if self._beating.wait(self.dead_after / 4):
                    return
        except Exception as e:  # noqa: BLE001 - the store is gone (rank 0 died): the next step() raises
            if not self._beating.is_set():
                self._error = self._error or e

    def stop_communication(self) -> None:
        """Stop the background communication (an exchange already agreed with a peer is completed first)."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._comm is not None:
            self._comm.join()
        pending = self.pairing.stop()
        if pending is not None:  # a neighbour took us just before: serve it, or it fails
            self._exchange(*pending)

    # ------------------------------------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """x, x~, the optimizer's (and scheduler's) state, the step count and the unit of time."""
        st = self.state
        with st.lock:
            st._mix_to_now()
            sd = {"x": st.x.clone(), "xt": None if st.xt is None else st.xt.clone(),
                  "optimizer": self.optimizer.state_dict(), "steps": self.steps, "mean_step": self.timer.mean,
                  "algo": self.algo}
        if self.scheduler is not None:
            sd["scheduler"] = self.scheduler.state_dict()
        return sd

    def load_state_dict(self, state: dict[str, Any]) -> None:
        x, st = state["x"], self.state
        if x.shape != st.x.shape or x.dtype != st.x.dtype:
            raise ValueError(f"Acid checkpoint: x has shape {tuple(x.shape)} {x.dtype}, this model "
                             f"{tuple(st.x.shape)} {st.x.dtype}")
        if state.get("algo", "acid") != self.algo or (state.get("xt") is None) == self.momentum:
            raise ValueError(f"Acid checkpoint: saved by algo={state.get('algo')!r}, this Acid runs {self.algo!r}")
        with torch.no_grad(), st.lock:
            st.x.copy_(x)
            if st.xt is not None:
                st.xt.copy_(state["xt"])
            self._work.copy_(st.x)
            st.t_last = self._clock()
        self._write_params()
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None and "scheduler" in state:
            self.scheduler.load_state_dict(state["scheduler"])
        self.steps = int(state.get("steps", 0))
        if state.get("mean_step") is not None:
            self.timer.mean = float(state["mean_step"])

    # ------------------------------------------------------------------------------------------------ gossip
    def exchange(self, peer: int, pair_id: int) -> None:
        """One pairwise averaging with ``peer`` now, blocking; ``peer`` must call it with this rank and the same
        ``pair_id`` (the background thread does this itself; this is for explicit schedules and tests)."""
        self._exchange(peer, pair_id)

    def consensus_snapshot(self) -> torch.Tensor:
        """x mixed up to now (a copy)."""
        return self.state.snapshot()

    @property
    def x(self) -> torch.Tensor:
        """The parameters this worker trains and communicates (flat; the model holds a working copy)."""
        return self.state.x

    @property
    def xt(self) -> torch.Tensor | None:
        """x~, the continuous momentum's companion of x (None for plain gossip)."""
        return self.state.xt

    def _exchange(self, peer: int, pair_id: int) -> None:
        t0 = time.monotonic()
        sent = self.state.snapshot()
        other = torch.empty_like(sent)
        tag = pair_id % (1 << 30)
        works = [dist.isend(sent, group=self._p2p, group_dst=peer, tag=tag),
                 dist.irecv(other, group=self._p2p, group_src=peer, tag=tag)]
        for w in works:
            w.wait(timedelta(seconds=self.exchange_timeout))
        self.state.apply_communication(sent, other)
        self.comms += 1
        self.peer_counts[peer] += 1
        self.exchange_seconds += time.monotonic() - t0

    def _comm_loop(self) -> None:
        def gap() -> float:
            return float(self._rng.exponential(1.0 / self.rate_com)) * (self.timer.mean or 0.0)
        next_t = time.monotonic() + gap()
        try:
            while not self._stop.is_set():
                wait = next_t - time.monotonic()
                if wait > 0 and self._stop.wait(wait):
                    break
                pair = self.pairing.request(self._stop)
                if pair is None:
                    break
                try:
                    self._exchange(*pair)
                except RuntimeError as e:  # a dead or silent peer: counted, logged, nothing applied
                    self.failed_exchanges += 1
                    log.warning("rank %d: exchange %d with rank %d failed: %s", self.rank, pair[1], pair[0], e)
                now = time.monotonic()
                next_t = max(next_t + gap(), now - 2.0 / self.rate_com * (self.timer.mean or 0.0))
        except BaseException as e:  # noqa: BLE001 - raised in the training thread by the next step()
            log.exception("rank %d: A²CiD² communication thread failed", self.rank)
            self._error = e

    # ------------------------------------------------------------------------------------------------ internals
    def _check(self) -> None:
        if self._error is not None:
            raise AcidError(f"rank {self.rank}: communication failed: {self._error}") from self._error

    def _write_params(self) -> None:
        """The working copy (the model's parameters) := the value the optimizer last saw."""
        with torch.no_grad():
            pos = 0
            for p in self.params:
                n = p.numel()
                p.copy_(self._work[pos:pos + n].view_as(p))
                pos += n

    @property
    def mixing_constants(self) -> tuple[float, float]:
        """``(eta, alpha~)`` in use (both 0 for plain gossip)."""
        return self.eta, self.alpha_tilde

    def __repr__(self) -> str:
        return (f"Acid(rank={self.rank}/{self.world}, topology={self.topology}, rate_com={self.rate_com}, "
                f"eta={self.eta:.4g}, alpha~={self.alpha_tilde:.4g}, steps={self.steps}, comms={self.comms})")


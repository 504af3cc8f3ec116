"""The pluggable per-group communication contract of DeAR, and its default dense implementation.

DeAR splits each fusion group's gradient exchange into two halves that run at different times:

1. ``start_reduce_scatter(group_index, flat_grad, process_group)`` is called from backward as soon as the
   group's gradients are complete. ``flat_grad`` is the group's padded flat buffer (1-D, ``numel`` a multiple of
   the world size, padding zero), **already divided by the world size** when DeAR averages (the default,
   ``average=True``): summing it over the ranks gives the average. The buffer belongs to DeAR and is rewritten in
   the next backward; a compressor may use it (even in place) until its all-gather handle has been waited on.
2. ``step()`` calls ``wait()`` on every reduce-scatter handle (last group first, the launch order); whatever it
   returns is the group's ``rs_result`` (opaque to DeAR).
3. In the next forward (or ``flush()``), ``start_all_gather(group_index, rs_result, process_group)`` is called
   for group 0 by ``step()`` and for group g+1 when group g's forward is due; its handle's ``wait()`` must return
   the full averaged flat gradient: a 1-D tensor with ``flat_grad``'s shape and dtype, identical on every rank
   (the optimizer update is applied from it). DeAR only reads it before the next backward.

Both calls happen in the same order with the same arguments on every rank, so a compressor can issue
collectives on ``process_group`` inside them. Errors raised by ``wait()`` reach the training loop wrapped in
:class:`~host.dear.wrapper.DeARError`.

Gradient clipping by global norm (``max_grad_norm``) needs two more methods, :class:`ClippableCompressor`:
``local_sq_norm`` (this rank's share of the squared norm of the averaged gradient held in ``rs_result``, such
that the sum over ranks is the squared global norm of the group) and ``scale`` (multiply the gradient held in
``rs_result`` by a factor, returning the new ``rs_result``).

Re-planning (``fusion="auto"``, tuning, or a checkpoint loaded into another plan) changes which parameters a group
index stands for. A compressor that keeps state per group (error-feedback residuals, adaptive budgets) implements
``replan(layouts)``, :class:`ReplannableCompressor`: DeAR calls it with one :class:`GroupLayout` per group (which
parameter, by name, lies at which offset of the group's flat buffer) each time it installs a plan, the first one
included, and only while nothing is in flight (every handle of the old plan has been waited on). The compressor
re-keys its state by parameter range then. A compressor with state to checkpoint implements ``state_dict()`` and
``load_state_dict()`` (:class:`StatefulCompressor`): DeAR's own ``state_dict()`` carries it under
``"compressor"`` (after flushing, so nothing is in flight), and loads it after installing the checkpoint's plan.

Timeouts: DeAR passes ``wait(timeout=seconds)`` to handles whose ``wait`` takes a ``timeout`` argument (every handle
in this package does); a handle that times out raises, and DeAR reports the group and the timeout.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol, Sequence, runtime_checkable

import torch
import torch.distributed as dist

__all__ = ["GroupCompressor", "CompressorHandle", "ClippableCompressor", "ReplannableCompressor",
           "StatefulCompressor", "ParamSlot", "GroupLayout", "DenseCompressor", "RingReduceScatter",
           "ring_reduce_scatter"]


@runtime_checkable
class CompressorHandle(Protocol):
    def wait(self) -> object: ...


@runtime_checkable
class GroupCompressor(Protocol):
    def start_reduce_scatter(self, group_index: int, flat_grad: torch.Tensor,
                             process_group) -> "CompressorHandle": ...

    def start_all_gather(self, group_index: int, rs_result: object, process_group) -> "CompressorHandle": ...


@runtime_checkable
class ClippableCompressor(GroupCompressor, Protocol):
    def local_sq_norm(self, group_index: int, rs_result: object) -> float: ...

    def scale(self, group_index: int, rs_result: object, factor: float) -> object: ...


@dataclass(frozen=True)
class ParamSlot:
    """One parameter's place in a group's flat buffer: ``flat[offset:offset + numel]`` is its (flattened)
    gradient. ``name`` is the parameter's name in the model (``model.named_parameters()``)."""

    name: str
    offset: int
    numel: int


@dataclass(frozen=True)
class GroupLayout:
    """What a group index stands for in a plan: its parameters in buffer order and the padded buffer length."""

    index: int
    params: tuple[ParamSlot, ...]
    padded_numel: int

    @property
    def key(self) -> tuple[tuple[str, int, int], ...]:
        """Hashable identity of the layout (equal layouts hold the same parameters at the same offsets)."""
        return tuple((s.name, s.offset, s.numel) for s in self.params)


@runtime_checkable
class ReplannableCompressor(GroupCompressor, Protocol):
    def replan(self, layouts: Sequence[GroupLayout]) -> None: ...


@runtime_checkable
class StatefulCompressor(Protocol):
    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def wait_work(work, timeout: float | None = None) -> None:
    """``work.wait()`` for at most ``timeout`` seconds (raises once it runs out). torch's own Works (gloo) take a
    ``timedelta``; a backend whose Work overrides ``wait`` in Python (dlcp) takes seconds."""
    if timeout is None:
        work.wait()
    elif getattr(type(work), "wait", None) is dist.Work.wait:
        work.wait(timedelta(seconds=timeout))
    else:
        work.wait(timeout)


class _WorkHandle:
    """A torch.distributed Work plus the value its completion stands for."""

    def __init__(self, work, value):
        self._work, self._value = work, value

    def wait(self, timeout: float | None = None) -> object:
        wait_work(self._work, timeout)
        return self._value


def ring_reduce_scatter(flat: torch.Tensor, shard: torch.Tensor, process_group, rank: int, world: int,
                        tag: int = 0) -> None:
    """Bandwidth-optimal ring reduce-scatter (SUM) over point-to-point messages, blocking.

    ``flat`` is split into ``world`` equal chunks; in step s rank r sends its running sum of chunk
    ``(r - s - 1) mod P`` to the right and adds the chunk ``(r - s - 2) mod P`` received from the left, so after
    ``P - 1`` steps it holds chunk r summed over all ranks, in the order ``((x[r+1] + x[r+2]) + ...) + x[r]``. Each
    rank sends ``(P-1)/P`` of the buffer, the minimum for a reduce-scatter.
    """
    n = flat.numel() // world
    chunks = [flat[i * n:(i + 1) * n] for i in range(world)]
    if world == 1:
        shard.copy_(chunks[0])
        return
    right, left = (rank + 1) % world, (rank - 1) % world
    recv = torch.empty(n, dtype=flat.dtype, device=flat.device)
    acc = torch.empty(n, dtype=flat.dtype, device=flat.device)
    send = chunks[(rank - 1) % world]
    for s in range(world - 1):
        works = [dist.isend(send, group=process_group, group_dst=right, tag=tag),
                 dist.irecv(recv, group=process_group, group_src=left, tag=tag)]
        for w in works:
            w.wait()
        out = shard if s == world - 2 else acc
        torch.add(recv, chunks[(rank - s - 2) % world], out=out)
        send = out


class _FutureHandle:
    def __init__(self, fut: Future, value):
        self._fut, self._value = fut, value

    def wait(self, timeout: float | None = None) -> object:
        self._fut.result(timeout)  # concurrent.futures.TimeoutError once it runs out
        return self._value


class RingReduceScatter:
    """Runs :func:`ring_reduce_scatter` calls one after another on a worker thread, so they are asynchronous.

    Why: gloo's own ``reduce_scatter`` moves as many bytes as a whole all-reduce (measured on shaped links: a
    4 MiB reduce-scatter takes as long as a 4 MiB all-reduce, twice the ring's time), which would cost DeAR the
    traffic it is meant to save. Calls run in submission order on every rank, so their messages match.
    """

    def __init__(self, process_group, rank: int, world: int, tag: int = 0x0DEA):
        self.pg, self.rank, self.world, self.tag = process_group, rank, world, tag
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dear-ring-rs")

    def submit(self, flat: torch.Tensor, shard: torch.Tensor) -> _FutureHandle:
        fut = self._pool.submit(ring_reduce_scatter, flat, shard, self.pg, self.rank, self.world, self.tag)
        return _FutureHandle(fut, shard)

    def close(self) -> None:
        self._pool.shutdown(wait=True)


class DenseCompressor:
    """The default, no compression: reduce-scatter of the flat buffer into this rank's shard, and all-gather of
    the shards back into the flat buffer (the same memory, free again once the reduce-scatter completed).

    ``ring``: a :class:`RingReduceScatter` to use instead of the backend's ``reduce_scatter_single`` (DeAR passes
    one on gloo). ``priority_scope(group_index)`` (optional) returns a context manager wrapped around the
    reduce-scatter and all-gather calls; DeAR passes one that hands the dlcp backend the group's loss bound (used
    by the reduce-scatter only) and layer position (the priority of both).
    """

    def __init__(self, world: int, priority_scope=None, ring: RingReduceScatter | None = None):
        self.world = world
        self._scope = priority_scope
        self._ring = ring
        self._flat: dict[int, torch.Tensor] = {}
        self._shard: dict[int, torch.Tensor] = {}

    def _shard_for(self, g: int, flat: torch.Tensor) -> torch.Tensor:
        n = flat.numel() // self.world
        s = self._shard.get(g)
        if s is None or s.numel() != n or s.dtype != flat.dtype or s.device != flat.device:
            s = self._shard[g] = torch.empty(n, dtype=flat.dtype, device=flat.device)
        return s

    def start_reduce_scatter(self, group_index: int, flat_grad: torch.Tensor, process_group):
        shard = self._shard_for(group_index, flat_grad)
        self._flat[group_index] = flat_grad
        if self._ring is not None:
            return self._ring.submit(flat_grad, shard)
        if self._scope is not None:
            with self._scope(group_index):
                w = dist.reduce_scatter_single(shard, flat_grad, group=process_group, async_op=True)
        else:
            w = dist.reduce_scatter_single(shard, flat_grad, group=process_group, async_op=True)
        return _WorkHandle(w, shard)

    def start_all_gather(self, group_index: int, rs_result: object, process_group) -> _WorkHandle:
        assert isinstance(rs_result, torch.Tensor)
        flat = self._flat[group_index]
        if self._scope is not None:  # on dlcp: the group's layer as the priority (gathers are never lossy)
            with self._scope(group_index):
                w = dist.all_gather_single(flat, rs_result, group=process_group, async_op=True)
        else:
            w = dist.all_gather_single(flat, rs_result, group=process_group, async_op=True)
        return _WorkHandle(w, flat)

    def local_sq_norm(self, group_index: int, rs_result: object) -> float:
        assert isinstance(rs_result, torch.Tensor)
        return float(rs_result.double().pow(2).sum())

    def scale(self, group_index: int, rs_result: object, factor: float) -> object:
        assert isinstance(rs_result, torch.Tensor)
        return rs_result.mul_(factor)

    def close(self) -> None:
        if self._ring is not None:
            self._ring.close()

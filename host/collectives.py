"""Collective algorithms over point-to-point transfers (ring, recursive halving and doubling, trees, pipelined
chains).

The algorithms only need a :class:`Link`: an asynchronous send of a flat tensor to a peer and a blocking receive
into a flat tensor, each transfer named by ``(peer, transfer_id)``. The DLCP transport's endpoint is the Link in
production (``host.backend``); anything with the same two methods works.

Bit-identical results on every rank (summation order):

* **reduce-scatter (ring)**: chunk ``c`` is reduced along the ring starting at rank ``c+1``:
  ``((x[c+1] op x[c+2]) op ...) op x[c]``, each hop computing ``received op local``; the result exists on rank
  ``c`` only, so it is the same everywhere it is later copied to.
* **all-reduce, large** = ring reduce-scatter + ring all-gather: every rank receives the owner's bytes of every
  chunk, so all ranks hold identical bits.
* **reduce-scatter by recursive halving** (one host, power-of-two size P >= 4, up to ``HALVING_MAX_LOCAL``):
  chunk ``c`` is reduced as a tree over the hypercube, pairs at distance ``P/2`` first, then ``P/4``, .., 1 (at
  P = 4: ``(x[c] op x[c^2]) op (x[c^1] op x[c^3])``, operand order immaterial as below); the result exists on rank
  ``c`` only. **All-reduce, medium, on such a group** = that, then all-gather by recursive doubling, which copies
  the owner's bytes everywhere (Rabenseifner).
* **all-reduce, small** = recursive doubling. Partners compute ``a op b`` and ``b op a``; SUM, PRODUCT, MIN and MAX
  are commutative in IEEE arithmetic bit for bit, so both hold the same bits after every round. With a
  non-power-of-two size the first ``2*rem`` ranks pair up first (odd rank computes ``x[r-1] op x[r]``) and the
  even ones get the final result back.
* **AVG** is SUM followed by one division by the group size on every rank (floating-point only), except for
  fp16, where every rank divides its input by the group size first and the group sums the quotients (as NCCL and
  DDP do): fp16 overflows at 65504, and a sum of ``P`` gradients scaled up by a ``GradScaler`` reaches that ``P``
  times sooner than the average it is divided into.

Half precision (bf16, fp16) travels as 2-byte elements and is reduced in its own type, never widened to float32
for the wire: every reduction step computes ``received op local`` with one elementwise kernel, which for these
types evaluates in float32 and rounds once to the tensor's type (round to nearest even, as gloo's ``float16`` and
PyTorch's ``BFloat16`` additions do). A partial sum must be rounded to travel (float32 partial sums would double
the bytes, the round trip this avoids), so each element of a SUM is rounded once per reduction step it passes:
``P - 1`` steps in the ring, ``log2 P`` in recursive halving or doubling. The result is therefore within
``(P - 1) * u * sum(|x_i|)`` of the exact sum (``u`` = 2^-8 for bf16, 2^-11 for fp16: half an ulp), the bound
``tests/host/backend_worker.py`` checks for both dlcp and gloo; at two ranks there is one rounding and the bits
are gloo's.

Bounded loss (``docs/bounded-loss.md``): only a SUM or AVG all-reduce, reduce-scatter or reduce of a floating-point
tensor may lose elements, and only when its caller passes a loss bound ``p > 0`` (:func:`check_loss`); every other
call is exact. Loss may happen only where an element's final value is decided, in the reduction steps (ring
reduce-scatter, recursive halving); everything that copies results afterwards (the all-gather steps, recursive
doubling, the owners' sends to a reduce's root, broadcasts) is reliable, so every rank ends with the same bits. The
call's budget is ``floor(p * n)`` elements of its ``n``, handed out in whole packets to its reduction transfers
(:func:`loss_allowances`; the same on every rank), so the zero-filled or biased fraction is at most ``p`` whatever
the group size. A reduce-scatter, whose ranks keep different chunks, gives each chunk a budget of its own,
``floor(p * its elements)``, spent on the messages that carry it, so every rank's output is within ``p`` too
(:meth:`Collectives._ring_loss`; such a call takes the ring). Each rank then learns every other rank's losses
(:meth:`Collectives._share_losses`): the call's :class:`Outcome` lists the union, which is exactly where the result
may differ from the exact one.

Pipelined ring (reduce-scatter, all-gather, and both fused for all-reduce): every chunk is cut into ``K`` segments
(:func:`ring_segment_count`, the same ``K`` for every chunk so all ranks agree) and each (ring step, segment) is its
own transfer. A rank forwards segment ``k`` of step ``s + 1`` as soon as it has received (and, in reduce-scatter,
reduced) segment ``k`` of step ``s``; receives are posted ahead by ``RING_DEPTH`` threads into their own scratch
slots, so segment ``k + 1`` arrives while segment ``k`` is reduced and the link never waits for a reduction or a
completion round trip. All-reduce runs the all-gather steps right behind the reduce-scatter steps (segment ``k``
of the owner's chunk starts its all-gather as soon as it is final). Per element the operations and their order
are exactly those of the step-by-step ring above, so the results are the same bits.

Transfer ids (32 bits) are ``group (6) | kind (1) | sequence (17) | step (8)``: each collective call reserves the
next sequence numbers of its group (every rank calls collectives in the same order and computes the same count),
one for every 256 messages it needs; message ``j`` of a call is ``sequence base + j // 256``, ``step j % 256``.
In a ring, message ``j = s * K + k`` is segment ``k`` of ring step ``s`` (all-gather steps follow the reduce-scatter
steps), unique per (sender, receiver). Point-to-point send/recv use kind 1 with ``tag mod 512`` and a
per-(peer, tag) message counter.
"""

from __future__ import annotations

import enum
import math
import threading
from dataclasses import dataclass, field
from typing import Protocol, Sequence

import torch

from host import elementwise
from host.transport.chunking import chunk_elems

__all__ = ["check_loss", "loss_allowances", "LOSSY_OPS", "LossStats", "Link", "EndpointLink", "SendHandle", "RecvHandle", "RecvReport", "ReduceOp", "Outcome", "Collectives",
           "chunk_bounds", "ring_reduce_scatter_schedule", "ring_segment_count", "RingPlan", "ring_plan",
           "allreduce_by_doubling"]


class SendHandle(Protocol):
    def wait(self, timeout: float | None = None) -> object: ...

    def done(self) -> bool: ...


class RecvHandle(Protocol):
    """A posted receive: ``out`` is written until ``wait()`` returns the :class:`RecvReport`."""

    def wait(self) -> "RecvReport": ...

    def cancel(self) -> None: ...


@dataclass
class RecvReport:
    """What a receive lost: element ranges ``[start, stop)`` of the receive buffer that were zero-filled."""

    lost: list[tuple[int, int]] = field(default_factory=list)


class Link(Protocol):
    """Point-to-point transfers between global ranks; ``data``/``out`` are flat contiguous CPU tensors."""

    def isend(self, peer: int, data: torch.Tensor, transfer_id: int, *, layer: int = 0,
              loss_bound: float = 0.0) -> SendHandle: ...

    def recv(self, peer: int, out: torch.Tensor, transfer_id: int, *, loss_bound: float = 0.0,
             timeout: float | None = None) -> RecvReport: ...

    def irecv(self, peer: int, out: torch.Tensor, transfer_id: int, *, loss_bound: float = 0.0,
              timeout: float | None = None) -> RecvHandle:
        """``recv`` posted now and waited for later: a rank that sends and receives at once posts first, so the
        transport writes the peer's packets straight into ``out`` instead of staging and copying them."""
        ...

    def packet_elems(self, itemsize: int) -> int:
        """Elements of that size one packet carries: the unit in which a transfer can lose data."""
        ...


class EndpointLink:
    """A transport :class:`~host.transport.Endpoint` as a :class:`Link` (the one adapter every user shares).

    Integer and boolean tensors are control data (counts, indices, flags): a loss bound for one is a caller's
    mistake (:func:`check_loss` refuses it at the collective's entry) and raises ``ValueError`` here too, rather
    than being made reliable silently."""

    def __init__(self, ep):
        self.ep = ep

    @staticmethod
    def _exact_only(t: torch.Tensor, loss_bound: float, what: str) -> None:
        if loss_bound > 0 and not t.is_floating_point():
            raise ValueError(f"{what} of a {t.dtype} tensor with loss bound {loss_bound}: only floating-point data "
                             "may be lossy (integer and boolean tensors are control data, always exact)")

    def isend(self, peer, data, transfer_id, *, layer=0, loss_bound=0.0):
        self._exact_only(data, loss_bound, "send")
        return self.ep.send(peer, data, transfer_id=transfer_id, layer=min(layer, 0xFFFF), loss_bound=loss_bound)

    def recv(self, peer, out, transfer_id, *, loss_bound=0.0, timeout=None) -> RecvReport:
        return self.irecv(peer, out, transfer_id, loss_bound=loss_bound, timeout=timeout).wait()

    def irecv(self, peer, out, transfer_id, *, loss_bound=0.0, timeout=None) -> "_EndpointRecv":
        self._exact_only(out, loss_bound, "receive")
        return _EndpointRecv(self.ep.post_recv(peer, transfer_id, out, timeout=timeout, loss_bound=loss_bound))

    def packet_elems(self, itemsize: int) -> int:
        return chunk_elems(self.ep.opts.mtu, itemsize)


class _EndpointRecv:
    """A transport :class:`~host.transport.RecvHandle` as a :class:`RecvHandle` (the report in the collectives'
    terms)."""

    def __init__(self, h):
        self._h = h

    def wait(self) -> RecvReport:
        return RecvReport(lost=list(self._h.wait().report.lost_ranges))

    def cancel(self) -> None:
        self._h.cancel()


class ReduceOp(enum.Enum):
    SUM = "sum"
    AVG = "avg"
    MIN = "min"
    MAX = "max"
    PRODUCT = "product"

    @classmethod
    def from_torch(cls, op) -> "ReduceOp":
        """From ``torch.distributed.ReduceOp`` (or its ``RedOpType``)."""
        name = str(getattr(op, "op", op)).rsplit(".", 1)[-1].upper()
        try:
            return cls[name]
        except KeyError:
            raise ValueError(f"reduction {name} is not supported by the dlcp backend "
                             f"(supported: {', '.join(m.name for m in cls)})") from None


_KIND = {ReduceOp.SUM: "sum", ReduceOp.AVG: "sum", ReduceOp.PRODUCT: "product", ReduceOp.MIN: "min",
         ReduceOp.MAX: "max"}
"""The element-wise reduction of each op (AVG sums; its division is :func:`_finish`'s)."""


def _combine(op: ReduceOp, acc: torch.Tensor, other: torch.Tensor) -> None:
    """``acc = other op acc`` in place (commutative ops: the operand order only documents the convention)."""
    _combine_into(op, acc, acc, other)


def _combine_into(op: ReduceOp, out: torch.Tensor, local: torch.Tensor, other: torch.Tensor) -> None:
    """``out = other op local``; ``out`` may be ``local`` (in place) or another tensor (``local`` then stays as it
    is). One elementwise kernel either way, so the bits are the same."""
    elementwise.combine_into(_KIND[op], out, local, other)  # not torch's kernels: host/elementwise.py says why


Placed = tuple[int, torch.Tensor]
"""A flat tensor standing for flat elements ``offset ..`` of a ring's buffer: ``(offset, tensor)``."""


def _placed(where: Placed, a: int, b: int) -> torch.Tensor:
    """Flat elements ``[a, b)`` of the placed tensor ``where``."""
    off, t = where
    return t[a - off:b - off]


def _finish(op: ReduceOp, t: torch.Tensor, size: int) -> None:
    if op is ReduceOp.AVG:
        if not t.is_floating_point():
            raise TypeError(f"AVG needs a floating-point tensor, got {t.dtype}")
        elementwise.divide_(t, size)


def _divides_first(op: ReduceOp, t: torch.Tensor) -> bool:
    """Whether an AVG divides every input by the group size before summing (fp16: see the module docstring)
    instead of dividing the sum."""
    return op is ReduceOp.AVG and t.dtype == torch.float16


def _shares_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors are views of the same storage (so writing one may change the other)."""
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _consecutive(parts: Sequence[torch.Tensor], bounds: Sequence[int], dtype: torch.dtype) -> torch.Tensor | None:
    """The flat tensor that ``parts`` tile in order (part ``i`` at elements ``bounds[i]..``), if they are contiguous
    views laid end to end in one storage (as ``all_gather_into_tensor``'s output slices are); else None."""
    if not parts or any(p.dtype != dtype or not p.is_contiguous() for p in parts):
        return None
    first = parts[0]
    esz = first.element_size()
    if any(p.numel() and p.data_ptr() != first.data_ptr() + bounds[i] * esz for i, p in enumerate(parts)):
        return None
    storage = first.untyped_storage()
    if first.storage_offset() * esz + bounds[-1] * esz > storage.nbytes():
        return None
    return torch.empty(0, dtype=dtype).set_(storage, first.storage_offset(), (bounds[-1],))


def chunk_bounds(n: int, parts: int) -> list[int]:
    """Boundaries of ``parts`` contiguous chunks of ``n`` elements, sizes differing by at most one (larger first)."""
    base, extra = divmod(n, parts)
    bounds = [0]
    for i in range(parts):
        bounds.append(bounds[-1] + base + (1 if i < extra else 0))
    return bounds


def ring_reduce_scatter_schedule(rank: int, size: int) -> list[tuple[int, int]]:
    """(chunk sent to the right, chunk received from the left) per step, so that rank ``r`` ends owning chunk r."""
    return [((rank - s - 1) % size, (rank - s - 2) % size) for s in range(size - 1)]


def allreduce_by_doubling(nbytes: int, size: int, *, latency: float, link_bps: float,
                          reduce_bytes_per_s: float) -> bool:
    """Cost model: is recursive doubling faster than the pipelined ring for ``nbytes`` on ``size`` ranks?

    Doubling: ``log2(pof2)`` rounds (plus a fold-in and a fold-out round when ``size`` is not a power of two),
    each one whole-tensor transfer (``latency + S/B``), and a whole-tensor reduction after every round but the
    fold-out (``S/R``, not overlapped). Ring: ``2(P-1)`` transfers of ``S/P`` (``latency`` each, ``2(P-1)/P * S/B``
    in all); its reductions overlap the transfers. With the DLCP transport's milliseconds of fixed time per
    transfer, doubling wins up to a few MiB on 2 and 4 ranks; where the line falls follows from the parameters
    ``Collectives`` passes (``ALLREDUCE_LATENCY_S``, ``ALLREDUCE_LINK_BPS``, ``ALLREDUCE_REDUCE_BYTES_PER_S``)."""
    pof2 = 1 << (size.bit_length() - 1)
    log2 = pof2.bit_length() - 1
    folded = size != pof2
    rounds, reductions = log2 + (2 if folded else 0), log2 + (1 if folded else 0)
    wire = nbytes * 8 / link_bps
    doubling = rounds * (latency + wire) + reductions * nbytes / reduce_bytes_per_s
    ring = 2 * (size - 1) * latency + 2 * (size - 1) / size * wire
    return doubling < ring


def ring_segment_count(chunk_bytes: int, *, min_bytes: int, max_bytes: int, per_chunk: int) -> int:
    """Segments per ring chunk: aim for ``per_chunk`` segments, each between ``min_bytes`` and ``max_bytes``.

    Small segments shorten the pipeline's fill and drain (the last segment's transfer and reduction are not
    overlapped); each segment also costs one transfer's fixed work (set-up, completion message, a wake-up), which
    the lower bound keeps small against its transfer time. The upper bound caps the scratch memory per slot."""
    if chunk_bytes <= 0:
        return 1
    seg = min(max_bytes, max(min_bytes, -(-chunk_bytes // per_chunk)))
    return max(1, -(-chunk_bytes // seg))


@dataclass(frozen=True)
class RingPlan:
    """What one rank does in a (possibly fused) pipelined ring; a pure description, shared by all ranks' views.

    ``steps[g] = (send_chunk, recv_chunk, reduce)``: at ring step ``g`` the rank sends its chunk ``send_chunk`` to
    the right and receives chunk ``recv_chunk`` from the left, reducing it into its own copy (``reduce``, a
    reduce-scatter step) or overwriting it (an all-gather step). Every chunk is cut into ``segments`` pieces;
    ``seg_bounds[c]`` are the element offsets of chunk ``c``'s pieces relative to the chunk start. Message index
    ``g * segments + k`` names segment ``k`` of step ``g``. ``guard[g]`` is the earlier step whose *send* read the
    region step ``g`` writes (the send must be complete before the region is overwritten), or None.
    """

    steps: tuple[tuple[int, int, bool], ...]
    segments: int
    chunk_start: tuple[int, ...]
    seg_bounds: tuple[tuple[int, ...], ...]
    guard: tuple[int | None, ...]

    @property
    def messages(self) -> int:
        return len(self.steps) * self.segments

    def region(self, chunk: int, k: int) -> tuple[int, int]:
        """Element range ``[a, b)`` of segment ``k`` of ``chunk`` in the flat buffer."""
        base, sb = self.chunk_start[chunk], self.seg_bounds[chunk]
        return base + sb[k], base + sb[k + 1]


def ring_plan(rank: int, size: int, bounds: Sequence[int], segments: int, *, reduce: bool,
              gather: bool) -> RingPlan:
    """The pipelined ring of group rank ``rank``: reduce-scatter steps (chunk ``c`` ends reduced on rank ``c``),
    then all-gather steps (the owner's chunk travels round the ring), either or both."""
    if len(bounds) != size + 1:
        raise ValueError(f"ring bounds need {size + 1} entries, got {len(bounds)}")
    steps: list[tuple[int, int, bool]] = []
    if reduce:
        steps += [(s, c, True) for s, c in ring_reduce_scatter_schedule(rank, size)]
    if gather:
        steps += [((rank - t) % size, (rank - t - 1) % size, False) for t in range(size - 1)]
    for g in range(len(steps) - 1):  # what a step receives is what the next one forwards
        assert steps[g + 1][0] == steps[g][1], (rank, size, steps)
    guard: list[int | None] = []
    for g, (_, rc, _) in enumerate(steps):
        prev = [h for h in range(g) if steps[h][0] == rc]
        guard.append(prev[-1] if prev else None)
    seg_bounds = tuple(tuple(chunk_bounds(bounds[c + 1] - bounds[c], segments)) for c in range(size))
    return RingPlan(tuple(steps), segments, tuple(bounds[:-1]), seg_bounds, tuple(guard))


@dataclass
class Outcome:
    """What bounded loss did during one collective.

    ``lost`` lists element ranges ``[start, stop)`` of the collective's flat buffer (the tensor for all-reduce and
    reduce; the concatenation of the inputs for reduce-scatter) whose result may differ from the exact one: zero-filled
    where this rank received them, or reduced from a partial sum zero-filled upstream. After a lossy call it is the
    union over all ranks (every rank holds the same list); ``elements`` is the size of that flat buffer. A call
    without a loss bound loses nothing and reports nothing.
    """

    lost: list[tuple[int, int]] = field(default_factory=list)
    elements: int = 0

    def add(self, base: int, report: RecvReport | None) -> None:
        if report is not None:
            self.lost.extend((base + a, base + b) for a, b in report.lost)

    def merged(self) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        for a, b in sorted(self.lost):
            if out and a <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], b))
            else:
                out.append((a, b))
        return out

    @property
    def zero_filled(self) -> int:
        """Elements covered by :attr:`lost` (each counted once)."""
        return sum(b - a for a, b in self.merged())

    @property
    def fraction(self) -> float:
        return self.zero_filled / self.elements if self.elements else 0.0

    def extend(self, other: "Outcome") -> None:
        """Append another call's outcome after this one's elements (several tensors of one operation)."""
        self.add(self.elements, RecvReport(lost=other.lost))
        self.elements += other.elements


class LossStats:
    """Running totals of what bounded loss did over many collectives (thread-safe): the DDP hook and DeAR keep one
    and hand it to every call they make (``host.backend.loss_bound_scope(..., stats=)``); :meth:`take` returns
    the totals since the last take (one training step's, when taken once per step) and starts again."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.total = {"calls": 0, "lossy_calls": 0, "elements": 0, "zero_filled": 0}
        self._since = dict(self.total)
        self.last: Outcome | None = None  # the latest call's outcome (its lost ranges)

    def record(self, outcome: "Outcome", lossy: bool) -> None:
        with self._lock:
            self.last = outcome
            for d in (self.total, self._since):
                d["calls"] += 1
                d["lossy_calls"] += int(lossy)
                d["elements"] += outcome.elements
                d["zero_filled"] += outcome.zero_filled

    def take(self) -> dict[str, float]:
        """``{calls, lossy_calls, elements, zero_filled, fraction}`` since the previous take."""
        with self._lock:
            d, self._since = self._since, dict.fromkeys(self._since, 0)
        return {**d, "fraction": d["zero_filled"] / d["elements"] if d["elements"] else 0.0}


#: The reductions for which zero is the identity: a lost contribution leaves a sum short, never wrong in kind.
LOSSY_OPS = frozenset({"SUM", "AVG"})


def check_loss(op: "ReduceOp", t: torch.Tensor, loss_bound: float) -> None:
    """Refuse a loss bound where zero-filling is not a smaller contribution: only SUM and AVG of floating-point
    tensors may be lossy (MAX of negative inputs would return 0, a lost integer is a wrong count)."""
    if not 0.0 <= loss_bound < 1.0:
        raise ValueError(f"loss_bound must be in [0, 1), got {loss_bound}")
    if loss_bound > 0 and (op.name not in LOSSY_OPS or not t.is_floating_point()):
        raise ValueError(f"a loss bound ({loss_bound}) applies only to SUM/AVG reductions of floating-point tensors; "
                         f"this call is {op.name} on {t.dtype}: pass loss_bound=0 (it is exact)")


def loss_allowances(sizes: Sequence[int], budget: int, per_packet: int, start: int = 0) -> list[int]:
    """Split a collective's loss budget over its lossy transfers: ``budget`` elements in whole packets of
    ``per_packet`` elements, one packet at a time, round-robin over the transfers (``sizes``: each one's elements,
    in an order every rank agrees on) from index ``start``. A transfer is given another packet only while it keeps
    at least one protected packet's worth of elements. Returns each transfer's allowance in elements; their sum is
    at most ``budget``. Whole packets because a packet is the unit a network drops: a per-transfer share of
    ``budget`` rounded down to packets vanishes as groups grow (``p / (2(P-1))`` of a segment is less than one
    packet for a 4 MB all-reduce at P=8), while the whole call's budget still buys a few."""
    m = len(sizes)
    out = [0] * m
    if m == 0 or per_packet <= 0:
        return out
    tokens = budget // per_packet
    i, idle = start % m, 0
    while tokens > 0 and idle < m:
        if out[i] + 2 * per_packet <= sizes[i]:
            out[i] += per_packet
            tokens -= 1
            idle = 0
        else:
            idle += 1
        i = (i + 1) % m
    return out


_LOSS_CAP = 32  # lost ranges a rank's loss report carries in its first message


def _halving_gives(rank: int, size: int, bounds: Sequence[int]) -> list[int]:
    """Elements rank ``rank`` sends in each round of recursive halving (see ``_halving_reduce_scatter``)."""
    lo, hi, d, out = 0, size, size // 2, []
    while d:
        mid = lo + d
        keep, give = ((lo, mid), (mid, hi)) if not rank & d else ((mid, hi), (lo, mid))
        out.append(bounds[give[1]] - bounds[give[0]])
        lo, hi = keep
        d //= 2
    return out


class Collectives:
    """The collectives of one process group: ``ranks`` are the members' global ranks in group order.

    Not thread-safe per instance: the backend runs one group's collectives in issue order on one thread.
    """

    SMALL_ALLREDUCE_BYTES = 64 * 1024  # below this always recursive doubling; above, the cost model decides:
    ALLREDUCE_LATENCY_S = 0.003  # a transfer's fixed time on the DLCP transport (measured: 2-6 ms, 2 cores)
    ALLREDUCE_LINK_BPS = 1e9  # the link rate the model assumes (the shaped benchmark links)
    ALLREDUCE_REDUCE_BYTES_PER_S = 1.5e9  # one core adding fp32 tensors
    SMALL_BROADCAST_BYTES = 256 * 1024  # below this, binomial tree; above, pipelined chain
    SEGMENT_BYTES = 1 << 20  # pipelined chain segment (at most 255 segments: the step field is 8 bits)
    # pipelined ring (see ring_segment_count): ~4 segments per chunk, each RING_SEGMENT_MIN .. 32 MiB. Every
    # transfer has a fixed cost, so segments pay only where they overlap wire time: on network paths from 2 MiB;
    # on one host (loopback, memory-speed links: ``local``) every rank's CPU does the copies and reductions anyway,
    # so a local chunk is cut only above RING_SEGMENT_MAX (measurements: docs/decisions.md).
    RING_SEGMENT_MIN = 2 << 20
    RING_SEGMENT_MIN_LOCAL = 32 << 20
    RING_SEGMENT_MAX = 32 << 20
    RING_SEGMENTS_PER_CHUNK = 4
    # One host, power-of-two group of 4 or more: hypercube algorithms instead of the ring -- all-gather by
    # recursive doubling, reduce-scatter by recursive halving (up to HALVING_MAX_LOCAL bytes of input), all-reduce
    # above doubling's range by both (Rabenseifner, up to the same size). The same bytes in log2(P) transfers per
    # phase instead of P-1: on loopback a transfer's fixed CPU cost, not the wire, is what the ring's pipelining
    # would hide. Halving keeps a scratch copy of half its input, so above HALVING_MAX_LOCAL the ring takes over;
    # networked groups keep the pipelined ring, which wins on real links (docs/decisions.md).
    HYPERCUBE_LOCAL = True
    HALVING_MAX_LOCAL = 64 << 20
    RING_DEPTH = 2  # threads posting receives ahead (and scratch slots) per pipelined ring; 0: the caller posts
    # Scratch buffers (a reduce-scatter's working copy, a ring's receive slots, a gather buffer) are kept per thread
    # and reused: the first write to fresh pages faults and zeroes them, which costs more than the copy itself
    # (docs/decisions.md). A thread keeps at most this many bytes of them in all: a
    # buffer that would take it past the bound drops the thread's other kept buffers (a caller still holding one
    # keeps it alive until it lets go), and one larger than the bound is fresh and not kept.
    SCRATCH_MAX_BYTES = 512 << 20

    def __init__(self, link: Link, ranks: Sequence[int], my_rank: int, group_tag: int = 0,
                 timeout: float | None = 60.0, local: bool = False):
        """``local``: every member is on this host (loopback links), so the ring cuts larger segments
        (``RING_SEGMENT_MIN_LOCAL``); every member must pass the same value."""
        if my_rank not in ranks:
            raise ValueError(f"rank {my_rank} is not a member of group {list(ranks)}")
        if not 0 <= group_tag < self.MAX_GROUPS:
            raise ValueError(f"group_tag must be in 0..{self.MAX_GROUPS - 1}")
        self.link = link
        self.ranks = list(ranks)
        self.size = len(self.ranks)
        self.rank = self.ranks.index(my_rank)  # index within the group
        self.group_tag = group_tag
        self.timeout = timeout
        self.local = local
        self._seq = 0
        self._p2p_counts: dict[tuple[int, int, str], int] = {}
        self._p2p_lock = threading.Lock()
        self._tls = threading.local()

    def _scratch(self, name: str, n: int, dtype: torch.dtype) -> torch.Tensor:
        """``n`` elements of ``dtype``, contents undefined, backed by this thread's reusable buffer ``name`` (grown
        as needed; per thread, so concurrent collectives never share one). Valid until the same thread asks for
        ``name`` again: callers copy results out before returning."""
        nbytes = n * dtype.itemsize
        if nbytes > self.SCRATCH_MAX_BYTES:
            return torch.empty(n, dtype=dtype)
        bufs = self._tls.__dict__.setdefault("bufs", {})
        b = bufs.get(name)
        if b is None or b.numel() < nbytes:
            bufs.pop(name, None)
            if sum(x.numel() for x in bufs.values()) + nbytes > self.SCRATCH_MAX_BYTES:
                bufs.clear()  # (SCRATCH_MAX_BYTES bounds what a thread keeps in all)
            b = bufs[name] = torch.empty(nbytes, dtype=torch.uint8)
        return b[:nbytes].view(dtype)

    # --- transfer naming ----------------------------------------------------------------------------------
    # A transfer id is 64 bits (the wire's transfer_hi and transfer_id), laid out so that no part wraps in a job's
    # life and none collides with another group's or with an id below 2^32 that a caller of the Link picks itself
    # (ACiD's gossip): bits 63..44 hold the group tag + 1 (about a million groups), bit 43 is set for
    # point-to-point ids; a collective's id then holds its sequence number (35 bits: 34 billion collectives) and
    # its step (8 bits); a point-to-point id holds the user tag modulo 512 (9 bits) and the message's number among
    # those of its (peer, tag, direction) (34 bits). A wrapping id would eventually meet its own tombstone at the
    # receiver (recv() of an id already received fails) or a live transfer of another group.
    MAX_GROUPS = (1 << 20) - 1
    _GROUP_SHIFT, _P2P_BIT, _SEQ_BITS, _P2P_COUNT_BITS = 44, 1 << 43, 35, 34

    def _next_seq(self) -> int:
        s = self._seq
        self._seq = (self._seq + 1) % (1 << self._SEQ_BITS)
        return s

    def _take_ids(self, messages: int) -> int:
        """Reserve transfer ids for a call of ``messages`` messages: returns the base sequence number of the
        ``ceil(messages / 256)`` consecutive sequence numbers taken (see :meth:`_tid_at`)."""
        nseq = max(1, -(-messages // 256))
        if nseq >= 1 << 16:
            raise ValueError(f"a collective of {messages} messages needs too many transfer ids")
        base = self._seq
        self._seq = (self._seq + nseq) % (1 << self._SEQ_BITS)
        return base

    def _tid(self, seq: int, step: int) -> int:
        if not 0 <= step < 256:
            raise ValueError(f"collective step {step} exceeds 255")
        return ((self.group_tag + 1) << self._GROUP_SHIFT) | (seq << 8) | step

    def _tid_at(self, base: int, j: int) -> int:
        """Transfer id of message ``j`` of the call whose ids start at sequence number ``base``."""
        return self._tid((base + j // 256) % (1 << self._SEQ_BITS), j % 256)

    def collective_ids(self) -> tuple[int, int]:
        """``(mask, value)``: a transfer id ``t`` belongs to one of this group's collectives iff ``t & mask ==
        value`` (the group tag, and the point-to-point bit clear). The backend makes these transfers share the fate
        of the group's members (``Endpoint.share_fate``)."""
        return ~(self._P2P_BIT - 1) & ((1 << 64) - 1), (self.group_tag + 1) << self._GROUP_SHIFT

    def _p2p_tid(self, peer: int, tag: int, direction: str) -> int:
        """The id of the next point-to-point message of ``(peer, tag, direction)``, numbered in program order on
        both sides (so a send and its matching recv name the same transfer)."""
        with self._p2p_lock:
            key = (peer, tag % 512, direction)
            n = self._p2p_counts.get(key, 0)
            self._p2p_counts[key] = n + 1
        if n >= 1 << self._P2P_COUNT_BITS:
            raise ValueError(f"more than 2^{self._P2P_COUNT_BITS} point-to-point messages with rank {peer}, tag {tag}")
        return (((self.group_tag + 1) << self._GROUP_SHIFT) | self._P2P_BIT | ((tag % 512) << self._P2P_COUNT_BITS)
                | n)

    def _peer(self, idx: int) -> int:
        return self.ranks[idx % self.size]

    # --- primitives ---------------------------------------------------------------------------------------
    def _exchange(self, send_to: int | None, data: torch.Tensor | None, recv_from: int | None,
                  out: torch.Tensor | None, tid: int, layer: int, p: float = 0.0,
                  p_recv: float | None = None) -> RecvReport | None:
        """Send ``data`` to one group member while receiving ``out`` from another (either may be None), the send
        with loss bound ``p`` and the receive with ``p_recv`` (default ``p``). The receive is posted first: the
        partner sends at the same moment, and what arrives before a receive is posted is staged and copied again
        (on loopback, half the exchanges of recursive doubling had been)."""
        rh = None
        if recv_from is not None and out is not None and out.numel():
            rh = self.link.irecv(self._peer(recv_from), out, tid, loss_bound=p if p_recv is None else p_recv,
                                 timeout=self.timeout)
        h = None
        try:
            if send_to is not None and data is not None and data.numel():
                h = self.link.isend(self._peer(send_to), data, tid, layer=layer, loss_bound=p)
        except BaseException:
            if rh is not None:
                rh.cancel()
            raise
        rep = rh.wait() if rh is not None else None
        if h is not None:
            h.wait(self.timeout)
        return rep

    # --- pipelined ring ------------------------------------------------------------------------------------
    def ring_plan(self, bounds: Sequence[int], itemsize: int, *, reduce: bool, gather: bool) -> RingPlan:
        """This rank's pipelined ring over chunks ``bounds`` (segments from the widest chunk, same on all ranks)."""
        widest = max(bounds[i + 1] - bounds[i] for i in range(self.size))
        k = ring_segment_count(widest * itemsize, max_bytes=self.RING_SEGMENT_MAX,
                               min_bytes=self.RING_SEGMENT_MIN_LOCAL if self.local else self.RING_SEGMENT_MIN,
                               per_chunk=self.RING_SEGMENTS_PER_CHUNK)
        return ring_plan(self.rank, self.size, bounds, k, reduce=reduce, gather=gather)

    def _run_ring(self, plan: RingPlan, buf: torch.Tensor, op: ReduceOp | None, *, base: int, layer: int,
                  outcome: Outcome, finish: bool, src: Placed | None = None, dst: Placed | None = None,
                  loss: tuple[list[float], list[float]] | None = None) -> None:
        """Execute ``plan`` on the flat ``buf`` (in place), messages named from sequence number ``base``. ``loss``:
        the loss bound of each message this rank sends and of each it receives (:meth:`_ring_loss`); None: exact.

        The calling thread walks the messages in order (step-major): takes the received segment, reduces it into
        ``buf`` (and applies AVG's division on the last reduce step if ``finish``), then starts forwarding that
        region as the same segment of the next step. ``RING_DEPTH`` poster threads post the receives ahead, each
        into its own scratch slot, waiting until the caller has consumed the slot's previous segment and, before
        receiving straight into ``buf``, until the send that last read that region has completed. The calling
        thread waits on each posted receive itself: the transport's I/O thread wakes it directly. (A poster that
        also waited for the data and then woke the caller put a second thread wake-up, 0.4-0.5 ms median and up to
        15 ms with four ranks on two cores, between each segment's arrival and its forwarding; docs/backend.md.)

        ``src`` and ``dst`` let callers skip a working copy (each a :data:`Placed` tensor):

        * ``src``: this rank's input, only read. The first step's sends read it, and every reduce step writes
          ``buf = src op received``, so ``buf`` needs no initial contents. Without reduce steps (an all-gather)
          the first step's chunk is copied from ``src`` into ``buf`` after its sends have started, so the wire
          does not wait for the copy.
        * ``dst``: elements of one chunk that live in ``dst``'s tensor instead of ``buf`` (a reduce-scatter's
          output)."""
        K, steps = plan.segments, plan.steps
        G = len(steps)
        N = G * K
        if N == 0:
            return
        right, left = self._peer(self.rank + 1), self._peer(self.rank - 1)
        last_reduce = max((g for g, st in enumerate(steps) if st[2]), default=-1)
        seg_max = max(max(sb[i + 1] - sb[i] for i in range(K)) for sb in plan.seg_bounds)
        depth = min(self.RING_DEPTH, N) if K > 1 else 0
        nslots = max(depth, 1)
        slots = [self._scratch(f"slot{i}", seg_max, buf.dtype) for i in range(nslots)] if last_reduce >= 0 else []
        handles: dict[int, SendHandle] = {}
        posted = [threading.Event() for _ in range(N)]  # send of message j started (or empty)
        consumed = [threading.Event() for _ in range(N)]  # the caller is done with message j's receive
        ready = [threading.Event() for _ in range(N)]  # message j's receive is posted (or failed to be)
        receives: list[RecvHandle | None] = [None] * N  # posted by the threads, waited for by the caller
        errors: list[BaseException | None] = [None] * N
        abort = threading.Event()
        timeout = self.timeout

        def view(a: int, b: int) -> torch.Tensor:
            """Where flat elements ``[a, b)`` (one segment) of the ring's result live."""
            if dst is not None and dst[0] <= a and b <= dst[0] + dst[1].numel():
                return _placed(dst, a, b)
            return buf[a:b]

        def send(j: int) -> None:
            g, k = divmod(j, K)
            a, b = plan.region(steps[g][0], k)
            if b > a:
                data = _placed(src, a, b) if src is not None and g == 0 else view(a, b)
                handles[j] = self.link.isend(right, data, self._tid_at(base, j), layer=layer,
                                             loss_bound=loss[0][j] if loss else 0.0)
            posted[j].set()

        def wait_guard(g: int, k: int) -> None:
            """The region of (g, k) is about to be overwritten: the send that read it must be complete."""
            gd = plan.guard[g]
            if gd is None:
                return
            j = gd * K + k
            posted[j].wait()
            h = handles.get(j)
            if h is not None and not abort.is_set():
                h.wait(timeout)

        def post(j: int, slot: int) -> RecvHandle | None:
            """Post the receive of message ``j`` (into scratch ``slot`` if it is reduced, else where it belongs,
            once the send that read that region is complete)."""
            g, k = divmod(j, K)
            _, rc, red = steps[g]
            a, b = plan.region(rc, k)
            if b == a:
                return None
            if red:
                out = slots[slot][:b - a]
            else:
                wait_guard(g, k)
                out = view(a, b)
            return self.link.irecv(left, out, self._tid_at(base, j), loss_bound=loss[1][j] if loss else 0.0,
                                   timeout=timeout)

        def guard_done(j: int) -> bool:
            """Could message ``j`` be posted now without waiting for a send?"""
            g, k = divmod(j, K)
            gd = plan.guard[g]
            if gd is None:
                return True
            h = handles.get(gd * K + k)
            return posted[gd * K + k].is_set() and (h is None or h.done())

        def poster(t: int) -> None:
            for j in range(t, N, depth):
                try:
                    if j >= depth:
                        consumed[j - depth].wait()  # the slot is free again
                    if abort.is_set():
                        return
                    receives[j] = post(j, t)
                except BaseException as e:  # noqa: BLE001 - handed to the calling thread
                    errors[j] = e
                    ready[j].set()
                    return
                ready[j].set()

        threads = [threading.Thread(target=poster, args=(t,), name=f"dlcp-ring-post-{t}", daemon=True)
                   for t in range(depth)]
        # Without poster threads the calling thread posts each receive ahead itself, one at a time (one slot):
        # message j+1 as soon as message j is consumed, before this rank's next send unless that would wait for
        # an earlier send to complete. What arrives before its receive is posted is staged and copied again.
        inline: dict[int, RecvHandle | None] = {}
        try:
            for t in threads:  # receives posted before this rank's first sends: the left neighbour's step-0
                t.start()  # segments may arrive while those sends are being set up
            if not depth:
                inline[0] = post(0, 0)  # (step 0 overwrites nothing a send reads)
            for k in range(K):
                send(k)
            if src is not None and not steps[0][2]:
                for k in range(K):
                    a, b = plan.region(steps[0][0], k)
                    elementwise.copy_into(view(a, b), _placed(src, a, b))
            for j in range(N):
                g, k = divmod(j, K)
                _, rc, red = steps[g]
                a, b = plan.region(rc, k)
                if b > a:
                    if depth:
                        ready[j].wait()
                        if errors[j] is not None:
                            raise errors[j]
                        h, receives[j] = receives[j], None
                    else:
                        h = inline.pop(j) if j in inline else post(j, 0)
                    rep = h.wait() if h is not None else None
                    outcome.add(a, rep)
                    if red:
                        wait_guard(g, k)
                        acc, got = view(a, b), slots[j % nslots][:b - a]
                        if src is not None:
                            _combine_into(op, acc, _placed(src, a, b), got)
                        else:
                            _combine(op, acc, got)
                        if finish and g == last_reduce:
                            _finish(op, acc, self.size)
                consumed[j].set()
                ahead = not depth and j + 1 < N
                if ahead and guard_done(j + 1):
                    inline[j + 1] = post(j + 1, 0)
                if g + 1 < G:
                    send(j + K)
                if ahead and j + 1 not in inline:
                    inline[j + 1] = post(j + 1, 0)
            for h in handles.values():
                h.wait(timeout)
        except BaseException:
            abort.set()
            for ev in (*posted, *consumed):
                ev.set()
            for rh in inline.values():
                if rh is not None:
                    rh.cancel()
            raise
        finally:
            for t in threads:
                if t.ident is not None:  # started
                    t.join()
            for rh in receives:  # posted, never waited for (the call failed): stop writing into the buffers
                if rh is not None:
                    rh.cancel()

    def _check_op(self, op: ReduceOp, t: torch.Tensor, loss_bound: float = 0.0) -> None:
        """Refuse a reduction before any transfer (every rank refuses alike, so none is left waiting)."""
        if op is ReduceOp.AVG and not t.is_floating_point():
            raise TypeError(f"AVG needs a floating-point tensor, got {t.dtype}")
        check_loss(op, t, loss_bound)

    # --- bounded loss: the budget and the shared report -------------------------------------------------------
    def _budget(self, loss_bound: float, n: int, itemsize: int) -> tuple[int, int]:
        """(elements the call may lose, elements per packet)."""
        if loss_bound <= 0 or self.size == 1:
            return 0, 1
        return math.floor(loss_bound * n + 1e-9), self.link.packet_elems(itemsize)

    def _ring_loss(self, plan: RingPlan, base: int, budget: int, per_packet: int, shard_bound: float | None = None
                   ) -> tuple[list[float], list[float]] | None:
        """Loss bounds of this rank's ring messages: the budget over every rank's reduce-step messages (ordered by
        step, segment, sender, the same on every rank), the all-gather steps exact. With ``shard_bound`` (a
        reduce-scatter, whose ranks keep different chunks) each chunk has a budget of its own,
        ``floor(shard_bound * its elements)``, spent only on the messages that carry it: every rank's output is
        then within the bound, not just the call (whose total stays within ``budget``). None if no message may
        lose."""
        P, K, r = self.size, plan.segments, self.rank
        nred = sum(1 for st in plan.steps if st[2])
        if budget < per_packet or nred == 0:
            return None
        sent = [ring_reduce_scatter_schedule(q, P) for q in range(P)]
        keys, sizes = [], []
        for g in range(nred):
            for k in range(K):
                for q in range(P):
                    a, b = plan.region(sent[q][g][0], k)
                    keys.append((g, k, q))
                    sizes.append(b - a)
        if shard_bound is None:
            allow = dict(zip(keys, loss_allowances(sizes, budget, per_packet, start=base)))
        else:
            allow = {}
            for c in range(P):  # chunk c: the messages that carry it, in the same order
                mine = [j for j, (g, k, q) in enumerate(keys) if sent[q][g][0] == c]
                length = sum(b - a for a, b in (plan.region(c, k) for k in range(K)))
                got = loss_allowances([sizes[j] for j in mine], math.floor(shard_bound * length + 1e-9),
                                      per_packet, start=base + c)
                allow.update((keys[j], x) for j, x in zip(mine, got))
        if not any(allow.values()):
            return None
        N = len(plan.steps) * K
        send_p, recv_p = [0.0] * N, [0.0] * N
        left = (r - 1) % P
        for g in range(nred):
            for k in range(K):
                j = g * K + k
                for q, out in ((r, send_p), (left, recv_p)):
                    a, b = plan.region(sent[q][g][0], k)
                    if b > a and allow[(g, k, q)]:
                        out[j] = allow[(g, k, q)] / (b - a)
        return send_p, recv_p

    def _halving_loss(self, bounds: list[int], base: int, budget: int, per_packet: int) -> list[tuple[float, float]]:
        """(send bound, receive bound) of each recursive-halving round of this rank: the budget over every rank's
        halving messages (ordered by round, sender)."""
        P, r = self.size, self.rank
        rounds = P.bit_length() - 1
        if budget < per_packet:
            return [(0.0, 0.0)] * rounds
        gives = [_halving_gives(q, P, bounds) for q in range(P)]
        sizes = [gives[q][j] for j in range(rounds) for q in range(P)]
        allow = loss_allowances(sizes, budget, per_packet, start=base)
        out = []
        for j in range(rounds):
            partner = r ^ (P >> (j + 1))
            frac = [allow[j * P + q] / gives[q][j] if gives[q][j] else 0.0 for q in (r, partner)]
            out.append((frac[0], frac[1]))
        return out

    def _share_losses(self, outcome: Outcome) -> None:
        """Every rank sends the ranges it lost to every other and takes the union: afterwards ``outcome.lost`` is
        the same on every rank, the whole set of elements that may differ from the exact result. One round of
        small messages (:data:`_LOSS_CAP` ranges; a second message carries the rest when there are more)."""
        P = self.size
        base = self._take_ids(2)
        mine = outcome.merged()
        head = torch.zeros(1 + 2 * _LOSS_CAP, dtype=torch.int64)
        head[0] = len(mine)
        flat = torch.tensor([x for ab in mine for x in ab], dtype=torch.int64)
        head[1:1 + min(len(flat), 2 * _LOSS_CAP)] = flat[:2 * _LOSS_CAP]
        rest = flat[2 * _LOSS_CAP:].contiguous()
        peers = [q for q in range(P) if q != self.rank]
        got = {q: torch.empty_like(head) for q in peers}
        posted = {q: self.link.irecv(self._peer(q), got[q], self._tid_at(base, 0), timeout=self.timeout)
                  for q in peers}
        sends = [self.link.isend(self._peer(q), head, self._tid_at(base, 0)) for q in peers]
        if rest.numel():
            sends += [self.link.isend(self._peer(q), rest, self._tid_at(base, 1)) for q in peers]
        ranges = list(mine)
        for q in peers:
            posted[q].wait()
            count = int(got[q][0])
            if not 0 <= count <= outcome.elements:
                raise RuntimeError(f"rank {self._peer(q)} reported {count} lost ranges of {outcome.elements} elements")
            vals = got[q][1:1 + 2 * min(count, _LOSS_CAP)].tolist()
            if count > _LOSS_CAP:
                more = torch.empty(2 * (count - _LOSS_CAP), dtype=torch.int64)
                self.link.recv(self._peer(q), more, self._tid_at(base, 1), timeout=self.timeout)
                vals += more.tolist()
            ranges += [(vals[i], vals[i + 1]) for i in range(0, len(vals), 2)]
        for h in sends:
            h.wait(self.timeout)
        outcome.lost = ranges
        outcome.lost = outcome.merged()

    # --- reduce-scatter / all-gather ----------------------------------------------------------------------
    def reduce_scatter_flat(self, buf: torch.Tensor, bounds: list[int], op: ReduceOp, *, layer: int = 0,
                            loss_bound: float = 0.0, finish: bool = True,
                            base: int | None = None, outcome: Outcome | None = None,
                            src: torch.Tensor | None = None, out: torch.Tensor | None = None,
                            per_shard: bool = False) -> torch.Tensor:
        """Pipelined ring reduce-scatter of the flat ``buf`` (modified in place); returns this rank's reduced chunk
        (a view). ``bounds`` has ``size + 1`` entries; chunk ``i`` ends on group rank ``i``. ``base``: transfer
        ids reserved by the caller (at least ``ring_plan(...).messages`` of them) for the ring; default: reserve
        them here, and in a one-host power-of-two group of 4 or more use recursive halving instead.

        With ``src`` (a flat tensor shaped like ``buf``) the input is read from ``src``, which stays unchanged, and
        ``buf`` is only working space; ``out`` (flat, this rank's chunk size) then receives the reduced chunk
        directly and is what is returned.

        ``loss_bound``: the fraction of the ``bounds[-1]`` elements that may end zero-filled or biased (SUM/AVG of
        floating point only); what this rank received zero-filled is added to ``outcome`` (callers share it:
        :meth:`_share_losses`). ``per_shard``: the bound holds for each rank's chunk as well (a reduce-scatter,
        whose ranks keep different chunks; :meth:`_ring_loss`); such a lossy call takes the ring."""
        P, r = self.size, self.rank
        outcome = outcome if outcome is not None else Outcome()
        self._check_op(op, buf, loss_bound) if finish else check_loss(op, buf, loss_bound)
        if out is not None and (src is None or out.numel() != bounds[r + 1] - bounds[r]):
            raise ValueError("reduce_scatter_flat: out needs src and this rank's chunk size")
        budget, per_packet = self._budget(loss_bound, bounds[-1], buf.element_size())
        if base is None and self._hypercube(bounds[-1] * buf.element_size()) and not (
                per_shard and budget >= per_packet):
            seq = self._take_ids(P.bit_length() - 1)
            own = self._halving_reduce_scatter(buf, bounds, op, seq, layer,
                                               self._halving_loss(bounds, seq, budget, per_packet), outcome, src, out)
            if finish:
                _finish(op, own, P)
            return own
        plan = self.ring_plan(bounds, buf.element_size(), reduce=True, gather=False) if P > 1 else None
        base = self._take_ids(plan.messages if plan else 1) if base is None else base
        if plan is None:
            own = buf[bounds[0]:bounds[1]]
            if src is not None:
                own = out if out is not None else own
                elementwise.copy_into(own, src[bounds[0]:bounds[1]])
            if finish:
                _finish(op, own, 1)
            return own
        self._run_ring(plan, buf, op, base=base, layer=layer, outcome=outcome, finish=finish,
                       src=None if src is None else (0, src), dst=None if out is None else (bounds[r], out),
                       loss=self._ring_loss(plan, base, budget, per_packet, loss_bound if per_shard else None))
        return out if out is not None else buf[bounds[r]:bounds[r + 1]]

    def all_gather_flat(self, buf: torch.Tensor, bounds: list[int], *, layer: int = 0, base: int | None = None,
                        src: Placed | None = None) -> None:
        """Pipelined ring all-gather in place: on entry chunk ``rank`` of ``buf`` is valid (or, with ``src``, held
        by ``src``'s tensor, from which it is sent and copied into ``buf``); on exit every chunk is. Without a
        caller's ``base``, a one-host power-of-two group of 4 or more uses recursive doubling instead. Always
        exact: it copies results, and a copy that lost data would leave ranks with different bits."""
        P = self.size
        if base is None and self._hypercube(0):
            self._doubling_all_gather(buf, bounds, self._take_ids(P.bit_length() - 1), 0, layer, src)
            return
        plan = self.ring_plan(bounds, buf.element_size(), reduce=False, gather=True) if P > 1 else None
        base = self._take_ids(plan.messages if plan else 1) if base is None else base
        if plan is None:
            if src is not None:
                elementwise.copy_into(buf[src[0]:src[0] + src[1].numel()], src[1])
            return
        self._run_ring(plan, buf, None, base=base, layer=layer, outcome=Outcome(), finish=False, src=src)

    # --- hypercube (power-of-two groups on one host) --------------------------------------------------------
    def _hypercube(self, nbytes: int) -> bool:
        """Halving / doubling instead of the ring (unless ``HYPERCUBE_LOCAL`` is off): a one-host group of a
        power-of-two size of at least 4, and at most ``HALVING_MAX_LOCAL`` bytes to halve (0 for an all-gather).
        Every member decides alike."""
        P = self.size
        return self.HYPERCUBE_LOCAL and self.local and P > 2 and P & (P - 1) == 0 and nbytes <= self.HALVING_MAX_LOCAL

    def _halving_reduce_scatter(self, buf: torch.Tensor, bounds: list[int], op: ReduceOp, base: int, layer: int,
                                loss: list[tuple[float, float]], outcome: Outcome, src: torch.Tensor | None = None,
                                out: torch.Tensor | None = None) -> torch.Tensor:
        """Reduce-scatter by recursive halving, messages ``0 .. log2 P - 1`` of ``base``: at distance ``d = P/2,
        P/4, .., 1`` a rank keeps the half of its chunk range that holds its own chunk, sends the other half to
        ``rank ^ d`` and reduces the partner's copy of the kept half (``local op received``) into ``buf``; then
        chunk ``rank`` is final. ``src``/``out`` as in :meth:`reduce_scatter_flat` (the first step reads ``src``;
        the last writes ``out``). Returns the reduced chunk. The same bytes as the ring's ``P - 1`` steps in
        ``log2 P`` transfers."""
        P, r = self.size, self.rank
        tmp = self._scratch("halving", bounds[P // 2] - bounds[0], buf.dtype)  # the widest half (larger first)
        lo, hi = 0, P  # chunk range this rank still reduces
        d, j = P // 2, 0
        while d:
            mid = lo + d
            keep, give = ((lo, mid), (mid, hi)) if not r & d else ((mid, hi), (lo, mid))
            ka, kb, ga, gb = bounds[keep[0]], bounds[keep[1]], bounds[give[0]], bounds[give[1]]
            local = src if src is not None and j == 0 else buf
            got = tmp[:kb - ka]
            outcome.add(ka, self._exchange(r ^ d, local[ga:gb], r ^ d, got, self._tid_at(base, j), layer, *loss[j]))
            acc = out if out is not None and d == 1 else buf[ka:kb]
            _combine_into(op, acc, local[ka:kb], got)
            lo, hi = keep
            d //= 2
            j += 1
        return out if out is not None else buf[bounds[r]:bounds[r + 1]]

    def _doubling_all_gather(self, buf: torch.Tensor, bounds: list[int], base: int, first: int, layer: int,
                             src: Placed | None = None) -> None:
        """All-gather by recursive doubling, messages ``first ..`` of ``base``: at distance ``d = 1, 2, .., P/2`` a
        rank sends its block of ``d`` chunks to ``rank ^ d`` and receives the partner's block: ``log2 P``
        transfers instead of the ring's ``P - 1`` for the same bytes. With ``src`` (this rank's chunk held
        elsewhere) the first send reads it, and it is copied into ``buf`` before the second."""
        r = self.rank
        d, j = 1, first
        while d < self.size:
            mine, theirs = r & ~(d - 1), (r ^ d) & ~(d - 1)  # first chunk of each side's block
            ma, mb, ta, tb = bounds[mine], bounds[mine + d], bounds[theirs], bounds[theirs + d]
            data = _placed(src, ma, mb) if src is not None and d == 1 else buf[ma:mb]
            self._exchange(r ^ d, data, r ^ d, buf[ta:tb], self._tid_at(base, j), layer)
            if src is not None and d == 1:
                elementwise.copy_into(buf[ma:mb], data)
            d *= 2
            j += 1

    # --- all-reduce -----------------------------------------------------------------------------------------
    def allreduce(self, t: torch.Tensor, op: ReduceOp = ReduceOp.SUM, *, layer: int = 0,
                  loss_bound: float = 0.0) -> Outcome:
        """In-place all-reduce of the flat contiguous tensor ``t``: recursive doubling when small (below
        ``SMALL_ALLREDUCE_BYTES`` or where :func:`allreduce_by_doubling` says so, unless the call is lossy); in a
        one-host power-of-two group of 4 or more, halving-doubling up to ``HALVING_MAX_LOCAL``; otherwise the
        pipelined ring (reduce-scatter steps, then all-gather steps, fused into one pipeline).

        ``loss_bound`` (SUM/AVG of floating point only): at most that fraction of ``t`` may end zero-filled or
        biased, the same bits on every rank; the returned :class:`Outcome` lists where, the same on every rank.
        Recursive doubling has no step where a value is final before it is copied, so it is always exact: a lossy
        call above ``SMALL_ALLREDUCE_BYTES`` takes the reduce-scatter based algorithms even where the cost model
        would pick doubling."""
        out = Outcome(elements=t.numel())
        self._check_op(op, t, loss_bound)
        if _divides_first(op, t) and self.size > 1:
            elementwise.divide_(t, self.size)
            op = ReduceOp.SUM
        if self.size == 1:
            self._take_ids(1)
            _finish(op, t, 1)
            return out
        nbytes = t.numel() * t.element_size()
        budget, per_packet = self._budget(loss_bound, t.numel(), t.element_size())
        if nbytes < self.SMALL_ALLREDUCE_BYTES or t.numel() < self.size or (budget < per_packet and (
                allreduce_by_doubling(nbytes, self.size, latency=self.ALLREDUCE_LATENCY_S,
                                      link_bps=self.ALLREDUCE_LINK_BPS,
                                      reduce_bytes_per_s=self.ALLREDUCE_REDUCE_BYTES_PER_S))):
            seq = self._take_ids(1)
            self._recursive_doubling(t, op, seq, layer, out)
            return out
        if self._hypercube(nbytes):
            # Rabenseifner: halving reduce-scatter (the lossy part), then doubling all-gather, in place
            bounds, log2 = chunk_bounds(t.numel(), self.size), self.size.bit_length() - 1
            base = self._take_ids(2 * log2)
            loss = self._halving_loss(bounds, base, budget, per_packet)
            _finish(op, self._halving_reduce_scatter(t, bounds, op, base, layer, loss, out), self.size)
            self._doubling_all_gather(t, bounds, base, log2, layer)
        else:
            bounds = chunk_bounds(t.numel(), self.size)
            plan = self.ring_plan(bounds, t.element_size(), reduce=True, gather=True)
            base = self._take_ids(plan.messages)
            self._run_ring(plan, t, op, base=base, layer=layer, outcome=out, finish=True,
                           loss=self._ring_loss(plan, base, budget, per_packet))
        if budget >= per_packet:
            self._share_losses(out)
        return out

    def _recursive_doubling(self, t: torch.Tensor, op: ReduceOp, seq: int, layer: int, out: Outcome) -> None:
        """All-reduce by recursive doubling, exact (partners combine each other's data: a loss on one side would
        leave the two with different bits)."""
        P, r = self.size, self.rank
        pof2 = 1 << (P.bit_length() - 1)
        rem = P - pof2
        tmp = self._scratch("doubling", t.numel(), t.dtype)
        step = 0
        # fold the extra ranks in: even r < 2*rem gives its data to r+1 and waits for the result
        if r < 2 * rem:
            if r % 2 == 0:
                self._exchange(r + 1, t, None, None, self._tid(seq, step), layer)
                newrank = -1
            else:
                out.add(0, self._exchange(None, None, r - 1, tmp, self._tid(seq, step), layer))
                _combine(op, t, tmp)  # x[r-1] op x[r]
                newrank = r // 2
        else:
            newrank = r - rem
        step += 1
        if newrank >= 0:
            d = 1
            while d < pof2:
                partner_new = newrank ^ d
                partner = partner_new * 2 + 1 if partner_new < rem else partner_new + rem
                out.add(0, self._exchange(partner, t, partner, tmp, self._tid(seq, step), layer))
                _combine(op, t, tmp)
                d <<= 1
                step += 1
        else:
            step += int(math.log2(pof2))
        if r < 2 * rem:
            if r % 2 == 1:
                self._exchange(r - 1, t, None, None, self._tid(seq, step), layer)
            else:
                out.add(0, self._exchange(None, None, r + 1, t, self._tid(seq, step), layer))
        _finish(op, t, P)

    # --- reduce-scatter / all-gather with PyTorch's shapes ----------------------------------------------------
    def reduce_scatter(self, output: torch.Tensor, inputs: Sequence[torch.Tensor], op: ReduceOp, *,
                       layer: int = 0, loss_bound: float = 0.0) -> Outcome:
        """``output`` (this rank's share) = reduction over ranks of ``inputs[rank]``; sizes may differ per rank.
        ``loss_bound``: at most ``floor(loss_bound * k)`` of each rank's ``k`` output elements may end zero-filled
        or biased (a budget per output shard), and so at most that fraction of the call's."""
        sizes = [x.numel() for x in inputs]
        if len(sizes) != self.size:
            raise ValueError(f"reduce_scatter needs {self.size} input tensors, got {len(sizes)}")
        if output.numel() != sizes[self.rank]:
            raise ValueError(f"reduce_scatter output has {output.numel()} elements, input for this rank "
                             f"{sizes[self.rank]}")
        bounds = [0]
        for s in sizes:
            bounds.append(bounds[-1] + s)
        # Inputs laid end to end (reduce_scatter_tensor's) are read in place and stay as they are: the ring reduces
        # into scratch space, the last step straight into ``output``. Others are joined into the scratch buffer
        # (that copy is needed anyway), and the ring reduces there in place.
        first = _divides_first(op, output) and self.size > 1
        src = None if first else _consecutive(inputs, bounds, output.dtype)
        work = self._scratch("work", bounds[-1], output.dtype)
        if src is None:
            for i, x in enumerate(inputs):
                elementwise.copy_into(work[bounds[i]:bounds[i + 1]], x.reshape(-1))
        if first:  # (the inputs stay as they are: the quotients are the working copy's)
            check_loss(op, output, loss_bound)
            elementwise.divide_(work, self.size)
            op = ReduceOp.SUM
        direct = src is not None and output.is_contiguous() and not _shares_storage(output, src)
        res = Outcome(elements=bounds[-1])
        own = self.reduce_scatter_flat(work, bounds, op, layer=layer, loss_bound=loss_bound, outcome=res, src=src,
                                       out=output.view(-1) if direct else None, per_shard=True)
        if not direct:
            elementwise.copy_into(output, own.view_as(output))
        budget, per_packet = self._budget(loss_bound, bounds[-1], output.element_size())
        if budget >= per_packet:
            self._share_losses(res)
        return res

    def all_gather(self, outputs: Sequence[torch.Tensor], inp: torch.Tensor, *, layer: int = 0) -> Outcome:
        """``outputs[i]`` = rank i's ``inp`` (sizes may differ per rank; each output has that rank's size)."""
        if len(outputs) != self.size:
            raise ValueError(f"all_gather needs {self.size} output tensors, got {len(outputs)}")
        sizes = [o.numel() for o in outputs]
        if sizes[self.rank] != inp.numel():
            raise ValueError(f"all_gather output for this rank has {sizes[self.rank]} elements, input "
                             f"{inp.numel()}")
        bounds = [0]
        for s in sizes:
            bounds.append(bounds[-1] + s)
        buf = _consecutive(outputs, bounds, inp.dtype)  # outputs that tile one buffer: gather in place
        in_place = buf is not None
        if buf is None:
            buf = self._scratch("work", bounds[-1], inp.dtype)
        lo = bounds[self.rank]
        mine = buf[lo:bounds[self.rank + 1]]
        src = None
        if mine.data_ptr() != inp.data_ptr() or not inp.is_contiguous():
            if inp.is_contiguous() and not _shares_storage(inp, buf):
                src = (lo, inp.view(-1))  # sent from ``inp``; copied into place while the wire is busy
            else:
                elementwise.copy_into(mine, inp.reshape(-1))
        out = Outcome(elements=bounds[-1])
        self.all_gather_flat(buf, bounds, layer=layer, src=src)
        if not in_place:
            for i, o in enumerate(outputs):
                elementwise.copy_into(o, buf[bounds[i]:bounds[i + 1]].view_as(o))
        return out

    # --- rooted collectives ---------------------------------------------------------------------------------
    def broadcast(self, t: torch.Tensor, root: int, *, layer: int = 0) -> Outcome:
        """``t`` (flat, contiguous) from group rank ``root`` to all: binomial tree when small, chain when large.
        Exact (a copy)."""
        out = Outcome(elements=t.numel())
        seq = self._next_seq()
        P = self.size
        if P == 1:
            return out
        vr = (self.rank - root) % P  # virtual rank, root = 0
        if t.numel() * t.element_size() < self.SMALL_BROADCAST_BYTES:
            mask = 1
            while mask < P:  # receive from the parent
                if vr & mask:
                    self._exchange(None, None, (vr - mask + root), t, self._tid(seq, 0), layer)
                    break
                mask <<= 1
            mask >>= 1
            handles = []
            while mask > 0:  # send to the children
                if vr + mask < P:
                    handles.append(self.link.isend(self._peer(vr + mask + root), t, self._tid(seq, 0), layer=layer))
                mask >>= 1
            for h in handles:
                h.wait(self.timeout)
            return out
        # pipelined chain root -> root+1 -> ... ; segment k is forwarded while k+1 arrives
        nseg = min(255, max(1, math.ceil(t.numel() * t.element_size() / self.SEGMENT_BYTES)))
        bounds = chunk_bounds(t.numel(), nseg)
        handles = []
        for k in range(nseg):
            seg = t[bounds[k]:bounds[k + 1]]
            if vr > 0:
                self.link.recv(self._peer(self.rank - 1), seg, self._tid(seq, k), timeout=self.timeout)
            if vr < P - 1:
                handles.append(self.link.isend(self._peer(self.rank + 1), seg, self._tid(seq, k), layer=layer))
        for h in handles:
            h.wait(self.timeout)
        return out

    def reduce(self, t: torch.Tensor, root: int, op: ReduceOp = ReduceOp.SUM, *, layer: int = 0,
               loss_bound: float = 0.0) -> Outcome:
        """Reduction to group rank ``root``: ring reduce-scatter, then every chunk owner sends its chunk to root.
        Only root's ``t`` changes; the other ranks' ``t`` is read in place and left as it was (gloo leaves partial
        sums there; its contents are unspecified by PyTorch). With ``loss_bound`` only the reduce-scatter may lose;
        the owners' sends to root are exact."""
        out = Outcome(elements=t.numel())
        self._check_op(op, t, loss_bound)
        if self.size == 1:
            self._take_ids(1)
            _finish(op, t, 1)
            return out
        bounds = chunk_bounds(t.numel(), self.size)
        plan = self.ring_plan(bounds, t.element_size(), reduce=True, gather=False)
        base = self._take_ids(plan.messages + 1)  # the ring's messages, then one per owner -> root
        to_root = self._tid_at(base, plan.messages)
        # root reduces in place; the others read t in place and reduce into scratch space (no copy of t)
        src = None if self.rank == root else t
        work = t if src is None else self._scratch("work", t.numel(), t.dtype)
        if _divides_first(op, t):  # (a non-root's t stays as it is: the quotients are the working copy's)
            if work is not t:
                elementwise.copy_into(work, t)
            elementwise.divide_(work, self.size)
            src, op = None, ReduceOp.SUM
        self.reduce_scatter_flat(work, bounds, op, layer=layer, loss_bound=loss_bound, base=base, outcome=out,
                                 src=src)
        if self.rank == root:
            for i in range(self.size):
                if i != root and bounds[i + 1] > bounds[i]:
                    self.link.recv(self._peer(i), t[bounds[i]:bounds[i + 1]], to_root, timeout=self.timeout)
        else:
            chunk = work[bounds[self.rank]:bounds[self.rank + 1]]
            if chunk.numel():
                self.link.isend(self._peer(root), chunk, to_root, layer=layer).wait(self.timeout)
        budget, per_packet = self._budget(loss_bound, t.numel(), t.element_size())
        if budget >= per_packet:
            self._share_losses(out)
        return out

    def gather(self, outputs: Sequence[torch.Tensor] | None, inp: torch.Tensor, root: int, *,
               layer: int = 0) -> Outcome:
        out = Outcome()
        seq = self._next_seq()
        if self.rank == root:
            if outputs is None or len(outputs) != self.size:
                raise ValueError(f"gather at the root needs {self.size} output tensors")
            posted = []  # every member sends at once: post all receives before waiting for any
            try:
                for i, o in enumerate(outputs):
                    if i != root and o.numel():
                        flat = o.reshape(-1) if o.is_contiguous() else torch.empty(o.numel(), dtype=o.dtype)
                        posted.append((i, o, flat, self.link.irecv(self._peer(i), flat, self._tid(seq, 0),
                                                                   timeout=self.timeout)))
                elementwise.copy_into(outputs[root], inp.view_as(outputs[root]))
                while posted:
                    i, o, flat, h = posted[0]
                    out.add(sum(x.numel() for x in outputs[:i]), h.wait())
                    posted.pop(0)
                    if flat.data_ptr() != o.data_ptr():
                        elementwise.copy_into(o, flat.view_as(o))
            except BaseException:
                for *_, h in posted:
                    h.cancel()
                raise
        elif inp.numel():
            self.link.isend(self._peer(root), inp.reshape(-1).contiguous(), self._tid(seq, 0),
                            layer=layer).wait(self.timeout)
        return out

    def scatter(self, output: torch.Tensor, inputs: Sequence[torch.Tensor] | None, root: int, *,
                layer: int = 0) -> Outcome:
        out = Outcome()
        seq = self._next_seq()
        if self.rank == root:
            if inputs is None or len(inputs) != self.size:
                raise ValueError(f"scatter at the root needs {self.size} input tensors")
            handles = [self.link.isend(self._peer(i), x.reshape(-1).contiguous(), self._tid(seq, 0), layer=layer)
                       for i, x in enumerate(inputs) if i != root and x.numel()]
            elementwise.copy_into(output, inputs[root].view_as(output))
            for h in handles:
                h.wait(self.timeout)
        elif output.numel():
            flat = output.reshape(-1) if output.is_contiguous() else torch.empty(output.numel(), dtype=output.dtype)
            self.link.recv(self._peer(root), flat, self._tid(seq, 0), timeout=self.timeout)
            if flat.data_ptr() != output.data_ptr():
                elementwise.copy_into(output, flat.view_as(output))
        return out

    def all_to_all(self, outputs: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor], *,
                   layer: int = 0) -> Outcome:
        """``outputs[j]`` on rank i = ``inputs[i]`` of rank j; pairwise exchange in P-1 rounds."""
        if len(outputs) != self.size or len(inputs) != self.size:
            raise ValueError(f"all_to_all needs {self.size} input and output tensors")
        out = Outcome()
        seq = self._next_seq()
        elementwise.copy_into(outputs[self.rank], inputs[self.rank].view_as(outputs[self.rank]))
        for k in range(1, self.size):
            dst, src = (self.rank + k) % self.size, (self.rank - k) % self.size
            o = outputs[src]
            flat = o.reshape(-1) if o.is_contiguous() else torch.empty(o.numel(), dtype=o.dtype)
            self._exchange(dst, inputs[dst].reshape(-1).contiguous(), src, flat, self._tid(seq, k), layer)
            if flat.data_ptr() != o.data_ptr():
                elementwise.copy_into(o, flat.view_as(o))
        return out

    def barrier(self) -> None:
        """All members have entered: a one-byte all-reduce (recursive doubling, log2 P rounds)."""
        self.allreduce(torch.zeros(1, dtype=torch.uint8), ReduceOp.MAX)

    # --- point to point -------------------------------------------------------------------------------------
    def send(self, t: torch.Tensor, dst: int, tag: int = 0, *, layer: int = 0) -> None:
        """Send to group rank ``dst``; matched with the receiver's recv of the same tag, in order."""
        tid = self._p2p_tid(dst, tag, "send")
        self.link.isend(self._peer(dst), t.reshape(-1).contiguous(), tid, layer=layer).wait(self.timeout)

    def recv(self, t: torch.Tensor, src: int, tag: int = 0) -> Outcome:
        tid = self._p2p_tid(src, tag, "recv")
        flat = t.reshape(-1) if t.is_contiguous() else torch.empty(t.numel(), dtype=t.dtype)
        out = Outcome()
        out.add(0, self.link.recv(self._peer(src), flat, tid, timeout=self.timeout))
        if flat.data_ptr() != t.data_ptr():
            elementwise.copy_into(t, flat.view_as(t))
        return out

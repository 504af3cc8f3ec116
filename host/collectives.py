"""Collective algorithms over point-to-point transfers (ring, recursive doubling, trees, pipelined chains).

The algorithms only need a :class:`Link`: an asynchronous send of a flat tensor to a peer and a blocking receive
into a flat tensor, each transfer named by ``(peer, transfer_id)``. The DLCP transport's endpoint is the Link in
production (``host.backend``); anything with the same two methods works.

Bit-identical results on every rank (summation order):

* **reduce-scatter (ring)**: chunk ``c`` is reduced along the ring starting at rank ``c+1``:
  ``((x[c+1] op x[c+2]) op ...) op x[c]``, each hop computing ``received op local``; the result exists on rank
  ``c`` only, so it is the same everywhere it is later copied to.
* **all-reduce, large** = ring reduce-scatter + ring all-gather: every rank receives the owner's bytes of every
  chunk, so all ranks hold identical bits.
* **all-reduce, small** = recursive doubling. Partners compute ``a op b`` and ``b op a``; SUM, PRODUCT, MIN and MAX
  are commutative in IEEE arithmetic bit for bit, so both hold the same bits after every round. With a
  non-power-of-two size the first ``2*rem`` ranks pair up first (odd rank computes ``x[r-1] op x[r]``) and the
  even ones get the final result back.
* **AVG** is SUM followed by one division by the group size on every rank (floating-point only).

Bounded loss: a collective with loss bound ``p`` gives each of its transfers the bound ``p / h``, ``h`` being the
number of transfers an element passes through (e.g. ``2(P-1)`` for ring all-reduce), so at most a fraction ``p``
of the output can be affected; :class:`Outcome` lists the affected element ranges of the output.

Transfer ids (32 bits) are ``group (6) | kind (1) | sequence (17) | step (8)``: each collective call takes the next
sequence number of its group (every rank calls collectives in the same order), and each message inside it a step.
Point-to-point send/recv use kind 1 with ``tag mod 512`` and a per-(peer, tag) message counter.
"""

from __future__ import annotations

import enum
import math
import threading
from dataclasses import dataclass, field
from typing import Protocol, Sequence

import torch

__all__ = ["Link", "EndpointLink", "SendHandle", "RecvReport", "ReduceOp", "Outcome", "Collectives", "chunk_bounds",
           "ring_reduce_scatter_schedule"]


class SendHandle(Protocol):
    def wait(self, timeout: float | None = None) -> object: ...


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


class EndpointLink:
    """A transport :class:`~host.transport.Endpoint` as a :class:`Link` (the one adapter every user shares).

    Integer and boolean tensors are control data (counts, indices, flags): always reliable, whatever loss bound
    the caller passes. Both ends see the same dtype, so they agree."""

    def __init__(self, ep):
        self.ep = ep

    def isend(self, peer, data, transfer_id, *, layer=0, loss_bound=0.0):
        p = loss_bound if data.is_floating_point() else 0.0
        return self.ep.send(peer, data, transfer_id=transfer_id, layer=min(layer, 0xFFFF), loss_bound=p)

    def recv(self, peer, out, transfer_id, *, loss_bound=0.0, timeout=None) -> RecvReport:
        p = loss_bound if out.is_floating_point() else 0.0
        res = self.ep.recv(peer, transfer_id, out, timeout=timeout, loss_bound=p)
        return RecvReport(lost=list(res.report.lost_ranges))


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


def _combine(op: ReduceOp, acc: torch.Tensor, other: torch.Tensor) -> None:
    """``acc = other op acc`` in place (commutative ops: the operand order only documents the convention)."""
    if op in (ReduceOp.SUM, ReduceOp.AVG):
        acc.add_(other)
    elif op is ReduceOp.PRODUCT:
        acc.mul_(other)
    elif op is ReduceOp.MIN:
        torch.minimum(acc, other, out=acc)
    elif op is ReduceOp.MAX:
        torch.maximum(acc, other, out=acc)
    else:  # pragma: no cover
        raise AssertionError(op)


def _finish(op: ReduceOp, t: torch.Tensor, size: int) -> None:
    if op is ReduceOp.AVG:
        if not t.is_floating_point():
            raise TypeError(f"AVG needs a floating-point tensor, got {t.dtype}")
        t.div_(size)


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


@dataclass
class Outcome:
    """What bounded loss did during one collective, as seen by this rank.

    ``lost`` lists element ranges ``[start, stop)`` zero-filled in transfers this rank received, in the
    coordinates of the collective's flat buffer (the tensor for all-reduce/broadcast/reduce; the concatenation of
    the inputs for reduce-scatter and of the outputs for all-gather/gather/all-to-all). A zero-filled partial sum
    is forwarded as data, so the elements of the result that differ from the exact one are covered by the
    *union* of all ranks' ranges; each rank alone sees only what it lost itself.
    """

    lost: list[tuple[int, int]] = field(default_factory=list)

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


class Collectives:
    """The collectives of one process group: ``ranks`` are the members' global ranks in group order.

    Not thread-safe per instance: the backend runs one group's collectives in issue order on one thread.
    """

    SMALL_ALLREDUCE_BYTES = 64 * 1024  # below this, recursive doubling (latency) beats the ring (bandwidth)
    SMALL_BROADCAST_BYTES = 256 * 1024  # below this, binomial tree; above, pipelined chain
    SEGMENT_BYTES = 1 << 20  # pipelined chain segment (at most 255 segments: the step field is 8 bits)

    def __init__(self, link: Link, ranks: Sequence[int], my_rank: int, group_tag: int = 0,
                 timeout: float | None = 60.0):
        if my_rank not in ranks:
            raise ValueError(f"rank {my_rank} is not a member of group {list(ranks)}")
        if not 0 <= group_tag < 64:
            raise ValueError("group_tag must be in 0..63")
        self.link = link
        self.ranks = list(ranks)
        self.size = len(self.ranks)
        self.rank = self.ranks.index(my_rank)  # index within the group
        self.group_tag = group_tag
        self.timeout = timeout
        self._seq = 0
        self._p2p_counts: dict[tuple[int, int, str], int] = {}
        self._p2p_lock = threading.Lock()

    # --- transfer naming ----------------------------------------------------------------------------------
    def _next_seq(self) -> int:
        s = self._seq
        self._seq = (self._seq + 1) % (1 << 17)
        return s

    def _tid(self, seq: int, step: int) -> int:
        if not 0 <= step < 256:
            raise ValueError(f"collective step {step} exceeds 255")
        return (self.group_tag << 26) | (seq << 8) | step

    def _p2p_tid(self, peer: int, tag: int, direction: str) -> int:
        with self._p2p_lock:
            key = (peer, tag % 512, direction)
            n = self._p2p_counts.get(key, 0)
            self._p2p_counts[key] = n + 1
        return (self.group_tag << 26) | (1 << 25) | ((tag % 512) << 16) | (n & 0xFFFF)

    def _peer(self, idx: int) -> int:
        return self.ranks[idx % self.size]

    # --- primitives ---------------------------------------------------------------------------------------
    def _exchange(self, send_to: int | None, data: torch.Tensor | None, recv_from: int | None,
                  out: torch.Tensor | None, tid: int, layer: int, p: float) -> RecvReport | None:
        """Send ``data`` to one group member while receiving ``out`` from another (either may be None)."""
        h = None
        if send_to is not None and data is not None and data.numel():
            h = self.link.isend(self._peer(send_to), data, tid, layer=layer, loss_bound=p)
        rep = None
        if recv_from is not None and out is not None and out.numel():
            rep = self.link.recv(self._peer(recv_from), out, tid, loss_bound=p, timeout=self.timeout)
        if h is not None:
            h.wait(self.timeout)
        return rep

    # --- reduce-scatter / all-gather ----------------------------------------------------------------------
    def reduce_scatter_flat(self, buf: torch.Tensor, bounds: list[int], op: ReduceOp, *, layer: int = 0,
                            loss_bound: float = 0.0, hops_total: int | None = None, finish: bool = True,
                            seq: int | None = None, outcome: Outcome | None = None) -> torch.Tensor:
        """Ring reduce-scatter of the flat ``buf`` (modified in place); returns this rank's reduced chunk (a view).

        ``bounds`` has ``size + 1`` entries; chunk ``i`` ends on group rank ``i``.
        """
        P, r = self.size, self.rank
        seq = self._next_seq() if seq is None else seq
        outcome = outcome if outcome is not None else Outcome()
        if P == 1:
            return buf[bounds[0]:bounds[1]]
        p = loss_bound / (hops_total or (P - 1))
        widest = max(bounds[i + 1] - bounds[i] for i in range(P))
        tmp = torch.empty(widest, dtype=buf.dtype)
        for step, (send_c, recv_c) in enumerate(ring_reduce_scatter_schedule(r, P)):
            n = bounds[recv_c + 1] - bounds[recv_c]
            rep = self._exchange(r + 1, buf[bounds[send_c]:bounds[send_c + 1]], r - 1, tmp[:n],
                                 self._tid(seq, step), layer, p)
            _combine(op, buf[bounds[recv_c]:bounds[recv_c + 1]], tmp[:n])
            outcome.add(bounds[recv_c], rep)
        own = buf[bounds[r]:bounds[r + 1]]
        if finish:
            _finish(op, own, P)
        return own

    def all_gather_flat(self, buf: torch.Tensor, bounds: list[int], *, layer: int = 0, loss_bound: float = 0.0,
                        hops_total: int | None = None, seq: int | None = None,
                        outcome: Outcome | None = None) -> None:
        """Ring all-gather in place: on entry chunk ``rank`` of ``buf`` is valid; on exit every chunk is."""
        P, r = self.size, self.rank
        seq = self._next_seq() if seq is None else seq
        outcome = outcome if outcome is not None else Outcome()
        if P == 1:
            return
        p = loss_bound / (hops_total or (P - 1))
        for step in range(P - 1):
            send_c, recv_c = (r - step) % P, (r - step - 1) % P
            rep = self._exchange(r + 1, buf[bounds[send_c]:bounds[send_c + 1]], r - 1,
                                 buf[bounds[recv_c]:bounds[recv_c + 1]], self._tid(seq, 128 + step), layer, p)
            outcome.add(bounds[recv_c], rep)

    # --- all-reduce -----------------------------------------------------------------------------------------
    def allreduce(self, t: torch.Tensor, op: ReduceOp = ReduceOp.SUM, *, layer: int = 0,
                  loss_bound: float = 0.0) -> Outcome:
        """In-place all-reduce of the flat contiguous tensor ``t``: recursive doubling when small, ring otherwise."""
        out = Outcome()
        seq = self._next_seq()
        if self.size == 1:
            _finish(op, t, 1)
            return out
        if t.numel() * t.element_size() < self.SMALL_ALLREDUCE_BYTES or t.numel() < self.size:
            self._recursive_doubling(t, op, seq, layer, loss_bound, out)
        else:
            bounds = chunk_bounds(t.numel(), self.size)
            hops = 2 * (self.size - 1)
            self.reduce_scatter_flat(t, bounds, op, layer=layer, loss_bound=loss_bound, hops_total=hops, seq=seq,
                                     outcome=out)
            self.all_gather_flat(t, bounds, layer=layer, loss_bound=loss_bound, hops_total=hops, seq=seq,
                                 outcome=out)
        return out

    def _recursive_doubling(self, t: torch.Tensor, op: ReduceOp, seq: int, layer: int, loss_bound: float,
                            out: Outcome) -> None:
        P, r = self.size, self.rank
        pof2 = 1 << (P.bit_length() - 1)
        rem = P - pof2
        rounds = int(math.log2(pof2)) + (2 if rem else 0)
        p = loss_bound / max(rounds, 1)
        tmp = torch.empty_like(t)
        step = 0
        # fold the extra ranks in: even r < 2*rem gives its data to r+1 and waits for the result
        if r < 2 * rem:
            if r % 2 == 0:
                self._exchange(r + 1, t, None, None, self._tid(seq, step), layer, p)
                newrank = -1
            else:
                out.add(0, self._exchange(None, None, r - 1, tmp, self._tid(seq, step), layer, p))
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
                out.add(0, self._exchange(partner, t, partner, tmp, self._tid(seq, step), layer, p))
                _combine(op, t, tmp)
                d <<= 1
                step += 1
        else:
            step += int(math.log2(pof2))
        if r < 2 * rem:
            if r % 2 == 1:
                self._exchange(r - 1, t, None, None, self._tid(seq, step), layer, p)
            else:
                out.add(0, self._exchange(None, None, r + 1, t, self._tid(seq, step), layer, p))
        _finish(op, t, P)

    # --- reduce-scatter / all-gather with PyTorch's shapes ----------------------------------------------------
    def reduce_scatter(self, output: torch.Tensor, inputs: Sequence[torch.Tensor], op: ReduceOp, *,
                       layer: int = 0, loss_bound: float = 0.0) -> Outcome:
        """``output`` (this rank's share) = reduction over ranks of ``inputs[rank]``; sizes may differ per rank."""
        sizes = [x.numel() for x in inputs]
        if len(sizes) != self.size:
            raise ValueError(f"reduce_scatter needs {self.size} input tensors, got {len(sizes)}")
        if output.numel() != sizes[self.rank]:
            raise ValueError(f"reduce_scatter output has {output.numel()} elements, input for this rank "
                             f"{sizes[self.rank]}")
        buf = torch.cat([x.reshape(-1) for x in inputs]) if inputs else output.new_empty(0)
        bounds = [0]
        for s in sizes:
            bounds.append(bounds[-1] + s)
        out = Outcome()
        own = self.reduce_scatter_flat(buf, bounds, op, layer=layer, loss_bound=loss_bound, outcome=out)
        output.copy_(own.view_as(output))
        return out

    def all_gather(self, outputs: Sequence[torch.Tensor], inp: torch.Tensor, *, layer: int = 0,
                   loss_bound: float = 0.0) -> Outcome:
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
        buf = torch.empty(bounds[-1], dtype=inp.dtype)
        buf[bounds[self.rank]:bounds[self.rank + 1]].copy_(inp.reshape(-1))
        out = Outcome()
        self.all_gather_flat(buf, bounds, layer=layer, loss_bound=loss_bound, outcome=out)
        for i, o in enumerate(outputs):
            o.copy_(buf[bounds[i]:bounds[i + 1]].view_as(o))
        return out

    # --- rooted collectives ---------------------------------------------------------------------------------
    def broadcast(self, t: torch.Tensor, root: int, *, layer: int = 0, loss_bound: float = 0.0) -> Outcome:
        """``t`` (flat, contiguous) from group rank ``root`` to all: binomial tree when small, chain when large."""
        out = Outcome()
        seq = self._next_seq()
        P = self.size
        if P == 1:
            return out
        vr = (self.rank - root) % P  # virtual rank, root = 0
        if t.numel() * t.element_size() < self.SMALL_BROADCAST_BYTES:
            rounds = max(1, (P - 1).bit_length())
            p = loss_bound / rounds
            mask = 1
            while mask < P:  # receive from the parent
                if vr & mask:
                    out.add(0, self._exchange(None, None, (vr - mask + root), t, self._tid(seq, 0), layer, p))
                    break
                mask <<= 1
            mask >>= 1
            handles = []
            while mask > 0:  # send to the children
                if vr + mask < P:
                    handles.append(self.link.isend(self._peer(vr + mask + root), t, self._tid(seq, 0), layer=layer,
                                                   loss_bound=p))
                mask >>= 1
            for h in handles:
                h.wait(self.timeout)
            return out
        # pipelined chain root -> root+1 -> ... ; segment k is forwarded while k+1 arrives
        nseg = min(255, max(1, math.ceil(t.numel() * t.element_size() / self.SEGMENT_BYTES)))
        bounds = chunk_bounds(t.numel(), nseg)
        p = loss_bound / (P - 1)
        handles = []
        for k in range(nseg):
            seg = t[bounds[k]:bounds[k + 1]]
            if vr > 0:
                out.add(bounds[k], self.link.recv(self._peer(self.rank - 1), seg, self._tid(seq, k),
                                                  loss_bound=p, timeout=self.timeout))
            if vr < P - 1:
                handles.append(self.link.isend(self._peer(self.rank + 1), seg, self._tid(seq, k), layer=layer,
                                               loss_bound=p))
        for h in handles:
            h.wait(self.timeout)
        return out

    def reduce(self, t: torch.Tensor, root: int, op: ReduceOp = ReduceOp.SUM, *, layer: int = 0,
               loss_bound: float = 0.0) -> Outcome:
        """Reduction to group rank ``root``: ring reduce-scatter, then every chunk owner sends its chunk to root.
        Only root's ``t`` is defined afterwards (other ranks' ``t`` holds partial sums, as with gloo)."""
        out = Outcome()
        seq = self._next_seq()
        if self.size == 1:
            _finish(op, t, 1)
            return out
        bounds = chunk_bounds(t.numel(), self.size)
        work = t if self.rank == root else t.clone()
        self.reduce_scatter_flat(work, bounds, op, layer=layer, loss_bound=loss_bound / 2, seq=seq, outcome=out)
        if self.rank == root:
            for i in range(self.size):
                if i != root:
                    out.add(bounds[i], self.link.recv(self._peer(i), t[bounds[i]:bounds[i + 1]],
                                                      self._tid(seq, 200), loss_bound=loss_bound / 2,
                                                      timeout=self.timeout))
        else:
            chunk = work[bounds[self.rank]:bounds[self.rank + 1]]
            if chunk.numel():
                self.link.isend(self._peer(root), chunk, self._tid(seq, 200), layer=layer,
                                loss_bound=loss_bound / 2).wait(self.timeout)
        return out

    def gather(self, outputs: Sequence[torch.Tensor] | None, inp: torch.Tensor, root: int, *, layer: int = 0,
               loss_bound: float = 0.0) -> Outcome:
        out = Outcome()
        seq = self._next_seq()
        if self.rank == root:
            if outputs is None or len(outputs) != self.size:
                raise ValueError(f"gather at the root needs {self.size} output tensors")
            for i, o in enumerate(outputs):
                if i == root:
                    o.copy_(inp.view_as(o))
                elif o.numel():
                    flat = o.reshape(-1) if o.is_contiguous() else torch.empty(o.numel(), dtype=o.dtype)
                    out.add(sum(x.numel() for x in outputs[:i]),
                            self.link.recv(self._peer(i), flat, self._tid(seq, 0), loss_bound=loss_bound,
                                           timeout=self.timeout))
                    if flat.data_ptr() != o.data_ptr():
                        o.copy_(flat.view_as(o))
        elif inp.numel():
            self.link.isend(self._peer(root), inp.reshape(-1).contiguous(), self._tid(seq, 0), layer=layer,
                            loss_bound=loss_bound).wait(self.timeout)
        return out

    def scatter(self, output: torch.Tensor, inputs: Sequence[torch.Tensor] | None, root: int, *, layer: int = 0,
                loss_bound: float = 0.0) -> Outcome:
        out = Outcome()
        seq = self._next_seq()
        if self.rank == root:
            if inputs is None or len(inputs) != self.size:
                raise ValueError(f"scatter at the root needs {self.size} input tensors")
            handles = [self.link.isend(self._peer(i), x.reshape(-1).contiguous(), self._tid(seq, 0), layer=layer,
                                       loss_bound=loss_bound)
                       for i, x in enumerate(inputs) if i != root and x.numel()]
            output.copy_(inputs[root].view_as(output))
            for h in handles:
                h.wait(self.timeout)
        elif output.numel():
            flat = output.reshape(-1) if output.is_contiguous() else torch.empty(output.numel(), dtype=output.dtype)
            out.add(0, self.link.recv(self._peer(root), flat, self._tid(seq, 0), loss_bound=loss_bound,
                                      timeout=self.timeout))
            if flat.data_ptr() != output.data_ptr():
                output.copy_(flat.view_as(output))
        return out

    def all_to_all(self, outputs: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor], *, layer: int = 0,
                   loss_bound: float = 0.0) -> Outcome:
        """``outputs[j]`` on rank i = ``inputs[i]`` of rank j; pairwise exchange in P-1 rounds."""
        if len(outputs) != self.size or len(inputs) != self.size:
            raise ValueError(f"all_to_all needs {self.size} input and output tensors")
        out = Outcome()
        seq = self._next_seq()
        outputs[self.rank].copy_(inputs[self.rank].view_as(outputs[self.rank]))
        for k in range(1, self.size):
            dst, src = (self.rank + k) % self.size, (self.rank - k) % self.size
            o = outputs[src]
            flat = o.reshape(-1) if o.is_contiguous() else torch.empty(o.numel(), dtype=o.dtype)
            out.add(sum(x.numel() for x in outputs[:src]),
                    self._exchange(dst, inputs[dst].reshape(-1).contiguous(), src, flat, self._tid(seq, k), layer,
                                   loss_bound))
            if flat.data_ptr() != o.data_ptr():
                o.copy_(flat.view_as(o))
        return out

    def barrier(self) -> None:
        """All members have entered: a one-byte all-reduce (recursive doubling, log2 P rounds)."""
        self.allreduce(torch.zeros(1, dtype=torch.uint8), ReduceOp.MAX)

    # --- point to point -------------------------------------------------------------------------------------
    def send(self, t: torch.Tensor, dst: int, tag: int = 0, *, layer: int = 0, loss_bound: float = 0.0) -> None:
        """Send to group rank ``dst``; matched with the receiver's recv of the same tag, in order."""
        tid = self._p2p_tid(dst, tag, "send")
        self.link.isend(self._peer(dst), t.reshape(-1).contiguous(), tid, layer=layer,
                        loss_bound=loss_bound).wait(self.timeout)

    def recv(self, t: torch.Tensor, src: int, tag: int = 0, *, loss_bound: float = 0.0) -> Outcome:
        tid = self._p2p_tid(src, tag, "recv")
        flat = t.reshape(-1) if t.is_contiguous() else torch.empty(t.numel(), dtype=t.dtype)
        out = Outcome()
        out.add(0, self.link.recv(self._peer(src), flat, tid, loss_bound=loss_bound, timeout=self.timeout))
        if flat.data_ptr() != t.data_ptr():
            t.copy_(flat.view_as(t))
        return out

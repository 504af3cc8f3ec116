"""SparDL per rank as a *program*: a generator that yields communication :class:`Round` s and gets the received
messages back. The same program runs on an in-memory exchange (``exchange.run_simulated``: P ranks in one
process, for the algorithmic tests) and on real transports (``exchange.run_on_group`` over a process group's
isend/irecv, ``exchange.LinkExchange`` over the DLCP transport), so what the tests check is what runs.

Phases (``P`` ranks, ``d`` teams of ``m``; see :mod:`host.spardl.algo` for the layout):

1. **Spar-Reduce-Scatter** inside each team (:func:`spar_reduce_scatter`): ``algo.srs_schedule`` hops; before
   every send a rank re-selects the top-``k_b`` of each block it passes on from its dense live buffer, so no
   block ever carries more than ``k_b`` non-zeros; what it does not pass on stays in the live buffer. Position
   ``j`` ends owning block ``j`` (the team's partial sum of it) and selects its piece: top-``h`` (``d > 1``) or
   top-``k`` (``d = 1``).
2. **Spar-All-Gather** (:func:`spar_all_gather`): the ``d`` holders of block ``j`` (one per team) Bruck
   all-gather their pieces (``ceil(log2 d)`` steps), merge them in team order (identical bits everywhere) and
   cut the union back to ``k_j``; then every team Bruck all-gathers its ``m`` final blocks (``ceil(log2 m)``
   steps). Every rank ends with the same result.
3. **Global residual collection** (``algo.collect_residual``) with the final index set.

Message tags: ``phase * 32 + step`` (phase 1 = reduce-scatter, 2 = cross-team, 3 = team all-gather).

Devices: a program runs on the device of the tensor it reduces (host or CUDA). Its buffers, selections, merges
and result live there; messages are host memory, and :func:`encode_message` / :func:`decode_message` move just the
entries of each message across (:mod:`host.spardl.device`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generator, TypeVar

import torch

from host import sparse_wire as sw
from host.spardl import algo, select, sparse_ops
from host.spardl import device as dv
from host.spardl.clock import PhaseClock, phase

__all__ = ["Send", "Recv", "Round", "Program", "Plan", "HopRecord", "RSState", "SparDLOutput",
           "spar_reduce_scatter", "spar_all_gather", "spardl", "encode_message", "decode_message", "TAG_SRS",
           "TAG_TEAMS", "TAG_AG"]

T = TypeVar("T")

TAG_SRS, TAG_TEAMS, TAG_AG = 1, 2, 3


@dataclass(frozen=True)
class Send:
    peer: int  # group rank
    data: torch.Tensor  # flat uint8
    tag: int


@dataclass(frozen=True)
class Recv:
    peer: int
    nbytes: int
    tag: int


@dataclass(frozen=True)
class Round:
    """Messages to post together; the program resumes with the received buffers in ``recvs`` order."""

    sends: tuple[Send, ...]
    recvs: tuple[Recv, ...]


Program = Generator[Round, list, T]


@dataclass(frozen=True)
class Plan:
    """Everything every rank derives alike from (n, P, d, density, dtype): blocks and budgets."""

    n: int
    world: int
    teams: int
    density: float
    dtype: torch.dtype
    m: int
    bounds: tuple[int, ...]
    ks: tuple[int, ...]

    @classmethod
    def make(cls, n: int, world: int, teams: int, density: float, dtype: torch.dtype) -> "Plan":
        m = algo.team_size(world, teams)
        bounds = algo.block_bounds(n, m)
        ks = tuple(algo.block_budget(bounds[b + 1] - bounds[b], density) for b in range(m))
        if not (dtype.is_floating_point):
            raise TypeError(f"SparDL reduces floating-point gradients, got {dtype}")
        return cls(n, world, teams, density, dtype, m, tuple(bounds), ks)

    def block_len(self, b: int) -> int:
        return self.bounds[b + 1] - self.bounds[b]

    def team_of(self, rank: int) -> tuple[int, int]:
        """(team, position) of a rank."""
        return divmod(rank, self.m)

    def new_h(self, rank: int) -> algo.AdaptiveH:
        j = rank % self.m
        return algo.AdaptiveH(self.ks[j], self.teams, self.block_len(j))


@dataclass(frozen=True)
class HopRecord:
    """One message as the program built or decoded it: the non-zeros per block it carried."""

    phase: str
    step: int
    direction: str  # "send" or "recv"
    peer: int
    blocks: tuple[tuple[int, int], ...]  # (block, entries)


@dataclass
class RSState:
    """What Spar-Reduce-Scatter leaves on a rank, the input of Spar-All-Gather."""

    plan: Plan
    rank: int
    live: torch.Tensor  # the working buffer: what this rank still holds and has not passed on (flat)
    undo: algo.UndoLog  # everything ``live`` changed since it held the input plus old residual
    piece: tuple[torch.Tensor, torch.Tensor]  # (block-local indices, values) of its own block
    h: int
    trace: list[HopRecord] = field(default_factory=list)
    bytes_sent: int = 0
    clock: PhaseClock | None = None


@dataclass
class SparDLOutput:
    result: torch.Tensor  # the aggregated (summed) sparse result, dense, identical on every rank
    residual: torch.Tensor  # this rank's new residual
    selected: torch.Tensor  # global indices (ascending) of the result's entries
    union: int  # size of the merged union of this rank's block before the cut (= piece size when d = 1)
    trace: list[HopRecord]
    bytes_sent: int


def encode_message(specs: list[sw.SegmentSpec], segments: list[sw.Segment], dtype: torch.dtype) -> torch.Tensor:
    """One wire message (host ``uint8``) of ``segments`` whose indices and values may be on a device: those are
    staged to the host first, all of the message's in one copy (:func:`host.spardl.device.to_host`)."""
    flat = dv.to_host([t for seg in segments for t in (seg.indices, seg.values)])
    return sw.encode(specs, [sw.Segment(seg.tag, flat[2 * i], flat[2 * i + 1]) for i, seg in enumerate(segments)],
                     dtype)


def decode_message(buf: torch.Tensor, specs: list[sw.SegmentSpec], dtype: torch.dtype,
                   device: torch.device) -> list[sw.Segment]:
    """The segments of a received message with their indices and values on ``device`` (staged there in one
    copy for the whole message, :func:`host.spardl.device.to_device`)."""
    segs = sw.decode(buf, specs, dtype)
    flat = dv.to_device([t for seg in segs for t in (seg.indices, seg.values)], device)
    return [sw.Segment(seg.tag, flat[2 * i], flat[2 * i + 1]) for i, seg in enumerate(segs)]


def same_memory(out: torch.Tensor | None, addend: torch.Tensor | None) -> bool:
    """``out`` and ``addend`` are the same contiguous memory (so a pass reading ``addend`` may clear it for
    ``out``)."""
    return (out is not None and addend is not None and out.numel() == addend.numel() and out.dtype == addend.dtype
            and out.is_contiguous() and addend.is_contiguous() and out.data_ptr() == addend.data_ptr())


def _block(x: torch.Tensor, plan: Plan, b: int) -> torch.Tensor:
    return x[plan.bounds[b]:plan.bounds[b + 1]]


def spar_reduce_scatter(plan: Plan, rank: int, original: torch.Tensor, h: int, *, own_input: bool = False,
                        addend: torch.Tensor | None = None, clear_addend: bool = False,
                        clock: PhaseClock | None = None) -> Program[RSState]:
    """Phase 1 on ``rank``: ``original`` is the flat input plus the old residual. It is not modified unless
    ``own_input``: the caller hands it over, and it becomes the live buffer and then the new residual, saving a
    copy of the gradient. ``addend``: the input is ``original + addend`` (error feedback: ``original`` the old
    residual, ``addend`` the gradient), added in the first pass over the buffer, fused with selection;
    ``clear_addend`` zeroes the addend in that pass (it is the buffer the dense result goes into).

    The live buffer changes only sparsely (sent top-k zeroed, received pieces added), recorded in an
    :class:`~host.spardl.algo.UndoLog` for global residual collection. Selection: one pass over the buffer takes
    threshold candidates of every block (:class:`~host.spardl.select.Candidates`); received positions are
    touched into them, so each re-selection before a send looks at a few ``k`` positions, not at the block, and
    is still the exact top-k."""
    for what, t in (("tensor", original), ("addend", addend)):
        if t is not None and (t.numel() != plan.n or t.dtype != plan.dtype):
            raise ValueError(f"rank {rank}: {what} of {t.numel()} {t.dtype} elements, the plan is for "
                             f"{plan.n} {plan.dtype}")
    device = dv.device_of(original, "SparDL")
    if addend is not None and addend.device != device:
        raise ValueError(f"rank {rank}: addend on {addend.device}, tensor on {device}")
    team, pos = plan.team_of(rank)
    base = team * plan.m
    flat = original.detach().reshape(-1)
    live = flat if own_input else flat.clone()
    vsize = live.element_size()
    undo = algo.UndoLog()
    hops = algo.srs_schedule(pos, plan.m)
    add = None if addend is None else addend.detach().reshape(-1)
    with phase(clock, "pass"):  # one dense pass (adding addend): threshold candidates of every block
        scratch = select.new_scratch(live)
        cands = {b: select.Candidates.take(_block(live, plan, b), plan.ks[b], scratch=scratch,
                                           addend=None if add is None else _block(add, plan, b),
                                           clear_addend=clear_addend)
                 for b in range(plan.m)}
    trace: list[HopRecord] = []
    sent = 0
    for hop in hops:
        step = hop.step
        tag = TAG_SRS * 32 + step
        sends: tuple[Send, ...] = ()
        if hop.send_to is not None:
            specs = [sw.SegmentSpec(b, plan.block_len(b), plan.ks[b]) for b in hop.send_blocks]
            segs = []
            for b in hop.send_blocks:
                blk = _block(live, plan, b)
                with phase(clock, "select"):
                    sel = select.select_topk(blk, plan.ks[b], cands.pop(b, None))
                with phase(clock, "pack"):
                    vals = sparse_ops.gather(blk, sel)
                    undo.record(blk, sel, vals)
                    sparse_ops.fill(blk, sel, 0)
                segs.append(sw.Segment(b, sel, vals))
            with phase(clock, "pack"):
                msg = encode_message(specs, segs, plan.dtype)
            sent += msg.numel()
            trace.append(HopRecord(hop.phase, step, "send", base + hop.send_to,
                                   tuple((s.tag, s.indices.numel()) for s in segs)))
            sends = (Send(base + hop.send_to, msg, tag),)
        recv_specs = [sw.SegmentSpec(b, plan.block_len(b), plan.ks[b]) for b in hop.recv_blocks]
        recvs = ((Recv(base + hop.recv_from, sw.message_bytes(recv_specs, vsize), tag),)
                 if hop.recv_from is not None else ())
        got = yield Round(sends, recvs)
        with phase(clock, "merge"):
            for buf in got:
                segs = decode_message(buf, recv_specs, plan.dtype, device)
                trace.append(HopRecord(hop.phase, step, "recv", base + hop.recv_from,
                                       tuple((s.tag, s.indices.numel()) for s in segs)))
                for s in segs:
                    blk = _block(live, plan, s.tag)
                    undo.record(blk, s.indices, sparse_ops.add(blk, s.indices, s.values))
                    c = cands.get(s.tag)
                    if c is not None:
                        c.touch(s.indices)
    own = _block(live, plan, pos)
    budget = plan.ks[pos] if plan.teams == 1 else min(h, plan.ks[pos])
    with phase(clock, "select"):
        sel = select.select_topk(own, budget, cands.pop(pos, None))
    with phase(clock, "pack"):
        piece = (sel, sparse_ops.gather(own, sel))
        undo.record(own, sel, piece[1])
        sparse_ops.fill(own, sel, 0)
    return RSState(plan, rank, live, undo, piece, budget, trace, sent, clock)


def _bruck(participants: list[int], me: int, items: list[tuple[torch.Tensor, torch.Tensor]], spec_of,
           dtype: torch.dtype, device: torch.device, tag_phase: int, name: str, trace: list[HopRecord],
           clock: PhaseClock | None = None) -> Program[tuple[list, int]]:
    """Bruck all-gather of sparse items among ``participants`` (ranks); ``me`` is this rank's index there and
    ``items == [own item]`` (on ``device``, where the received ones go too). ``spec_of(origin)`` is the segment
    spec of origin's item. Returns the items by origin index and the bytes sent."""
    n = len(participants)
    vsize = dtype.itemsize
    sent = 0
    for step, st in enumerate(algo.bruck_schedule(me, n)):
        tag = tag_phase * 32 + step
        out_specs = [spec_of((me + i) % n) for i in range(st.count)]
        in_specs = [spec_of((me + st.gap + i) % n) for i in range(st.count)]
        segs = [sw.Segment(spec.tag, idx, vals) for spec, (idx, vals) in zip(out_specs, items[:st.count])]
        with phase(clock, "pack"):
            msg = encode_message(out_specs, segs, dtype)
        sent += msg.numel()
        trace.append(HopRecord(name, step, "send", participants[st.send_to],
                               tuple((s.tag, s.indices.numel()) for s in segs)))
        (buf,) = yield Round((Send(participants[st.send_to], msg, tag),),
                             (Recv(participants[st.recv_from], sw.message_bytes(in_specs, vsize), tag),))
        with phase(clock, "merge"):
            got = decode_message(buf, in_specs, dtype, device)
        trace.append(HopRecord(name, step, "recv", participants[st.recv_from],
                               tuple((s.tag, s.indices.numel()) for s in got)))
        items.extend((s.indices, s.values) for s in got)
    by_origin = [items[(o - me) % n] for o in range(n)]
    return by_origin, sent


def spar_all_gather(rs: RSState, *, out: torch.Tensor | None = None, out_is_clear: bool = False,
                    divisor: int = 1) -> Program[SparDLOutput]:
    """Phase 2 and global residual collection on ``rs.rank``. The dense result is written into ``out`` (flat,
    contiguous, the plan's size and dtype; default: a new tensor; ``out_is_clear``: it holds zeros already);
    ``divisor`` divides the result's entries (an average without a pass over the dense result)."""
    plan, rank, clock = rs.plan, rs.rank, rs.clock
    if out is not None and (out.numel() != plan.n or out.dtype != plan.dtype or not out.is_contiguous()):
        raise ValueError(f"rank {rank}: out must be a contiguous tensor of {plan.n} {plan.dtype} elements")
    team, pos = plan.team_of(rank)
    device = rs.live.device
    if out is not None and out.device != device:
        raise ValueError(f"rank {rank}: out on {out.device}, the reduced tensor on {device}")
    trace = list(rs.trace)
    sent = rs.bytes_sent
    blen, k = plan.block_len(pos), plan.ks[pos]
    if plan.teams > 1:
        holders = [t * plan.m + pos for t in range(plan.teams)]
        pieces, s = yield from _bruck(holders, team, [rs.piece],
                                      lambda origin: sw.SegmentSpec(origin, blen, rs.h),
                                      plan.dtype, device, TAG_TEAMS, "teams", trace, clock)
        sent += s
        with phase(clock, "merge"):
            union_idx, union_vals = algo.merge_pieces(pieces, blen, plan.dtype)
        union = union_idx.numel()
        with phase(clock, "select"):
            final = algo.cut_to_budget(union_idx, union_vals, k)
    else:
        final = rs.piece
        union = final[0].numel()
    members = [team * plan.m + j for j in range(plan.m)]
    blocks, s = yield from _bruck(members, pos, [final],
                                  lambda b: sw.SegmentSpec(b, plan.block_len(b), plan.ks[b]),
                                  plan.dtype, device, TAG_AG, "gather", trace, clock)
    sent += s
    with phase(clock, "output"):
        if out is None:
            result = torch.zeros(plan.n, dtype=plan.dtype, device=device)
        else:
            result = out.view(-1) if out_is_clear else out.view(-1).zero_()
        selected = torch.cat([idx + plan.bounds[b] for b, (idx, _) in enumerate(blocks)]) if blocks else \
            torch.empty(0, dtype=torch.int64, device=device)
        for b, (idx, vals) in enumerate(blocks):
            sparse_ops.put(_block(result, plan, b), idx, vals if divisor == 1 else vals / divisor)
    with phase(clock, "residual"):
        residual = algo.collect_residual_in_place(rs.live, rs.undo, selected)
    return SparDLOutput(result, residual, selected, union, trace, sent)


def spardl(plan: Plan, rank: int, original: torch.Tensor, h: int, *, own_input: bool = False,
           addend: torch.Tensor | None = None, out: torch.Tensor | None = None, divisor: int = 1,
           clock: PhaseClock | None = None) -> Program[SparDLOutput]:
    """The whole sparse all-reduce on ``rank`` (both phases). ``own_input``: ``original`` becomes the live
    buffer and the new residual; ``addend``: added to ``original`` first (fused with the first pass); ``out``:
    where the dense result goes (it may be ``addend``'s memory: the first pass then clears it as it reads it,
    so the gradient is gone from the moment the program starts);
    ``divisor``: divide the result by it."""
    reuse = same_memory(out, addend)  # the result goes into the addend: the first pass clears it as it reads it
    rs = yield from spar_reduce_scatter(plan, rank, original, h, own_input=own_input, addend=addend,
                                        clear_addend=reuse, clock=clock)
    result = yield from spar_all_gather(rs, out=out, out_is_clear=reuse, divisor=divisor)
    return result

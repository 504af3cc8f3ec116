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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generator, TypeVar

import torch

from host import sparse_wire as sw
from host.spardl import algo

__all__ = ["Send", "Recv", "Round", "Program", "Plan", "HopRecord", "RSState", "SparDLOutput",
           "spar_reduce_scatter", "spar_all_gather", "spardl", "TAG_SRS", "TAG_TEAMS", "TAG_AG"]

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
    original: torch.Tensor  # input plus old residual (flat)
    live: torch.Tensor  # what this rank still holds and has not passed on
    piece: tuple[torch.Tensor, torch.Tensor]  # (block-local indices, values) of its own block
    h: int
    trace: list[HopRecord] = field(default_factory=list)
    bytes_sent: int = 0
    own_input: bool = False  # ``original`` may be overwritten with the residual


@dataclass
class SparDLOutput:
    result: torch.Tensor  # the aggregated (summed) sparse result, dense, identical on every rank
    residual: torch.Tensor  # this rank's new residual
    selected: torch.Tensor  # global indices (ascending) of the result's entries
    union: int  # size of the merged union of this rank's block before the cut (= piece size when d = 1)
    trace: list[HopRecord]
    bytes_sent: int


def _block(x: torch.Tensor, plan: Plan, b: int) -> torch.Tensor:
    return x[plan.bounds[b]:plan.bounds[b + 1]]


def spar_reduce_scatter(plan: Plan, rank: int, original: torch.Tensor, h: int, *,
                        own_input: bool = False) -> Program[RSState]:
    """Phase 1 on ``rank``: ``original`` is the flat input plus the old residual. It is not modified unless
    ``own_input`` (the caller hands it over: global residual collection then builds the residual in it, saving a
    copy of the gradient)."""
    if original.numel() != plan.n or original.dtype != plan.dtype:
        raise ValueError(f"rank {rank}: tensor of {original.numel()} {original.dtype} elements, the plan is for "
                         f"{plan.n} {plan.dtype}")
    team, pos = plan.team_of(rank)
    base = team * plan.m
    live = original.detach().clone().reshape(-1)
    vsize = live.element_size()
    trace: list[HopRecord] = []
    sent = 0
    for hop in algo.srs_schedule(pos, plan.m):
        step = hop.step
        tag = TAG_SRS * 32 + step
        sends: tuple[Send, ...] = ()
        if hop.send_to is not None:
            specs = [sw.SegmentSpec(b, plan.block_len(b), plan.ks[b]) for b in hop.send_blocks]
            segs = []
            for b in hop.send_blocks:
                blk = _block(live, plan, b)
                sel = algo.topk_indices(blk, plan.ks[b])
                segs.append(sw.Segment(b, sel, blk[sel].clone()))
                blk[sel] = 0
            msg = sw.encode(specs, segs, plan.dtype)
            sent += msg.numel()
            trace.append(HopRecord(hop.phase, step, "send", base + hop.send_to,
                                   tuple((s.tag, s.indices.numel()) for s in segs)))
            sends = (Send(base + hop.send_to, msg, tag),)
        recv_specs = [sw.SegmentSpec(b, plan.block_len(b), plan.ks[b]) for b in hop.recv_blocks]
        recvs = ((Recv(base + hop.recv_from, sw.message_bytes(recv_specs, vsize), tag),)
                 if hop.recv_from is not None else ())
        got = yield Round(sends, recvs)
        for buf in got:
            segs = sw.decode(buf, recv_specs, plan.dtype)
            trace.append(HopRecord(hop.phase, step, "recv", base + hop.recv_from,
                                   tuple((s.tag, s.indices.numel()) for s in segs)))
            for s in segs:
                _block(live, plan, s.tag).index_add_(0, s.indices, s.values)
    own = _block(live, plan, pos)
    budget = plan.ks[pos] if plan.teams == 1 else min(h, plan.ks[pos])
    sel = algo.topk_indices(own, budget)
    piece = (sel, own[sel].clone())
    own[sel] = 0
    return RSState(plan, rank, original, live, piece, budget, trace, sent, own_input)


def _bruck(participants: list[int], me: int, items: list[tuple[torch.Tensor, torch.Tensor]], spec_of,
           dtype: torch.dtype, phase: int, name: str, trace: list[HopRecord]) -> Program[tuple[list, int]]:
    """Bruck all-gather of sparse items among ``participants`` (ranks); ``me`` is this rank's index there and
    ``items == [own item]``. ``spec_of(origin)`` is the segment spec of origin's item. Returns the items by
    origin index and the bytes sent."""
    n = len(participants)
    vsize = torch.empty(0, dtype=dtype).element_size()
    sent = 0
    for step, st in enumerate(algo.bruck_schedule(me, n)):
        tag = phase * 32 + step
        out_specs = [spec_of((me + i) % n) for i in range(st.count)]
        in_specs = [spec_of((me + st.gap + i) % n) for i in range(st.count)]
        segs = [sw.Segment(spec.tag, idx, vals) for spec, (idx, vals) in zip(out_specs, items[:st.count])]
        msg = sw.encode(out_specs, segs, dtype)
        sent += msg.numel()
        trace.append(HopRecord(name, step, "send", participants[st.send_to],
                               tuple((s.tag, s.indices.numel()) for s in segs)))
        (buf,) = yield Round((Send(participants[st.send_to], msg, tag),),
                             (Recv(participants[st.recv_from], sw.message_bytes(in_specs, vsize), tag),))
        got = sw.decode(buf, in_specs, dtype)
        trace.append(HopRecord(name, step, "recv", participants[st.recv_from],
                               tuple((s.tag, s.indices.numel()) for s in got)))
        items.extend((s.indices, s.values) for s in got)
    by_origin = [items[(o - me) % n] for o in range(n)]
    return by_origin, sent


def spar_all_gather(rs: RSState) -> Program[SparDLOutput]:
    """Phase 2 and global residual collection on ``rs.rank``."""
    plan, rank = rs.plan, rs.rank
    team, pos = plan.team_of(rank)
    trace = list(rs.trace)
    sent = rs.bytes_sent
    blen, k = plan.block_len(pos), plan.ks[pos]
    if plan.teams > 1:
        holders = [t * plan.m + pos for t in range(plan.teams)]
        pieces, s = yield from _bruck(holders, team, [rs.piece],
                                      lambda origin: sw.SegmentSpec(origin, blen, rs.h),
                                      plan.dtype, TAG_TEAMS, "teams", trace)
        sent += s
        union_idx, union_vals = algo.merge_pieces(pieces, blen, plan.dtype)
        union = union_idx.numel()
        final = algo.cut_to_budget(union_idx, union_vals, k)
    else:
        final = rs.piece
        union = final[0].numel()
    members = [team * plan.m + j for j in range(plan.m)]
    blocks, s = yield from _bruck(members, pos, [final],
                                  lambda b: sw.SegmentSpec(b, plan.block_len(b), plan.ks[b]),
                                  plan.dtype, TAG_AG, "gather", trace)
    sent += s
    result = torch.zeros(plan.n, dtype=plan.dtype)
    selected = torch.cat([idx + plan.bounds[b] for b, (idx, _) in enumerate(blocks)]) if blocks else \
        torch.empty(0, dtype=torch.int64)
    for b, (idx, vals) in enumerate(blocks):
        _block(result, plan, b)[idx] = vals
    residual = algo.collect_residual(rs.original.reshape(-1), rs.live, selected, in_place=rs.own_input)
    return SparDLOutput(result, residual, selected, union, trace, sent)


def spardl(plan: Plan, rank: int, original: torch.Tensor, h: int, *,
           own_input: bool = False) -> Program[SparDLOutput]:
    """The whole sparse all-reduce on ``rank`` (both phases)."""
    rs = yield from spar_reduce_scatter(plan, rank, original, h, own_input=own_input)
    out = yield from spar_all_gather(rs)
    return out

"""DDP communication hook that sends each gradient bucket over dlcp with its layer position and loss bound.

Same contract as the hooks in ``torch.distributed.algorithms.ddp_comm_hooks``: ``hook(state, bucket)`` returns a
``Future`` of the averaged bucket tensor. Register with::

    state = DlcpHookState.for_model(model, loss_bound=0.01)
    ddp_model.register_comm_hook(state, dlcp_allreduce_hook)
    ...; loss.backward(); opt.step()
    state.stats.take()   # {calls, lossy_calls, elements, zero_filled, fraction} of this step's buckets

Bounded loss keeps the replicas identical: only the reduce-scatter part of each bucket's all-reduce may lose
packets, and every rank applies the same averaged bucket (``docs/bounded-loss.md``). ``loss_bound=None`` takes the
process group's ``DLCP_LOSS_BOUND``.

Priority: DDP fills bucket 0 with the *last* layers (gradients become ready output-first), so the bucket index is
the wrong way round for DLCP, which gives layers near the input the higher priority. The state maps every
parameter to the position (0 = nearest the input, in registration order) of the module that owns it; a bucket's
layer position is the smallest position among its parameters.
"""

# no `from __future__ import annotations`: DDP checks the hook's annotations are the real classes

from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from host.backend import loss_bound_scope
from host.collectives import LossStats

__all__ = ["DlcpHookState", "dlcp_allreduce_hook", "layer_positions"]


def layer_positions(model: torch.nn.Module) -> dict[int, int]:
    """``id(parameter) -> position`` of the module that registers it, counting modules with own parameters."""
    pos: dict[int, int] = {}
    i = 0
    for module in model.modules():
        own = list(module.parameters(recurse=False))
        if not own:
            continue
        for p in own:
            pos.setdefault(id(p), i)
        i += 1
    return pos


@dataclass
class DlcpHookState:
    process_group: "dist.ProcessGroup | None" = None
    loss_bound: "float | None" = 0.0  # None: the process group's DLCP_LOSS_BOUND
    positions: dict[int, int] = field(default_factory=dict)
    stats: LossStats = field(default_factory=LossStats)  # every bucket's outcome

    @classmethod
    def for_model(cls, model: torch.nn.Module, *, loss_bound: "float | None" = 0.0,
                  process_group: "dist.ProcessGroup | None" = None) -> "DlcpHookState":
        inner = getattr(model, "module", model)  # a DDP wrapper or the plain model
        return cls(process_group, loss_bound, layer_positions(inner))

    def layer_of(self, bucket: dist.GradBucket) -> int:
        found = [self.positions[id(p)] for p in bucket.parameters() if id(p) in self.positions]
        return min(found) if found else 0


def dlcp_allreduce_hook(state: DlcpHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Average the bucket across the group over dlcp, tagged with its layer position and the loss bound."""
    with loss_bound_scope(state.loss_bound, state.layer_of(bucket), stats=state.stats):
        work = dist.all_reduce(bucket.buffer(), op=dist.ReduceOp.AVG, group=state.process_group, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])

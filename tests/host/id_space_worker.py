"""Scenarios of tests/host/test_id_spaces.py in real processes (dlcp backend, env:// rendezvous)."""

from __future__ import annotations

import hashlib
import sys

import torch
import torch.distributed as dist

from host.procexit import exit_process


def groups(n: int) -> None:
    """``n`` subgroups of all ranks (70: past the old 63 group tags), each used by an all-reduce and a send/recv; then
    every group used again (a wrapped tag would have met the first group's transfers). Prints the digest of the
    tag key agreed at rendezvous (every rank must print the same; "none" for an unkeyed job)."""
    dist.init_process_group("dlcp")
    import host.backend as hb

    r, p = dist.get_rank(), dist.get_world_size()
    subs = [dist.new_group(list(range(p)), backend="dlcp") for _ in range(n)]
    for rnd in range(2):
        for i, g in enumerate(subs):
            t = torch.full((5,), float(r + i + rnd))
            dist.all_reduce(t, group=g)
            assert torch.equal(t, torch.full((5,), float(sum(range(p)) + p * (i + rnd)))), (i, t)
            y = torch.empty(3)
            if r == 0:
                dist.send(torch.full((3,), float(i)), 1, group=g)
            elif r == 1:
                dist.recv(y, 0, group=g)
                assert torch.equal(y, torch.full((3,), float(i))), (i, y)
    key = hb._Process.endpoint._key
    print("key", hashlib.sha256(key).hexdigest() if key else "none")
    dist.barrier()
    dist.destroy_process_group()
    print("ok", r)


if __name__ == "__main__":
    torch.set_num_threads(1)
    {"groups": lambda: groups(int(sys.argv[2]))}[sys.argv[1]]()
    exit_process()  # not interpreter finalization: see host/procexit.py

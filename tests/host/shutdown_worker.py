"""One rank of the shutdown-under-loss job (tests/host/test_clean_end.py): a few exact all-reduces, a barrier,
destroy_process_group, exit, with ``SHUTDOWN_LOSS`` of every datagram this rank sends dropped (faults.LossySocket on
the endpoint's send path, data and control alike). Prints one JSON line: the transport's dead peers as seen before
the group was destroyed, the datagrams dropped, or the fatal error."""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist

import host.backend as hb  # registers "dlcp"
from host.procexit import exit_process
from host.transport.faults import LossySocket


def tiny() -> dict:
    rank = int(os.environ["RANK"])
    loss = float(os.environ.get("SHUTDOWN_LOSS", "0.1"))
    seed = int(os.environ.get("SHUTDOWN_SEED", "0")) + rank
    sockets: list[LossySocket] = []

    def wrap(sock):
        s = LossySocket(sock, loss=loss, loss_control=loss, seed=seed)
        sockets.append(s)
        return s
    hb._dropper = lambda o: wrap  # (the backend's hook for a socket wrapper: every endpoint of this process)
    dist.init_process_group("dlcp")
    size = dist.get_world_size()
    t = torch.ones(1000)
    for _ in range(5):
        dist.all_reduce(t)
    assert torch.equal(t, torch.full((1000,), float(size ** 5))), t[:4]
    dead = hb.transport_stats().get("dead_peers", {})
    dist.barrier()
    dist.destroy_process_group()
    return {"rank": rank, "dead": {str(k): v for k, v in dead.items()}, "dropped": sum(s.dropped for s in sockets)}


if __name__ == "__main__":
    torch.set_num_threads(1)
    try:
        out = {"tiny": tiny}[sys.argv[1]]()
    except BaseException as e:  # noqa: BLE001 - reported, and the exit status says it failed
        out = {"rank": int(os.environ.get("RANK", -1)), "fatal": f"{type(e).__name__}: {e}"[:2000], "dropped": 0}
        print(json.dumps(out), flush=True)
        exit_process(1)
    print(json.dumps(out), flush=True)
    exit_process(0)

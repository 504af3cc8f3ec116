"""One rank of ``test_failure_propagation.py``'s backend scenario (``python -m tests.host.propagation_backend_worker``
under ``dist_run.launch``): the last rank dies after rendezvous; every other rank's all-reduce must fail naming it,
well before the 60 s operation timeout."""

from __future__ import annotations

import os
import sys
import time

import torch
import torch.distributed as dist

from host.procexit import exit_process


def main() -> None:
    os.environ["DLCP_TIMEOUT"] = "60"
    os.environ["DLCP_PEER_TIMEOUT"] = "2"
    dist.init_process_group("dlcp")
    r, n = dist.get_rank(), dist.get_world_size()
    dist.barrier()
    if r == n - 1:
        os._exit(0)
    t0 = time.monotonic()
    w = dist.all_reduce(torch.ones(200_000), async_op=True)
    try:
        w.wait()
    except Exception as e:  # noqa: BLE001 - the point of the scenario
        print(f"error after {time.monotonic() - t0:.1f}s: {type(e).__name__}: {e}", flush=True)
        os._exit(0)
    print("no error", file=sys.stderr, flush=True)
    os._exit(1)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
    exit_process()  # not interpreter finalization: see host/procexit.py

"""SparDL sparse all-reduce (Zhao et al., ICDE 2024) over any torch.distributed backend and the DLCP transport.

* :mod:`host.spardl.algo` - pure parts: block partition, exact top-k, Spar-Reduce-Scatter and Bruck schedules
  (with the extra steps for non-power-of-two teams), merging, global residual collection, adaptive h.
* :mod:`host.spardl.program` - SparDL per rank as a generator of communication rounds (both phases).
* :mod:`host.spardl.exchange` - drivers: in-memory simulation of P ranks, a process group's isend/irecv, a
  DLCP transport Link.
* :mod:`host.spardl.api` - ``sparse_allreduce``, the DDP comm hook, the DeAR compressor.
* :mod:`host.spardl.baselines` - gTop-k tree and top-k all-gather on the same drivers.
* :mod:`host.spardl.select` - exact top-k by magnitude from threshold candidates (one dense pass, fused with
  error feedback), shared by SparDL and the baselines.
* :mod:`host.spardl.sparse_ops` - gather/put/fill/add at a few thousand positions of a dense buffer.
* :mod:`host.spardl.clock` - optional per-phase wall/CPU timing (profiling).
* :mod:`host.spardl.device` - CUDA tensors: everything stays on the device but each message's selected entries,
  which cross to the host wire through ``host.staging``; stream order of the background jobs.

Wire format of the sparse payloads: :mod:`host.sparse_wire`. Design and numbers: ``docs/spardl.md``.
"""

from host.spardl.api import (SparDLCompressor, SparDLHookState, SparDLRSResult, SparDLState,
                             SparseAllreduceResult, sparse_allreduce, spardl_hook)
from host.spardl.exchange import ExchangeError, LinkExchange, run_on_group, run_simulated
from host.spardl.program import Plan, SparDLOutput, spar_all_gather, spar_reduce_scatter, spardl

__all__ = ["sparse_allreduce", "SparDLState", "SparseAllreduceResult", "SparDLHookState", "spardl_hook",
           "SparDLCompressor", "SparDLRSResult", "Plan", "SparDLOutput", "spardl", "spar_reduce_scatter",
           "spar_all_gather", "run_simulated", "run_on_group", "LinkExchange", "ExchangeError"]

"""A²CiD²: asynchronous decentralized training with a continuous momentum, over the DLCP transport.

Modules: ``constants`` (graphs, Laplacian, eta and alpha~), ``mixing`` (the continuous momentum's updates),
``problem`` (the synthetic non-iid task and flat-parameter model), ``config`` (``RunConfig``), ``pairing`` (the
pairing service and its client), ``monitor`` (consensus distance over time), ``worker`` (one rank), ``launch``
(a whole local run), ``simulate`` (the algorithm on an ideal machine, event-driven) and ``analysis`` (the
paper's model solved exactly for small graphs). CLI: ``python -m host.acid --help``. See ``docs/acid.md``.
"""

from host.acid.config import ALGOS, RunConfig
from host.acid.constants import TOPOLOGIES, AcidConstants, acid_constants, neighbors
from host.acid.problem import ProblemSpec

__all__ = ["ALGOS", "TOPOLOGIES", "RunConfig", "ProblemSpec", "AcidConstants", "acid_constants", "neighbors"]

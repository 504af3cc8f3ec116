"""A²CiD²: asynchronous decentralized training with a continuous momentum, over the DLCP transport.

Modules: ``library`` (:class:`~host.acid.library.Acid`: wrap a model and optimizer on a process group),
``constants`` (graphs, Laplacian, eta and alpha~), ``mixing`` (the continuous momentum's updates), ``state`` (x,
x~ and their clock), ``problem`` (the synthetic non-iid task), ``train`` (one rank of the command line, a user of
the library), ``launch`` and ``config`` (a whole local run from Python), ``monitor`` (consensus distance),
``simulate`` (the algorithm on an ideal machine, event-driven) and ``analysis`` (the paper's model solved exactly
for small graphs). CLI: ``python -m host.acid --help``. See ``docs/acid.md``.
"""

from host.acid.config import ALGOS, RunConfig
from host.acid.constants import TOPOLOGIES, AcidConstants, acid_constants, neighbors
from host.acid.problem import ProblemSpec

__all__ = ["ALGOS", "TOPOLOGIES", "RunConfig", "ProblemSpec", "AcidConstants", "acid_constants", "neighbors"]

"""PyTorch's own distributed test suite (``DistributedTest._DistTestBase``) against the backend named by ``BACKEND``,
set up the way PyTorch's ``test/distributed/test_distributed_spawn.py`` runs it (each test spawns ``WORLD_SIZE``
processes that rendezvous through a file). ``dlcp`` is declared as a plugin backend with DDP and subgroup support,
so the suite runs every test it would run on such a backend.

Not collected by the normal test run (the name does not start with ``test_``): ``tests/host/test_torch_suite.py``
runs it in a subprocess for ``gloo`` and ``dlcp`` and compares the outcomes (``make test-torch-suite``).
Environment: ``BACKEND`` (gloo or dlcp), ``WORLD_SIZE`` (PyTorch's CI uses 3 for gloo on CPU), ``TEMP_DIR``.
"""

from __future__ import annotations

import os

import torch
from torch.testing._internal.common_distributed import DistTestCases

BACKEND = os.environ["BACKEND"]
if BACKEND == "dlcp":  # before distributed_test is imported: its decorators read these sets
    import host.backend  # noqa: F401 - registers the backend (torch's plugin loading may already have)

    for feature in ("plugin", "ddp", "subgroup"):
        DistTestCases.backend_feature[feature].add("dlcp")

from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend  # noqa: E402

torch.backends.cuda.matmul.allow_tf32 = False

if BACKEND in ("gloo", "dlcp"):
    class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
        """The suite, each test in freshly spawned processes (as in PyTorch's test_distributed_spawn.py)."""

        def setUp(self) -> None:
            super().setUp()
            self._spawn_processes()
            torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()
else:
    raise SystemExit(f"distributed_suite: BACKEND={BACKEND!r}, expected gloo or dlcp")


if __name__ == "__main__":
    run_tests()

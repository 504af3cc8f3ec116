"""The dlcp backend on CUDA tensors (``make test-cuda``, marker ``cuda``): every collective, point-to-point and
futures against host computations and gloo's CUDA path, DDP on GPUs against gloo, DeAR on GPUs against DDP, and
SparDL (sparse_allreduce, the DDP comm hook, the DeAR compressor) on GPUs against the same on the host. Not
collected by ``make test`` (the file name is not ``test_*``): it needs a GPU, and on a machine without one every
test here fails with that reason."""

from __future__ import annotations

import pytest
import torch

from .dist_run import check, launch

MOD = "tests.host.cuda_worker"

pytestmark = pytest.mark.cuda


@pytest.fixture(autouse=True)
def _cuda_device() -> None:
    """Every test here needs a GPU: without one it fails with that reason (a skipped run would read as a pass)."""
    if not torch.cuda.is_available():
        pytest.fail("make test-cuda needs a CUDA device: torch.cuda.is_available() is false on this machine")


@pytest.fixture(scope="module", autouse=True)
def _built_extension() -> None:
    from host.backend_ext import load

    load()


def _run_ok(scenario: str, size: int) -> None:
    """Run a cuda_worker scenario on ``size`` ranks; every rank must exit 0 and end with "ok RANK"."""
    out = check(launch(MOD, scenario, size, timeout=300))
    assert all(o.strip().endswith(f"ok {r}") for r, o in enumerate(out)), out


@pytest.mark.parametrize("size", [2, 3])
def test_collectives_on_cuda_tensors(size: int) -> None:
    _run_ok("collectives", size)


def test_ddp_on_cuda_matches_gloo() -> None:
    _run_ok("ddp", 2)


def test_dear_on_cuda_matches_ddp() -> None:
    _run_ok("dear", 2)


@pytest.mark.parametrize("size", [2, 3])
def test_spardl_on_cuda_tensors_matches_host(size: int) -> None:
    _run_ok("spardl", size)


def test_spardl_hook_on_cuda_ddp_matches_host() -> None:
    _run_ok("spardl_ddp", 2)


def test_spardl_compressor_on_cuda_dear_matches_host() -> None:
    _run_ok("spardl_dear", 2)

"""The dlcp backend as torch's newer APIs use it (real processes, real transport on loopback, against gloo):
registration through ``register_backend`` with a real ``c10d::Backend``, functional collectives, DeviceMesh,
DTensor, FSDP2, point-to-point without deadlocks, coalescing, monitored barrier, abort, destroying subgroups."""

from __future__ import annotations

import pytest

from .dist_run import check, launch

MOD = "tests.host.torch_api_worker"


@pytest.fixture(scope="module", autouse=True)
def _built_extension() -> None:
    """Build the C++ backend once here, so the ranks launched below load it instead of racing to build it."""
    from host.backend_ext import load

    load()


def _ok(out: list[str]) -> None:
    assert all(f"ok {r}" in o for r, o in enumerate(out)), out


@pytest.mark.slow
def test_group_name_and_functional_collectives_match_gloo() -> None:
    _ok(check(launch(MOD, "functional", 2, timeout=180)))


@pytest.mark.slow
@pytest.mark.parametrize("size", [2, 4])
def test_device_mesh_and_dtensor_match_gloo(size: int) -> None:
    _ok(check(launch(MOD, "dtensor", size, timeout=240)))


@pytest.mark.slow
def test_fsdp2_trains_a_transformer_identically_to_gloo() -> None:
    out = check(launch(MOD, "fsdp2", 2, timeout=240))
    _ok(out)


@pytest.mark.slow
def test_p2p_any_source_batches_and_coalescing() -> None:
    _ok(check(launch(MOD, "p2p", 3, timeout=180)))


@pytest.mark.slow
def test_p2p_and_coalescing_with_staged_tensors() -> None:
    """The same with every tensor staged through host stand-ins as CUDA tensors are (host.staging): receives from
    any source, batches and coalescing blocks copy their results out before their works complete."""
    out = check(launch(MOD, "p2p", 3, timeout=180, env={"DLCP_TEST_STAGE_HOST": "1"}))
    _ok(out)
    assert all(f"staged {r}" in o for r, o in enumerate(out)), out


@pytest.mark.slow
def test_subgroups_monitored_barrier_and_abort() -> None:
    out = check(launch(MOD, "lifecycle", 3, timeout=180))
    _ok(out)
    for r in range(3):
        assert f"barrier error {r} Rank 2 failed to pass monitoredBarrier in 1000 ms" in out[r], out[r]
    assert "aborted 0" in out[0], out[0]


def test_registered_through_the_supported_api() -> None:
    """register_backend with devices: dlcp serves CPU and CUDA tensors under its own name, as a CUSTOM backend type."""
    import torch.distributed as dist

    import host.backend  # noqa: F401 - registers (torch's plugin loading may have done it already)

    assert "dlcp" in dist.Backend.backend_list
    assert dist.Backend.backend_capability["dlcp"] == ["cpu", "cuda"]
    assert dist.Backend.backend_type_map["dlcp"] == dist.ProcessGroup.BackendType.CUSTOM
    assert "DLCP" in dist.Backend._plugins

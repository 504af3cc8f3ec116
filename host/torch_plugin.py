"""Registers the ``"dlcp"`` backend with torch.distributed.

Called by ``import torch`` itself, through the ``torch.backends`` entry point of the dlcp distribution (torch loads
those plugins at the end of its import), so ``dist.init_process_group("dlcp")`` works with no dlcp import in the
user's script. Deliberately light: the backend module (transport, threads) is imported only when a group is
created. ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` disables torch's plugin loading; then ``import host.backend``.
"""

from __future__ import annotations


def _create(store, rank, size, timeout):
    from host.backend import create_dlcp_process_group
    return create_dlcp_process_group(store, rank, size, timeout)


def register() -> None:
    """Idempotent: register ``dlcp`` for CPU and CUDA tensors unless it is registered already (CUDA tensors are
    staged through host memory: ``host.staging``; on a build without CUDA none ever reaches it)."""
    import torch.distributed as dist

    if not dist.is_available():  # pragma: no cover - CPU builds have distributed
        return
    if "dlcp" in dist.Backend.backend_list or hasattr(dist.Backend, "DLCP"):
        return
    dist.Backend.register_backend("dlcp", _create, devices=["cpu", "cuda"])

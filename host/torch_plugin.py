"""Registers the ``"dlcp"`` backend with torch.distributed.

Called by ``import torch`` itself, through the ``torch.backends`` entry point of the dlcp distribution (torch loads
those plugins at the end of its import), so ``dist.init_process_group("dlcp")`` works with no dlcp import in the
user's script. Deliberately light: the backend module (transport, threads) is imported only when a group is
created. ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` disables torch's plugin loading; then ``import host.backend``.
"""

from __future__ import annotations

from host.backend_registry import register_dlcp


def _create(store, rank, size, timeout):
    from host.backend import create_dlcp_process_group
    return create_dlcp_process_group(store, rank, size, timeout)


def register() -> None:
    """Idempotent: register ``dlcp`` (for the devices in :data:`host.backend_registry.DEVICES`) unless it is
    registered already."""
    register_dlcp(_create)

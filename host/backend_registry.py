"""The one place that registers the name ``"dlcp"`` with torch.distributed.

Two callers, so that neither imports the other: :func:`host.torch_plugin.register` (run by ``import torch``
through the dlcp distribution's ``torch.backends`` entry point; it must stay light, so it registers a creator
that imports the backend only when a group is made) and ``import host.backend`` (for
``TORCH_DEVICE_BACKEND_AUTOLOAD=0``, where torch loads no plugins; it registers its creator directly).
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["DEVICES", "register_dlcp"]

#: Tensor devices the backend takes: CUDA tensors are staged through host memory (``host.staging``); on a build
#: without CUDA none ever reaches it.
DEVICES = ("cpu", "cuda")


def register_dlcp(creator: Callable[..., Any]) -> None:
    """Idempotent: register ``dlcp`` with ``creator(store, rank, size, timeout)`` unless it is registered already."""
    import torch.distributed as dist

    if not dist.is_available():  # pragma: no cover - CPU builds have distributed
        return
    if "dlcp" in dist.Backend.backend_list or hasattr(dist.Backend, "DLCP"):
        return
    dist.Backend.register_backend("dlcp", creator, devices=list(DEVICES))

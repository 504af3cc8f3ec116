"""Builds and loads ``host/dlcp_c10d.cpp``: the ``c10d::Backend`` PyTorch wraps in a ProcessGroup for ``dlcp``.

Why a C++ part: torch dispatches collectives (its dispatcher ops, hence functional collectives, DTensor, FSDP2) to
the ``c10d::Backend`` registered on a ProcessGroup, and that class cannot be subclassed from Python. The extension
is a thin trampoline that calls the Python :class:`host.backend.DlcpBackend` for every operation.

It is compiled against the installed torch on first use with ``torch.utils.cpp_extension.load`` (g++ and ninja,
about a minute) and cached in torch's extension directory (``TORCH_EXTENSIONS_DIR``, by default
``~/.cache/torch_extensions``); a changed source or torch rebuilds it. Concurrent first uses (all ranks of a job
starting at once) wait on torch's build lock, so one process builds and the others load its result.
"""

from __future__ import annotations

import functools
from pathlib import Path
from types import ModuleType

SOURCE = Path(__file__).with_name("dlcp_c10d.cpp")


@functools.cache
def load() -> ModuleType:
    """The compiled extension module (``DlcpBackend``, ``DlcpWork``), built if needed."""
    import torch  # noqa: F401 - the extension links against the loaded torch
    from torch.utils.cpp_extension import load as _load

    try:
        return _load(name="dlcp_c10d", sources=[str(SOURCE)], extra_cflags=["-O2"], verbose=False)
    except Exception as e:  # noqa: BLE001 - re-raised with what is needed to fix it
        raise RuntimeError(f"building the dlcp c10d extension from {SOURCE} failed (needs g++ and ninja, "
                           f"`make setup` installs them): {e}") from e


if __name__ == "__main__":  # `python -m host.backend_ext`: build ahead (make setup, CI)
    print(load().__file__)

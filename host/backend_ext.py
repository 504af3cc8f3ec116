"""Builds and loads ``host/dlcp_c10d.cpp``: the ``c10d::Backend`` PyTorch wraps in a ProcessGroup for ``dlcp``.

Why a C++ part: torch dispatches collectives (its dispatcher ops, hence functional collectives, DTensor, FSDP2) to
the ``c10d::Backend`` registered on a ProcessGroup, and that class cannot be subclassed from Python. The extension
is a thin trampoline that calls the Python :class:`host.backend.DlcpBackend` for every operation.

It is compiled against the installed torch on first use with ``torch.utils.cpp_extension`` (g++ and ninja, about
half a minute; ``make setup`` builds it ahead) and cached as one file per (source, torch, Python) in
``$TORCH_EXTENSIONS_DIR/dlcp`` (default ``~/.cache/torch_extensions/dlcp``), so checkouts with the same source
share it and a changed source gets its own. Concurrent first uses (all ranks of a job starting at once) take an
``flock`` on the entry: one process builds, in a private directory, and moves the result into place; the others
wait and load it. The kernel drops the lock of a process that dies, so a killed build never blocks the next.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.util
import os
import sys
import sysconfig
import tempfile
from pathlib import Path
from types import ModuleType

SOURCE = Path(__file__).with_name("dlcp_c10d.cpp")
CFLAGS = ["-O2"]


def cache_dir() -> Path:
    base = os.environ.get("TORCH_EXTENSIONS_DIR") or os.path.join(os.path.expanduser("~"), ".cache",
                                                                   "torch_extensions")
    return Path(base) / "dlcp"


def _import(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.modules[name] = mod
    return mod


@functools.cache
def load() -> ModuleType:
    """The compiled extension module (``DlcpBackend``, ``DlcpWork``), built if needed."""
    import torch

    key = hashlib.sha256(SOURCE.read_bytes() + f"{torch.__version__}|{sys.version}|{CFLAGS}".encode()).hexdigest()
    name = f"dlcp_c10d_{key[:16]}"  # also the module's name inside the file (TORCH_EXTENSION_NAME)
    cache = cache_dir()
    built = cache / f"{name}{sysconfig.get_config_var('EXT_SUFFIX') or '.so'}"
    if built.exists():
        return _import(name, built)
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if built.exists():  # another process built it while this one waited
            return _import(name, built)
        with tempfile.TemporaryDirectory(dir=cache, prefix=f"{name}.build-") as tmp:
            # (imported only to build: it pulls in setuptools, a tenth of a second of every rank's start)
            from torch.utils.cpp_extension import load as _build

            try:
                mod = _build(name=name, sources=[str(SOURCE)], extra_cflags=CFLAGS, build_directory=tmp,
                             verbose=False)
            except Exception as e:  # noqa: BLE001 - re-raised with what is needed to fix it
                raise RuntimeError(f"building the dlcp c10d extension from {SOURCE} failed (needs g++ and ninja, "
                                   f"`make setup` installs them): {e}") from e
            os.replace(Path(mod.__file__), built)  # atomic: others see no file or the whole file
        mod.__file__ = str(built)
        return mod


if __name__ == "__main__":  # `python -m host.backend_ext`: build ahead (make setup, CI)
    print(load().__file__)

"""dlcp testbed: Mininet topologies whose switches run the DLCP P4 program.

This directory is installed as the package ``testbed`` (see ``package-dir`` in pyproject.toml); its name on
disk is ``mininet/`` because that is where the project layout puts the testbed.

Why the guard below: when the project root is on ``sys.path`` (``python`` or ``python -m pytest`` started from
the checkout), ``import mininet`` would find this directory before Debian's real Mininet in dist-packages and
shadow it. If we are imported under the name ``mininet`` we therefore step aside: locate the real Mininet on the
rest of ``sys.path``, load it, and leave it in ``sys.modules['mininet']``, which is what the import system returns
to the importer (it re-reads ``sys.modules`` after executing a module). ``import mininet.net`` then resolves
``net`` inside the real package.
"""

if __name__ == "mininet":
    import importlib.machinery as _machinery
    import importlib.util as _util
    import os as _os
    import sys as _sys

    _project_root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
    _search = [p for p in _sys.path if _os.path.abspath(p or _os.curdir) != _project_root]
    _spec = _machinery.PathFinder.find_spec("mininet", _search)
    if _spec is None or _spec.loader is None:
        del _sys.modules["mininet"]
        raise ImportError(
            "Mininet is not installed (Debian: apt-get install mininet, or run `make setup` as root); "
            f"{_os.path.dirname(_os.path.abspath(__file__))} is dlcp's testbed, import it as `testbed`"
        )
    _real = _util.module_from_spec(_spec)
    _sys.modules["mininet"] = _real
    _spec.loader.exec_module(_real)

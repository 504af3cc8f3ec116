"""Network files, the YAML layer: text -> plain Python values plus the line of every key, and the file's error.

One of the four modules of network-file loading (:mod:`controller.netfile` is the entry point and re-exports the
rest): this one reads YAML, :mod:`controller.netfile_model` holds the validated data model,
:mod:`controller.netfile_values` the value parsers (rates, delays, MACs, ``SWITCH:PORT``), and
:mod:`controller.netfile` validates each section into the model.

The YAML is read with a loader that (a) keeps every node's line (PyYAML compose nodes carry ``start_mark``),
(b) rejects duplicate keys, which PyYAML would otherwise silently merge, and (c) does not turn
``10:00:00:00:00:01`` or ``1:30`` into base-60 integers (a YAML 1.1 quirk that would corrupt unquoted MAC
addresses and ``switch:port`` references).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

__all__ = ["NetFileError", "LocatedDoc", "MapKey", "map_key", "compose"]


class NetFileError(ValueError):
    """An invalid network file. ``key`` is the dotted path of the offending key, ``line`` its 1-based line."""

    def __init__(self, path: str | Path | None, key: str, line: int | None, message: str):
        self.path = str(path) if path is not None else "<string>"
        self.key = key
        self.line = line
        self.message = message
        where = f"{self.path}:{line}" if line else self.path
        super().__init__(f"{where}: {key or '(top level)'}: {message}")


class _Loader(yaml.SafeLoader):
    """SafeLoader without YAML 1.1 base-60 numbers (``10:00:00:00:00:01`` stays a string)."""


_Loader.yaml_implicit_resolvers = {first: list(resolvers)
                                   for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
for _resolvers in _Loader.yaml_implicit_resolvers.values():
    _resolvers[:] = [(tag, rx) for tag, rx in _resolvers
                     if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")]
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:int",
    re.compile(r"""^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$""", re.X),
    list("-+0123456789"))
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?|[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                |\.[0-9_]+(?:[eE][-+][0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."))


class LocatedDoc:
    """The line of every key path of a YAML document (``()`` is the document itself), and errors located by it."""

    def __init__(self, path: str | Path | None):
        self.path = path
        self.lines: dict[tuple, int] = {}

    def error(self, key: tuple, message: str) -> NetFileError:
        """A :class:`NetFileError` at ``key``, on the line of its nearest enclosing node that has one."""
        line = None
        enclosing = key
        while enclosing and line is None:
            line = self.lines.get(enclosing)
            enclosing = enclosing[:-1]
        if line is None:
            line = self.lines.get(())
        return NetFileError(self.path, dotted(key), line, message)


class MapKey(int):
    """An integer *mapping key* in a key path (``priorities.dscp.46``), as opposed to a list index (``[3]``)."""


def map_key(key: Any) -> Any:
    """``key`` as it goes into a key path: an integer mapping key marked as one (:class:`MapKey`)."""
    return MapKey(key) if isinstance(key, int) and not isinstance(key, bool) else key


def dotted(key: tuple) -> str:
    """A key path as the user reads it: ``hosts.h1.mac``, ``links[0].between[1]``, ``priorities.dscp.46``."""
    out = ""
    for part in key:
        is_index = isinstance(part, int) and not isinstance(part, MapKey)
        out += f"[{part}]" if is_index else (f".{part}" if out else str(part))
    return out


def _to_python(node: yaml.Node, loader: _Loader, doc: LocatedDoc, key: tuple) -> Any:
    doc.lines[key] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key_line = key_node.start_mark.line + 1
            if not isinstance(key_node, yaml.ScalarNode):
                raise NetFileError(doc.path, dotted(key), key_line, "keys must be plain scalars")
            name = loader.construct_object(key_node, deep=True)
            if isinstance(name, (list, dict)) or name is None:
                raise NetFileError(doc.path, dotted(key), key_line, f"invalid key {key_node.value!r}")
            if name in out:
                first = doc.lines.get(key + (name,))
                raise NetFileError(doc.path, dotted(key + (name,)), key_line,
                                   f"duplicate key (first defined on line {first})")
            out[name] = _to_python(value_node, loader, doc, key + (name,))
            doc.lines[key + (name,)] = key_line
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_to_python(item, loader, doc, key + (i,)) for i, item in enumerate(node.value)]
    return loader.construct_object(node, deep=True)


def compose(text: str, path: str | Path | None) -> tuple[Any, LocatedDoc]:
    """The document's plain values and where each key is; :class:`NetFileError` for empty or invalid YAML."""
    doc = LocatedDoc(path)
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise NetFileError(path, "", 1, "the file is empty")
        return _to_python(node, loader, doc, ()), doc
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        raise NetFileError(path, "", mark.line + 1 if mark else None,
                           f"not valid YAML: {e.problem or e.context}") from None
    finally:
        loader.dispose()

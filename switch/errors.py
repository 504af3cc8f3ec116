"""One exception type for every diagnostic of the P4 front end and the runtime API.

A P4 programmer must see ``file:line:col: message`` and never a Python traceback, so every
stage (preprocessor, lexer, parser, checker, code generator) raises :class:`P4Error` with the
source position of the offending construct.  Runtime (control-plane) errors use
:class:`SwitchError`, which carries a gRPC-like status code so that the P4Runtime server of
part 2 can map it one to one.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Loc:
    """A source position: file name, 1-based line and 1-based column."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


NOLOC = Loc("<builtin>", 0, 0)


class P4Error(Exception):
    """A compile-time diagnostic, printed as ``file:line:col: message``."""

    def __init__(self, loc: Loc | None, message: str):
        self.loc = loc or NOLOC
        self.message = message
        super().__init__(f"{self.loc}: {message}")


def unsupported(construct: str, loc: Loc | None) -> P4Error:
    """The error for a valid P4-16 construct this target does not implement (see docs/p4-subset.md)."""
    loc = loc or NOLOC
    e = P4Error(loc, f"unsupported: {construct} at {loc}")
    return e


class SwitchError(Exception):
    """A runtime (control-plane) error; ``code`` is a gRPC status name such as ``NOT_FOUND``."""

    def __init__(self, code: str, message: str):
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}")

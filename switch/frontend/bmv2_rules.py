"""What p4c's BMv2 back end (``p4c-bm2-ss``) refuses although P4-16 allows it: the embedded target refuses it too.

The embedded target runs v1model programs with BMv2 simple_switch semantics so that the same source runs on BMv2;
a program BMv2's compiler refuses must not run here either (docs/p4-subset.md, "Refused as p4c refuses").  The
rules, each with the p4c source that makes it:

* A table entry's key (``entries`` and ``const entries``) must be what the BMv2 JSON can hold
  (``backends/bmv2/common/control.h``): an integer constant (or a bool for ``exact`` and ``ternary`` keys); an
  ``error`` constant is refused for every match kind ("unsupported exact key expression"), and so is a bool
  literal for an ``optional``, ``lpm`` or ``range`` key.  Both can be written by the control plane instead
  (an error key takes the error's number).
* ``hs.next`` may be only the argument of ``extract``: a field of it, read or written, is refused
  (``backends/bmv2/common/expression.cpp``: "next field read").
* A table may be applied at several places only in exclusive branches (of an ``if`` or a ``switch``) and
  followed by the same statement at each (``backends/bmv2/common/controlFlowGraph.cpp``: two applies one after
  the other are "a path from table t back to itself", checked first; applies in exclusive branches with
  different statements after are "table t has multiple successors"), which rules out one sub-control instance
  with a table applied at two places (its apply body, copies and all, is inlined at each).  Two applies are
  taken as having one successor when both are statements followed by the same statement (e.g. one in each
  branch of an ``if``); an apply in an ``if`` condition or a ``switch`` has the branches as successors, so never
  shares them.
* A ``for`` loop over a range, ``for (T x in lo .. hi)`` (P4-16 1.2.4), is refused
  (``backends/bmv2/common/check_unsupported.h``: "BMV2 does not support for-in loops", for every for-in loop,
  before any unrolling); the three-part form ``for (init; cond; update)`` is taken.  Refused rather than
  accepted behind an option: the target exists to run what BMv2 runs, and a program developed here must not
  meet the refusal only when it is moved to BMv2.
"""
from __future__ import annotations

from dataclasses import fields
from typing import Any

from ..errors import P4Error
from ..midend import ir
from . import p4ast as A


def check_entry_key(k: A.Expr, kt: ir.Type, match_kind: str) -> None:
    """A located error for a table entry's key element ``k`` (of key type ``kt``) that p4c-bm2-ss refuses."""
    if isinstance(k, (A.Default, A.Mask, A.Range)):
        return
    if isinstance(kt, ir.ErrorT):
        raise P4Error(k.loc, f"an error constant as a table entry key is refused by p4c's BMv2 back end "
                             f"('unsupported {match_kind} key expression'); write the entry from the control "
                             f"plane, with the error's number")
    if isinstance(k, A.BoolLit) and match_kind in ("optional", "lpm", "range"):
        raise P4Error(k.loc, f"a bool literal as the entry key of an {match_kind} field is refused by p4c's BMv2 "
                             f"back end ('unsupported {match_kind} key expression'); match the field as exact or "
                             f"ternary, or key on a bit<W> value")


def check_next_member(e: A.Member) -> None:
    """A located error for ``hs.next.f`` (a field of a stack's next element), which p4c-bm2-ss refuses."""
    inner = e.expr
    if isinstance(inner, A.Member) and inner.name == "next" and isinstance(inner.expr.type, ir.StackT):
        raise P4Error(e.loc, "a field of a header stack's 'next' element is refused by p4c's BMv2 back end "
                             "('next field read'): extract into hs.next, then use hs.last")


def check_for_in(s: A.For | None) -> None:
    """A located error for a ``for (T x in lo .. hi)`` loop (``s``, the program's first, or None), which
    p4c-bm2-ss refuses."""
    if s is not None:
        raise P4Error(s.loc, "a for-in loop (for (T x in lo .. hi)) is refused by p4c's BMv2 back end ('BMV2 does "
                             "not support for-in loops'); write for (T x = lo; x <= hi; x = x + 1), with hi below "
                             "the largest value of T")


def check_table_sites(body: A.Block) -> None:
    """A located error when one table is applied at two places that p4c-bm2-ss cannot merge into one node of
    BMv2's control graph (see the module docstring), for a control's apply body after the checker has resolved
    its calls.  Each site records its successor and its branches (``(id of the if/switch, branch)`` pairs from
    the body down): two sites are exclusive when they part at some ``if`` or ``switch``."""
    sites: dict[int, list[tuple[Any, Any, Any, tuple]]] = {}

    def applies(node: Any) -> list[A.Call]:
        return [n for n in _nodes(node) if isinstance(n, A.Call) and getattr(n, "kind", None) == "table"]

    def walk(stmts: list[A.Stmt], after: Any, site: Any, path: tuple) -> None:
        for i, s in enumerate(stmts):
            nxt = ("stmt", id(stmts[i + 1])) if i + 1 < len(stmts) else after
            if isinstance(s, A.CallStmt) and getattr(s.call, "kind", None) == "table":
                sites.setdefault(id(s.call.target), []).append((s.call, nxt, site, path))
                continue
            own = [(c, ("own", id(c)), site, path) for c in applies(s.cond if isinstance(s, A.If) else
                                                                      s.expr if isinstance(s, A.Switch) else
                                                                      [] if isinstance(s, (A.Block, A.For)) else s)]
            for found in own:
                sites.setdefault(id(found[0].target), []).append(found)
            if isinstance(s, A.Block):
                walk(s.stmts, nxt, s.site or site, path)
            elif isinstance(s, A.If):
                walk([s.then], nxt, site, path + ((id(s), 0),))
                if s.other is not None:
                    walk([s.other], nxt, site, path + ((id(s), 1),))
            elif isinstance(s, A.Switch):
                for k, case in enumerate(s.cases):
                    if case.body is not None:
                        walk([case.body], nxt, site, path + ((id(s), k),))
            elif isinstance(s, A.For):
                walk([s.body], ("loop", id(s)), site, path)

    def exclusive(a: tuple, b: tuple) -> bool:
        return any(x[0] == y[0] and x[1] != y[1] for x, y in zip(a, b))

    def where(found: tuple) -> Any:
        return found[2] or found[0].loc

    walk(body.stmts, ("end",), None, ())
    for found in sites.values():            # p4c's order: a path back to the table first, then the successors
        for j, later in enumerate(found):
            for earlier in found[:j]:
                if not exclusive(earlier[3], later[3]):
                    raise P4Error(where(later), f"table {later[0].target.fqname} is applied at {where(later)} "
                                                f"after its apply at {where(earlier)}: p4c's BMv2 back end refuses "
                                                f"it ('contains a path from table {later[0].target.fqname} back "
                                                f"to itself'); a table, or a sub-control instance with a table, "
                                                f"can be applied at one place only, or in exclusive branches")
    for found in sites.values():
        first = found[0]
        for later in found[1:]:
            if later[1] != first[1]:
                raise P4Error(where(later), f"table {later[0].target.fqname} is applied at {where(later)} and at "
                                            f"{where(first)} with different statements after each: p4c's BMv2 "
                                            f"back end refuses it ('table {later[0].target.fqname} has multiple "
                                            f"successors'); applies in exclusive branches must be followed by "
                                            f"the same statement")


def _nodes(node: Any):
    """Every syntax-tree node under ``node``, pre-order, following only the parser's fields (not the checker's,
    which lead to the typed IR)."""
    if isinstance(node, (list, tuple)):
        for x in node:
            yield from _nodes(x)
    elif isinstance(node, A.Node):
        yield node
        for f in fields(node):
            if f.init:
                yield from _nodes(getattr(node, f.name))

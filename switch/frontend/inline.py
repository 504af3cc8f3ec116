"""The front end's inlining pass: functions, sub-controls and sub-parsers (P4-16 10.2, 13.2, 14.3, 15.1).

Runs on the syntax tree between :mod:`switch.frontend.parser` and :mod:`switch.frontend.check`, so the checker, the
code generator and P4Info only ever see the V1Switch blocks with plain statements, actions and tables:

* A call of a top-level ``function`` is replaced by its body.  Arguments are copied in to fresh variables and
  ``out``/``inout`` ones copied back after the body (copy-in/copy-out, P4-16 6.8); ``return e`` becomes an
  assignment to a result variable plus a ``done`` flag that guards the statements after it.  Calls are hoisted
  out of the statement that holds them, in evaluation order.  A call in a position that is evaluated only
  conditionally (right of ``&&``/``||``, a branch of ``?:``) or outside a statement (a table key, a constant)
  is a located ``unsupported`` error.
* An instance of a control inside a control (``C(ctor args) c;`` then ``c.apply(args);``) is replaced by C's
  locals, renamed ``c__name`` and given ``@name("c.name")`` so P4Info names them as p4c does
  (``Outer.c.table``), and the apply call by C's apply body.  Parameters and constructor parameters are
  substituted by the arguments when these are paths (``hdr.ipv4``) or compile-time values; other ``in``
  arguments are copied to a fresh control-local variable first.  ``return`` in C's apply body ends only C's body.
* An instance of a parser inside a parser: the state holding ``p.apply(...)`` is split at the call, the first
  half transitions to p's renamed ``start`` state and p's ``accept`` continues with the second half.

Choices: a control instance applied once has its parameters replaced by the arguments when these are paths, so
a sub-control that writes an ``in`` argument's alias through another ``inout`` argument sees the write (p4c
copies; programs that tell the difference alias one argument twice); one applied at several places keeps one
set of locals (its tables are shared, as the instance's are) and copies the arguments in and back at each
site.  A parser instance applied in several states gets a copy of its states per site (its locals exist once).
"""
from __future__ import annotations

import copy
import dataclasses
from dataclasses import fields, is_dataclass
from typing import Any, Callable

from ..errors import Loc, P4Error, unsupported
from . import p4ast as A


# ---- generic tree helpers -------------------------------------------------------------------------
def _map(node: Any, fn: Callable[[Any], Any]) -> Any:
    """Rebuild ``node`` bottom-up in place: every dataclass child ``c`` is replaced by ``fn(c)``."""
    if isinstance(node, list):
        return [_map(x, fn) for x in node]
    if isinstance(node, tuple):
        return tuple(_map(x, fn) for x in node)
    if isinstance(node, dict):
        return {k: _map(v, fn) for k, v in node.items()}
    if is_dataclass(node) and not isinstance(node, (type, Loc)):
        for f in fields(node):
            setattr(node, f.name, _map(getattr(node, f.name), fn))
        return fn(node)
    return node


def _walk(node: Any):
    """Every dataclass node under ``node`` (pre-order)."""
    if isinstance(node, (list, tuple)):
        for x in node:
            yield from _walk(x)
    elif isinstance(node, dict):
        for x in node.values():
            yield from _walk(x)
    elif is_dataclass(node) and not isinstance(node, (type, Loc)):
        yield node
        for f in fields(node):
            yield from _walk(getattr(node, f.name))


def _substitute(node: Any, names: dict[str, str], exprs: dict[str, A.Expr],
                readonly: dict[str, A.ReadOnlyParam] | None = None) -> Any:
    """Rename the names in ``names`` and replace those in ``exprs`` by a copy of their expression; a name in
    ``readonly`` (an ``in`` or directionless parameter) is marked so on its replacement, for the checker."""
    ro = readonly or {}

    def fn(n):
        if isinstance(n, A.Name):
            if n.name in exprs:
                r = copy.deepcopy(exprs[n.name])
            elif n.name in names:
                r = A.Name(n.loc, names[n.name])
            elif n.name in ro:
                r = n                              # not renamed: only marked
            else:
                return n
            if n.name in ro:
                r.readonly = dataclasses.replace(ro[n.name], at=n.loc)
            return r
        if isinstance(n, (A.VarDecl, A.ConstDecl, A.Instance, A.ActionDecl, A.TableDecl)) and n.name in names:
            n.name = names[n.name]
        elif isinstance(n, A.ActionRef) and n.name in names:
            n.name = names[n.name]
        return n
    return _map(node, fn)


def _is_path(e: A.Expr) -> bool:
    """A side-effect-free location: a name, its members, constant indexes."""
    while isinstance(e, (A.Member, A.Index)):
        if isinstance(e, A.Index) and not isinstance(e.index, A.Lit):
            return False
        e = e.expr
    return isinstance(e, A.Name)


def _text(e: A.Expr) -> str:
    """Source text of a path expression (see :func:`_is_path`)."""
    if isinstance(e, A.Member):
        return f"{_text(e.expr)}.{e.name}"
    if isinstance(e, A.Index):
        return f"{_text(e.expr)}[{e.index.value}]"
    return e.name


def _extern_param(p: A.Param) -> bool:
    """A parameter of an extern object type (packet_in, packet_out): passed on, never copied."""
    return p.type.kind == "name" and p.type.name in ("packet_in", "packet_out")


def _key(e: A.Expr):
    """Comparable form of a bound action argument (a path or a literal)."""
    if isinstance(e, (A.Lit, A.BoolLit)):
        return ("value", e.value)
    return ("path", _text(e))


def _writes_params(a: A.ActionDecl) -> bool:
    """Whether action ``a`` has out/inout parameters (its direct calls are inlined by :class:`Inliner`)."""
    return any(p.direction in ("out", "inout") for p in a.params)


def _has_return(node: Any) -> bool:
    return any(isinstance(n, A.Return) for n in _walk(node))


def _lower_returns(stmts: list[A.Stmt], done: str, result: str | None, in_loop: bool = False) -> list[A.Stmt]:
    """Rewrite ``return`` in ``stmts`` into ``result = e; done = true;`` and guard what follows with ``!done``;
    inside a for loop the return also leaves the loop (and every enclosing one)."""
    def one(s: A.Stmt) -> A.Stmt:
        if isinstance(s, A.For):
            return dataclasses.replace(s, body=A.Block(s.loc, _lower_returns([s.body], done, result, True)))
        if isinstance(s, A.Return):
            out: list[A.Stmt] = []
            if s.expr is not None:
                if result is None:
                    raise P4Error(s.loc, "return with a value in a function returning void")
                out.append(A.Assign(s.loc, A.Name(s.loc, result), s.expr))
            elif result is not None:
                raise P4Error(s.loc, "return without a value in a function that returns one")
            out.append(A.Assign(s.loc, A.Name(s.loc, done), A.BoolLit(s.loc, True)))
            if in_loop:
                out.append(A.Break(s.loc))
            return A.Block(s.loc, out)
        if isinstance(s, A.Block):
            return A.Block(s.loc, _lower_returns(s.stmts, done, result, in_loop))
        if isinstance(s, A.If):
            return A.If(s.loc, s.cond, one(s.then), one(s.other) if s.other is not None else None)
        if isinstance(s, A.Switch):
            for c in s.cases:
                if c.body is not None:
                    c.body = one(c.body)
            return s
        return s

    out: list[A.Stmt] = []
    for i, s in enumerate(stmts):
        out.append(one(s))
        rest = stmts[i + 1:]
        if in_loop and isinstance(s, A.For) and _has_return(s):     # a return in a nested loop ends this one too
            out.append(A.If(s.loc, A.Name(s.loc, done), A.Break(s.loc), None))
        if rest and _has_return(s):
            loc = rest[0].loc
            guard = A.Unary(loc, "!", A.Name(loc, done))
            out.append(A.If(loc, guard, A.Block(loc, _lower_returns(rest, done, result, in_loop)), None))
            break
    return out


class Inliner:
    def __init__(self, prog: A.Program):
        self.prog = prog
        self.functions: dict[str, A.FunctionDecl] = {}
        self.blocks: dict[str, A.ParserDecl | A.ControlDecl] = {}
        self.global_actions: dict[str, A.ActionDecl] = {}    # top-level actions with out/inout parameters
        self.top_actions: dict[str, A.ActionDecl] = {}       # every top-level action (copied where bound)
        self.cur_actions: dict[str, A.ActionDecl] = {}       # those visible in the block being processed
        self.called: list[tuple[A.ActionDecl, bool]] | None = None   # actions a control's apply body calls
        self.n = 0

    def fresh(self, base: str) -> str:
        self.n += 1
        return f"__{base}_{self.n}"

    def run(self) -> A.Program:
        out = []
        for d in self.prog.decls:
            if isinstance(d, A.FunctionDecl):
                if d.name in self.functions or d.name in self.blocks:
                    raise P4Error(d.loc, f"'{d.name}' is already declared")
                self.cur_actions = {}         # a function calls functions (and externs), not actions
                d.body = self.stmt_list_block(d.body)
                self.functions[d.name] = d
                continue
            if isinstance(d, A.ActionDecl):
                self.cur_actions = self.global_actions
                d.body = self.stmt_list_block(d.body)
                self.top_actions[d.name] = d
                if _writes_params(d):
                    self.global_actions[d.name] = d   # called directly only (a table cannot bind it): inlined
                    continue
            elif isinstance(d, (A.ParserDecl, A.ControlDecl)):
                self.block(d)
                self.blocks[d.name] = d
            else:
                self.no_calls(d)
            out.append(d)
        return A.Program(self.prog.loc, out)

    # ---- functions --------------------------------------------------------------------------
    def callee(self, e: Any) -> A.FunctionDecl | A.ActionDecl | None:
        """The function, or action with out/inout parameters, that call ``e`` invokes (both are inlined)."""
        if isinstance(e, A.Call) and isinstance(e.func, A.Name):
            n = e.func.name
            return self.cur_actions.get(n) or (self.functions.get(n) if n not in self.cur_actions else None)
        return None

    def is_fcall(self, e: Any) -> bool:
        return self.callee(e) is not None

    def no_calls(self, node: Any) -> None:
        """A function call where no statement can hold its body is a located error."""
        for n in _walk(node):
            if self.is_fcall(n):
                raise unsupported(f"a call of function {n.func.name} outside a statement", n.loc)

    def hoist(self, e: Any, pre: list[A.Stmt], cond: bool = False) -> Any:
        """Replace function calls in expression ``e`` by their result variable; their bodies go to ``pre``."""
        if isinstance(e, list):
            return [self.hoist(x, pre, cond) for x in e]
        if not isinstance(e, A.Expr):
            return e
        if isinstance(e, A.Binary) and e.op in ("&&", "||"):
            e.left = self.hoist(e.left, pre, cond)
            e.right = self.hoist(e.right, pre, True)
            return e
        if isinstance(e, A.Ternary):
            e.cond = self.hoist(e.cond, pre, cond)
            e.then = self.hoist(e.then, pre, True)
            e.other = self.hoist(e.other, pre, True)
            return e
        for f in fields(e):
            v = getattr(e, f.name)
            if isinstance(v, (A.Expr, list)):
                setattr(e, f.name, self.hoist(v, pre, cond))
        if self.is_fcall(e):
            if cond:
                raise unsupported(f"a call of function {e.func.name} that is evaluated only conditionally "
                                  "(right of && or ||, or a branch of ?:)", e.loc)
            return self.expand_call(e, pre, want_value=True)
        return e

    def expand_call(self, e: A.Call, pre: list[A.Stmt], want_value: bool) -> A.Expr | None:
        f = self.callee(e)
        loc = e.loc
        is_action = isinstance(f, A.ActionDecl)
        if is_action and self.called is not None and all(f is not x for x, _ in self.called):
            self.called.append((f, any(f is g for g in self.global_actions.values())))
        if is_action:
            if want_value:
                raise P4Error(loc, f"action {f.name} is not a value")
            f = A.FunctionDecl(f.loc, f.name, [], None, f.params, f.body)
        owner = f"{'action' if is_action else 'function'} {f.name}"
        readonly = {p.name: A.ReadOnlyParam(p.name, p.direction, owner) for p in f.params
                    if p.direction in ("in", "")}
        if e.type_args:
            raise unsupported("type arguments to a function", loc)
        e.args = A.resolve_args(e.args, f.params, loc, f"function {f.name}")
        if len(e.args) != len(f.params):
            raise P4Error(loc, f"function {f.name} expects {len(f.params)} argument(s), got {len(e.args)}")
        void = f.ret is None or f.ret.kind == "void"
        if want_value and void:
            raise P4Error(loc, f"function {f.name} returns void; its call is not a value")
        tag = self.fresh(f.name)
        names: dict[str, str] = {p.name: f"{tag}_{p.name}" for p in f.params}
        body = copy.deepcopy(f.body)
        for n in _walk(body):
            if isinstance(n, (A.VarDecl, A.ConstDecl)):
                names.setdefault(n.name, f"{tag}_{n.name}")
        body = _substitute(body, names, {}, readonly)
        inner: list[A.Stmt] = []
        copy_out: list[A.Stmt] = []
        for p, a in zip(f.params, e.args):
            tmp = names[p.name]
            if p.direction in ("out", "inout") and not isinstance(a, A.Default) and not _is_path(a):
                raise P4Error(a.loc, f"argument for '{p.direction} {p.name}' must be assignable")
            init = None if p.direction == "out" else a
            if isinstance(a, A.Default) and p.direction != "out":
                raise P4Error(a.loc, "'_' can only be passed to an out parameter")
            if p.direction == "" and not is_action:
                # P4-16 6.8: a function's directionless parameter takes a compile-time known value (the checker
                # evaluates the constant; an action's behaves as 'in' when the action is called directly)
                if isinstance(a, A.ListExpr):       # a list or structure of constants: a variable, checked so
                    held: A.Stmt = A.VarDecl(p.loc, copy.deepcopy(p.type), tmp, a)
                else:
                    held = A.ConstDecl(p.loc, copy.deepcopy(p.type), tmp, a)
                held.arg_for = readonly[p.name]
                inner.append(held)
                continue
            inner.append(A.VarDecl(p.loc, copy.deepcopy(p.type), tmp, init))
            if p.direction in ("out", "inout") and not isinstance(a, A.Default):
                copy_out.append(A.Assign(a.loc, copy.deepcopy(a), A.Name(a.loc, tmp)))
        result = None if void else f"{tag}_result"
        stmts = body.stmts
        if _has_return(body):
            done = f"{tag}_done"
            inner.append(A.VarDecl(loc, A.TypeRef(loc, "bool"), done, A.BoolLit(loc, False)))
            stmts = _lower_returns(stmts, done, result)
        if result is not None:
            pre.append(A.VarDecl(loc, copy.deepcopy(f.ret), result, None))
        pre.append(A.Block(loc, inner + stmts + copy_out))
        return A.Name(loc, result) if result is not None else None

    def stmt_list_block(self, b: A.Block | None) -> A.Block | None:
        if b is None:
            return None
        return A.Block(b.loc, self.stmts(b.stmts))

    def stmts(self, stmts: list[A.Stmt]) -> list[A.Stmt]:
        out: list[A.Stmt] = []
        for s in stmts:
            out.extend(self.stmt(s))
        return out

    def stmt(self, s: A.Stmt) -> list[A.Stmt]:
        """``s`` with its function calls expanded: the statements to put in its place."""
        pre: list[A.Stmt] = []
        if isinstance(s, A.Block):
            return [A.Block(s.loc, self.stmts(s.stmts))]
        if isinstance(s, A.CallStmt) and self.is_fcall(s.call):
            s.call.args = self.hoist(s.call.args, pre)
            self.expand_call(s.call, pre, want_value=False)
            return pre
        if isinstance(s, A.Assign):
            s.lhs = self.hoist(s.lhs, pre)
            s.rhs = self.hoist(s.rhs, pre)
        elif isinstance(s, A.CallStmt):
            s.call = self.hoist(s.call, pre)
        elif isinstance(s, A.If):
            s.cond = self.hoist(s.cond, pre)
            s.then = self._one(s.then)
            if s.other is not None:
                s.other = self._one(s.other)
        elif isinstance(s, A.Switch):
            s.expr = self.hoist(s.expr, pre)
            for c in s.cases:
                if c.body is not None:
                    c.body = A.Block(c.body.loc, self.stmts(c.body.stmts))
        elif isinstance(s, A.For):
            self.no_calls([s.cond, s.update])      # evaluated at every iteration: no place to hoist to
            s.init = self.stmts(s.init)
            s.body = self._one(s.body)
        elif isinstance(s, A.VarDecl) and s.init is not None:
            s.init = self.hoist(s.init, pre)
        elif isinstance(s, A.Return) and s.expr is not None:
            s.expr = self.hoist(s.expr, pre)
        else:
            self.no_calls(s)
        return pre + [s]

    def _one(self, s: A.Stmt) -> A.Stmt:
        r = self.stmt(s)
        return r[0] if len(r) == 1 else A.Block(s.loc, r)

    # ---- blocks -----------------------------------------------------------------------------
    def block(self, d: A.ParserDecl | A.ControlDecl) -> None:
        locals_: list[Any] = []
        self.cur_actions = dict(self.global_actions)
        for x in d.locals:
            if isinstance(x, A.ActionDecl):
                x.body = self.stmt_list_block(x.body)
                if _writes_params(x):
                    self.cur_actions[x.name] = x
                else:
                    self.cur_actions.pop(x.name, None)
            elif not isinstance(x, A.Instance):
                self.no_calls(x)
            locals_.append(x)
        d.locals = locals_
        if isinstance(d, A.ControlDecl):
            self.called = []
            d.apply = self.stmt_list_block(d.apply)
            d.inlined_actions, self.called = self.called, None
            self.bind_table_actions(d)
            self.direct_invocations(d, d.apply)
            self.inline_controls(d)
        else:
            for st in d.states:
                pre: list[A.Stmt] = []
                st.stmts = self.stmts(st.stmts)
                if st.transition is not None and st.transition.select is not None:
                    st.transition.select = self.hoist(st.transition.select, pre)
                    st.stmts += pre
            self.direct_invocations(d, [st.stmts for st in d.states])
            self.inline_parsers(d)

    def bind_table_actions(self, d: A.ControlDecl) -> None:
        """P4-16 14.2.1.2: an action's directional parameters are bound by arguments in a table's action list
        (``actions = { set(hdr.ipv4.ttl); }``).  The action is rewritten to copy those arguments in (and
        ``out``/``inout`` ones back) around its body, keeping only its directionless parameters (the ones the
        control plane supplies, as in P4Info); a table binding an action to other arguments than an earlier
        table gets a copy of it (:meth:`table_copy`); actions with out/inout parameters that no table lists are
        called directly only, and inlined there, so they are dropped."""
        local = {x.name: x for x in d.locals if isinstance(x, A.ActionDecl)}
        binding: dict[str, tuple[list[A.Expr], Loc]] = {}
        listed: set[str] = set()
        for t in d.locals:
            if not isinstance(t, A.TableDecl):
                continue
            for ar in t.actions:
                name = ar.name.lstrip(".")
                listed.add(name)
                a = local.get(name)
                top = self.top_actions.get(name)
                if a is None and top is not None and (ar.args or _writes_params(top)):
                    a = local[name] = self.localize(top)
                    d.locals.insert(sum(1 for x in d.locals if isinstance(x, A.ActionDecl) and x.localized), a)
                ndir = sum(1 for p in a.params if p.direction) if a is not None else 0
                if not ar.args:
                    if ndir:
                        raise P4Error(ar.loc, f"action {name} has directional parameters: bind them in table "
                                              f"{t.name}'s action list, e.g. {name}(hdr.x)")
                    continue
                if a is None:
                    raise P4Error(ar.loc, f"unknown action {name}")
                if len(ar.args) != ndir:
                    raise P4Error(ar.loc, f"action {name} has {ndir} directional parameter(s), "
                                          f"{len(ar.args)} argument(s) bound")
                for x, p in zip(ar.args, a.params):
                    if p.direction in ("out", "inout") and not _is_path(x):
                        raise P4Error(x.loc, f"argument for '{p.direction} {p.name}' must be assignable")
                    if not (_is_path(x) or isinstance(x, (A.Lit, A.BoolLit))):
                        raise unsupported("a bound action argument other than a path or a literal", x.loc)
                prev = binding.get(name)
                if prev is not None and [_key(x) for x in prev[0]] != [_key(x) for x in ar.args]:
                    name = self.table_copy(d, t, name, ar.args, local, binding)
                    listed.add(name)
                binding[name] = (ar.args, ar.loc)
        for name, (args, loc) in binding.items():
            a = local[name]
            ndir = len(args)
            pre: list[A.Stmt] = []
            post: list[A.Stmt] = []
            for p, x in zip(a.params[:ndir], args):
                pre.append(A.VarDecl(p.loc, copy.deepcopy(p.type), p.name,
                                     None if p.direction == "out" else copy.deepcopy(x)))
                if p.direction in ("out", "inout"):
                    post.append(A.Assign(x.loc, copy.deepcopy(x), A.Name(x.loc, p.name)))
            stmts = a.body.stmts
            # an 'in' parameter stays read-only in the body although the binding makes it a local (p4c:
            # "Expression v cannot be the target of an assignment"); a local of the same name shadows it
            shadowed = {n.name for n in _walk(stmts) if isinstance(n, (A.VarDecl, A.ConstDecl))}
            readonly = {p.name: A.ReadOnlyParam(p.name, p.direction, f"action {name}")
                        for p in a.params[:ndir] if p.direction == "in" and p.name not in shadowed}
            if readonly:
                stmts = _substitute(stmts, {}, {}, readonly)
            if post and _has_return(a.body):
                done = self.fresh("done")
                pre.append(A.VarDecl(loc, A.TypeRef(loc, "bool"), done, A.BoolLit(loc, False)))
                stmts = _lower_returns(stmts, done, None)
            a.body = A.Block(a.body.loc, pre + stmts + post)
            a.params = a.params[ndir:]
            for t in d.locals:
                if isinstance(t, A.TableDecl):
                    refs = [t.default_action] + [en.action for en in (t.entries or [])]
                    for ar in refs:
                        if ar is not None and ar.name.lstrip(".") == name and ar.args \
                                and len(ar.args) == ndir + len(a.params):
                            ar.args = ar.args[ndir:]     # the directional arguments repeat the binding
                    for ar in t.actions:
                        if ar.name.lstrip(".") == name:
                            ar.args = None
        d.locals = [x for x in d.locals if not (isinstance(x, A.ActionDecl) and x.name not in listed
                                                and x.name not in binding and _writes_params(x))]

    def table_copy(self, d: A.ControlDecl, t: A.TableDecl, name: str, args: list[A.Expr],
                   local: dict[str, A.ActionDecl], binding: dict[str, tuple[list[A.Expr], Loc]]) -> str:
        """Table ``t`` binds action ``name`` to other arguments than a table before it: ``t`` gets a copy of the
        action of its own (one per distinct binding, shared by the tables that bind alike), under the action's
        P4Info name, as p4c gives each table's binding an action of its own in the BMv2 JSON (both named as the
        action; P4Runtime's one action resolves to the table's).  Returns the copy's name; ``t``'s references to
        the action (its list, default action and entries) are renamed to it."""
        key = [_key(x) for x in args]
        orig = local[name]
        for other, (bound, _loc) in binding.items():
            if local[other].copy_of == name and [_key(x) for x in bound] == key:
                cname = other
                break
        else:
            cname = self.fresh(name)
            c = copy.deepcopy(orig)
            c.name, c.copy_of = cname, name
            if A.annot(c.annots, "name") is None:
                c.annots.append(A.Annotation(orig.loc, "name", [A.StrLit(orig.loc, name)]))
            d.locals.insert(d.locals.index(orig) + 1, c)
            local[cname] = c
        refs = list(t.actions) + [t.default_action] + [en.action for en in (t.entries or [])]
        for ar in refs:
            if ar is not None and ar.name.lstrip(".") == name:
                ar.name = cname
        return cname

    @staticmethod
    def localize(a: A.ActionDecl) -> A.ActionDecl:
        """A control's own copy of top-level action ``a`` (one with out/inout parameters that a table of the
        control lists), so that the table's action list can bind its directional parameters there, as p4c's
        LocalizeAllActions copies every top-level action into the controls using it.  The copy keeps the
        top-level name (``@name(".a")``, or ``a``'s own ``@name`` made absolute) for P4Info and P4Runtime;
        each control binds its copy to its own arguments."""
        c = copy.deepcopy(a)
        c.localized = True
        n = A.annot(c.annots, "name")
        if n is not None and n.args and isinstance(n.args[0], A.StrLit):
            if not n.args[0].value.startswith("."):
                n.args[0].value = "." + n.args[0].value
        else:
            c.annots = [x for x in c.annots if x.name != "name"]
            c.annots.append(A.Annotation(a.loc, "name", [A.StrLit(a.loc, "." + a.name)]))
        return c

    def direct_invocations(self, d, body: Any) -> None:
        """P4-16 15.1 direct type invocation: ``T.apply(...)`` of a parser/control type ``T`` without
        constructor parameters is an instance of T named T (declared here as one)."""
        declared = {x.name for x in d.locals if isinstance(x, (A.Instance, A.VarDecl, A.ConstDecl,
                                                                  A.ActionDecl, A.TableDecl))}
        declared |= {p.name for p in d.params}
        for n in _walk(body):
            if isinstance(n, A.Call) and isinstance(n.func, A.Member) and isinstance(n.func.expr, A.Name) \
                    and n.func.expr.name in self.blocks and n.func.expr.name not in declared:
                t = n.func.expr.name
                if self.blocks[t].ctor_params:
                    raise P4Error(n.loc, f"{t} has constructor parameters: instantiate it to apply it")
                d.locals.append(A.Instance(n.loc, A.TypeRef(n.loc, "name", name=t), [], t, []))
                declared.add(t)

    def sub_instances(self, d, kind: type) -> dict[str, tuple[A.Instance, Any]]:
        out = {}
        for x in d.locals:
            if isinstance(x, A.Instance) and x.type.kind == "name" and x.type.name in self.blocks:
                sub = self.blocks[x.type.name]
                if not isinstance(sub, kind):
                    what = "parser" if isinstance(sub, A.ParserDecl) else "control"
                    raise P4Error(x.loc, f"cannot instantiate {what} {sub.name} inside "
                                         f"{'a parser' if kind is A.ParserDecl else 'a control'}")
                out[x.name] = (x, sub)
        return out

    def site_copies(self, inst: A.Instance, sub, call: A.Call, names: dict[str, str]
                    ) -> tuple[list[A.Stmt], list[A.Stmt]]:
        """Copy-in/copy-out of one apply site's arguments to a shared instance's parameter variables."""
        args = A.resolve_args(call.args, sub.params, call.loc, f"{sub.name}.apply")
        if len(args) != len(sub.params):
            raise P4Error(call.loc, f"{sub.name}.apply expects {len(sub.params)} argument(s), got {len(args)}")
        cin: list[A.Stmt] = []
        cout: list[A.Stmt] = []
        for prm, a in zip(sub.params, args):
            if _extern_param(prm):
                continue
            tmp = names[prm.name]
            if prm.direction != "out":
                cin.append(A.Assign(a.loc, A.Name(a.loc, tmp), copy.deepcopy(a)))
            if prm.direction in ("out", "inout"):
                if not _is_path(a):
                    raise P4Error(a.loc, f"argument for '{prm.direction} {prm.name}' must be assignable")
                cout.append(A.Assign(a.loc, copy.deepcopy(a), A.Name(a.loc, tmp)))
        return cin, cout

    def prepare(self, inst: A.Instance, sub, args: list[A.Expr], call_loc: Loc, shared: bool = False
                ) -> tuple[dict[str, str], dict[str, A.Expr], list[Any], list[A.Stmt], list[A.Stmt],
                           dict[str, A.ReadOnlyParam]]:
        """Renaming of ``sub``'s locals for instance ``inst``, substitution of its parameters by ``args``
        (``shared``: every parameter but an extern one gets a variable instead, see :meth:`site_copies`).
        Returns (names, exprs, new locals, copy-in statements, copy-out statements, read-only parameters: the
        ``in`` and directionless ones, whose uses :func:`_substitute` marks)."""
        p = inst.name
        inst.args = A.resolve_args(inst.args, sub.ctor_params, inst.loc, f"{sub.name}'s constructor")
        args = A.resolve_args(args, sub.params, call_loc, f"{sub.name}.apply")
        if len(inst.args) != len(sub.ctor_params):
            raise P4Error(inst.loc, f"{sub.name} expects {len(sub.ctor_params)} constructor argument(s), "
                                    f"got {len(inst.args)}")
        if len(args) != len(sub.params):
            raise P4Error(call_loc, f"{sub.name}.apply expects {len(sub.params)} argument(s), got {len(args)}")
        names: dict[str, str] = {}
        locals_ = copy.deepcopy(sub.locals)
        for x in locals_:
            if isinstance(x, A.TableDecl):       # p4c names a key by its source text in the sub-control
                for k in x.keys:
                    if _is_path(k.expr) and not A.annot(k.annots, "name"):
                        k.annots = list(k.annots) + [A.Annotation(k.loc, "name", [A.StrLit(k.loc, _text(k.expr))])]
            if isinstance(x, (A.VarDecl, A.ConstDecl, A.Instance, A.ActionDecl, A.TableDecl)):
                names[x.name] = f"{p}__{x.name}"
                if isinstance(x, (A.Instance, A.ActionDecl, A.TableDecl)):
                    self._rename_annot(x, p)
        exprs: dict[str, A.Expr] = {}
        new_locals: list[Any] = []
        copy_in: list[A.Stmt] = []
        copy_out: list[A.Stmt] = []
        for cp, a in zip(sub.ctor_params, inst.args):
            cname = f"{p}__{cp.name}"
            new_locals.append(A.ConstDecl(cp.loc, copy.deepcopy(cp.type), cname, a))
            names[cp.name] = cname
        for prm, a in zip(sub.params, args):
            if shared and _extern_param(prm):
                if not _is_path(a):
                    raise P4Error(a.loc, f"argument for '{prm.name}' must name the {prm.type.name}")
                exprs[prm.name] = a            # packet_in/packet_out: the same object at every site
                continue
            if shared:
                tmp = f"{p}__{prm.name}"
                new_locals.append(A.VarDecl(prm.loc, copy.deepcopy(prm.type), tmp, None))
                names[prm.name] = tmp
                continue
            if _is_path(a):
                exprs[prm.name] = a
                continue
            if prm.direction in ("out", "inout"):
                raise P4Error(a.loc, f"argument for '{prm.direction} {prm.name}' must be assignable")
            tmp = f"{p}__{prm.name}"
            new_locals.append(A.VarDecl(prm.loc, copy.deepcopy(prm.type), tmp, None))
            copy_in.append(A.Assign(a.loc, A.Name(a.loc, tmp), a))
            names[prm.name] = tmp
        owner = f"{'parser' if isinstance(sub, A.ParserDecl) else 'control'} {sub.name}"
        readonly = {prm.name: A.ReadOnlyParam(prm.name, prm.direction, owner) for prm in sub.params
                    if prm.direction in ("in", "") and not _extern_param(prm)}
        return names, exprs, new_locals + locals_, copy_in, copy_out, readonly

    @staticmethod
    def _rename_annot(x, prefix: str) -> None:
        a = A.annot(x.annots, "name")
        if a and a.args and isinstance(a.args[0], A.StrLit):
            if not a.args[0].value.startswith("."):
                a.args[0] = A.StrLit(a.args[0].loc, f"{prefix}.{a.args[0].value}")
        else:
            x.annots = list(x.annots) + [A.Annotation(x.loc, "name", [A.StrLit(x.loc, f"{prefix}.{x.name}")])]

    def _apply_calls(self, node: Any, insts: dict) -> list[A.Call]:
        return [n for n in _walk(node) if isinstance(n, A.Call) and isinstance(n.func, A.Member)
                and isinstance(n.func.expr, A.Name) and n.func.expr.name in insts]

    def inline_controls(self, d: A.ControlDecl) -> None:
        insts = self.sub_instances(d, A.ControlDecl)
        if not insts:
            return
        for x in d.locals:
            if isinstance(x, A.ActionDecl) and self._apply_calls(x, insts):
                raise P4Error(self._apply_calls(x, insts)[0].loc, "a control cannot be applied inside an action")
            if isinstance(x, A.TableDecl) and self._apply_calls(x, insts):
                raise unsupported("applying a control in a table declaration", self._apply_calls(x, insts)[0].loc)
        calls = self._apply_calls(d.apply, insts)
        seen: dict[str, list[A.Call]] = {}
        for c in calls:
            n = c.func.expr.name
            if c.func.name != "apply":
                raise P4Error(c.func.loc, f"control instance {n} has no method '{c.func.name}'")
            seen.setdefault(n, []).append(c)
        bodies: dict[int, A.Block] = {}
        new_locals: list[Any] = []
        for x in d.locals:
            if not (isinstance(x, A.Instance) and x.name in insts):
                new_locals.append(x)
                continue
            inst, sub = insts[x.name]
            sites = seen.get(x.name)
            if not sites:
                continue                   # never applied: nothing of it exists at run time
            # applied once: parameters replaced by the (path) arguments; applied at several places: one set of
            # locals (its tables are shared, as the instance's are) and per site copy-in/copy-out of the arguments
            shared = len(sites) > 1
            names, exprs, locs, copy_in, copy_out, ro = self.prepare(inst, sub, sites[0].args, sites[0].loc,
                                                                     shared)
            body0 = sub.apply
            for n in _walk(body0):
                if isinstance(n, (A.VarDecl, A.ConstDecl)):
                    names.setdefault(n.name, f"{inst.name}__{n.name}")
            new_locals.extend(_substitute(locs, names, exprs, ro))
            done = f"{inst.name}__done"
            if _has_return(body0):
                new_locals.append(A.VarDecl(inst.loc, A.TypeRef(inst.loc, "bool"), done, None))
            for call in sites:
                if shared:
                    copy_in, copy_out = self.site_copies(inst, sub, call, names)
                stmts = _substitute(copy.deepcopy(body0), names, exprs, ro).stmts
                if _has_return(body0):
                    stmts = [A.Assign(call.loc, A.Name(call.loc, done), A.BoolLit(call.loc, False))] + \
                        _lower_returns(stmts, done, None)
                bodies[id(call)] = A.Block(call.loc, copy_in + stmts + copy_out)
                bodies[id(call)].site = call.loc
        d.locals = new_locals

        def fn(n):
            if isinstance(n, A.CallStmt) and id(n.call) in bodies:
                return bodies[id(n.call)]
            return n
        d.apply = _map(d.apply, fn)
        left = self._apply_calls(d.apply, insts)
        if left:
            raise unsupported("applying a control inside an expression", left[0].loc)

    def inline_parsers(self, d: A.ParserDecl) -> None:
        insts = self.sub_instances(d, A.ParserDecl)
        if not insts:
            return
        for st in d.states:
            for x in st.stmts:
                if not isinstance(x, A.CallStmt) and self._apply_calls(x, insts):
                    raise unsupported("applying a sub-parser other than as a statement of a state",
                                      self._apply_calls(x, insts)[0].loc)
        applied: dict[str, int] = {}
        extra_locals: list[Any] = []
        states: list[A.State] = []
        work = list(d.states)
        while work:
            st = work.pop(0)
            k = next((i for i, x in enumerate(st.stmts) if isinstance(x, A.CallStmt)
                      and self._apply_calls(x, insts)), None)
            if k is None:
                states.append(st)
                continue
            call = st.stmts[k].call
            n = call.func.expr.name
            if call.func.name != "apply":
                raise P4Error(call.func.loc, f"parser instance {n} has no method '{call.func.name}'")
            # each apply site gets its own copy of the sub-parser's states; its locals exist once
            site = applied.get(n, 0)
            applied[n] = site + 1
            prefix = n if site == 0 else f"{n}__{site + 1}"
            inst, sub = insts[n]
            names, exprs, locs, copy_in, _, ro = self.prepare(inst, sub, call.args, call.loc)
            sub_states = copy.deepcopy(sub.states)
            for s2 in sub_states:
                for x in _walk(s2.stmts):
                    if isinstance(x, (A.VarDecl, A.ConstDecl)):
                        names.setdefault(x.name, f"{n}__{x.name}")
            have = {getattr(x, "name", None) for x in extra_locals}
            extra_locals.extend(x for x in _substitute(locs, names, exprs, ro)
                                if getattr(x, "name", None) not in have)
            after = f"{st.name}__after_{prefix}"
            snames = {s2.name: f"{prefix}__{s2.name}" for s2 in sub_states}
            snames["accept"] = after
            for s2 in _substitute(sub_states, names, exprs, ro):
                s2.name = snames[s2.name]
                tr = s2.transition
                if tr is not None:
                    if tr.state is not None:
                        tr.state = snames.get(tr.state, tr.state)
                    for c in tr.cases:
                        c.state = snames.get(c.state, c.state)
                states.append(s2)
            rest = A.State(call.loc, after, [], st.stmts[k + 1:], st.transition)
            st.stmts = st.stmts[:k] + copy_in
            st.transition = A.Transition(call.loc, snames["start"]) if "start" in snames else None
            if st.transition is None:
                raise P4Error(sub.loc, f"parser {sub.name} has no 'start' state")
            states.append(st)
            work.insert(0, rest)
        d.locals = [x for x in d.locals if not (isinstance(x, A.Instance) and x.name in insts)] + extra_locals
        d.states = states


def inline(prog: A.Program) -> A.Program:
    """The program with every function call, sub-control and sub-parser inlined (see the module docstring)."""
    return Inliner(prog).run()

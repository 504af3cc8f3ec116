"""Preprocessor: ``#include``, ``#define`` (object-like), ``#undef``, ``#ifdef``/``#ifndef``/``#if``/
``#elif``/``#else``/``#endif``, ``#error``; the result is one token stream with original positions.

``#include <core.p4>`` and ``<v1model.p4>`` resolve to this package's own declaration files in
``switch/p4include`` (written from the P4-16 and v1model specifications, same names as p4c's), so
a program compiles unchanged here and with p4c.  Macros are expanded at token level, which keeps
the position of every token pointing into the file the programmer wrote.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from .errors import Loc, P4Error, unsupported
from .lexer import Token, lex

BUILTIN_INCLUDE = Path(__file__).with_name("p4include")


class Preprocessor:
    """Expands one top-level file into a flat token list (see :func:`preprocess`)."""

    def __init__(self, include_dirs: list[str] | None = None, defines: dict[str, str] | None = None):
        self.include_dirs = [Path(d) for d in (include_dirs or [])]
        self.macros: dict[str, list[Token]] = {}
        for k, v in (defines or {}).items():
            self.macros[k] = [t for t in lex(str(v), "<command-line>") if t.kind != "eof"]
        self.out: list[Token] = []
        self.depth = 0

    # -- file handling -------------------------------------------------------------------------
    def _find(self, name: str, angle: bool, current: Path, loc: Loc) -> Path:
        cands = [] if angle else [current.parent / name]
        cands += [d / name for d in self.include_dirs] + [BUILTIN_INCLUDE / name]
        for c in cands:
            if c.is_file():
                return c
        raise P4Error(loc, f"cannot find include file {name!r}")

    def run_file(self, path: Path, display: str) -> None:
        self.depth += 1
        if self.depth > 50:
            raise P4Error(None, f"#include nesting too deep at {display}")
        try:
            text = path.read_text()
        except OSError as e:
            raise P4Error(Loc(display, 1, 1), f"cannot read file: {e.strerror}") from None
        toks = lex(text, display)
        # stack of (active, taken_any, in_else) per conditional
        stack: list[list[bool]] = []
        active = True
        for t in toks:
            if t.kind == "eof":
                break
            if t.kind == "directive":
                active = self._directive(t, stack, active, path)
                continue
            if active:
                self._emit(t, set())
        if stack:
            raise P4Error(toks[-1].loc, "missing #endif")
        self.depth -= 1

    def _emit(self, t: Token, hide: set[str]) -> None:
        if t.kind == "id" and t.text in self.macros and t.text not in hide:
            for r in self.macros[t.text]:
                self._emit(Token(r.kind, r.text, t.loc, r.value, r.adjacent), hide | {t.text})
        else:
            self.out.append(t)

    # -- directives ----------------------------------------------------------------------------
    def _directive(self, t: Token, stack: list[list[bool]], active: bool, path: Path) -> bool:
        m = re.match(r"(\w*)\s*(.*)$", t.text, re.S)
        name, rest = m.group(1), m.group(2).strip()
        parent_active = all(s[0] for s in stack[:-1]) if stack else True
        if name in ("ifdef", "ifndef", "if"):
            outer = active
            if name == "if":
                val = outer and self._eval(rest, t.loc)
            else:
                val = (rest.split()[0] in self.macros) if rest else False
                if name == "ifndef":
                    val = not val
            stack.append([outer and val, bool(val), outer])
            return outer and bool(val)
        if name in ("elif", "else", "endif"):
            if not stack:
                raise P4Error(t.loc, f"#{name} without #if")
            top = stack[-1]
            outer = top[2]
            if name == "endif":
                stack.pop()
                return outer
            if name == "else":
                top[0] = outer and not top[1]
                top[1] = True
                return top[0]
            val = (not top[1]) and outer and self._eval(rest, t.loc)
            top[0] = bool(val)
            top[1] = top[1] or bool(val)
            return top[0]
        del parent_active
        if not active:
            return active
        if name == "include":
            m2 = re.match(r'(?:"([^"]+)"|<([^>]+)>)', rest)
            if not m2:
                raise P4Error(t.loc, "#include expects \"file\" or <file>")
            fname = m2.group(1) or m2.group(2)
            p = self._find(fname, m2.group(2) is not None, path, t.loc)
            disp = os.path.relpath(p) if not str(p).startswith(str(BUILTIN_INCLUDE)) else p.name
            self.run_file(p, disp)
            return active
        if name == "define":
            m2 = re.match(r"([A-Za-z_]\w*)(\()?(.*)$", rest, re.S)
            if not m2:
                raise P4Error(t.loc, "#define expects a name")
            if m2.group(2):
                raise unsupported("function-like macro", t.loc)
            body = [x for x in lex(m2.group(3), t.loc.file) if x.kind != "eof"]
            for x in body:
                x.loc = t.loc
            self.macros[m2.group(1)] = body
            return active
        if name == "undef":
            self.macros.pop(rest.split()[0] if rest else "", None)
            return active
        if name == "error":
            raise P4Error(t.loc, f"#error {rest}")
        if name in ("pragma", "line", "warning", ""):
            return active
        raise P4Error(t.loc, f"unknown preprocessor directive #{name}")

    def _eval(self, expr: str, loc: Loc) -> bool:
        """Evaluate a ``#if`` condition: integers, macros, defined(), comparisons, ! && ||."""
        expr = re.sub(r"defined\s*\(\s*(\w+)\s*\)|defined\s+(\w+)",
                      lambda m: "1" if (m.group(1) or m.group(2)) in self.macros else "0", expr)
        for _ in range(20):
            new = re.sub(r"[A-Za-z_]\w*",
                         lambda m: " ".join(x.text for x in self.macros[m.group(0)]) if m.group(0) in self.macros
                         else "0", expr)
            if new == expr:
                break
            expr = new
        py = expr.replace("&&", " and ").replace("||", " or ")
        py = re.sub(r"!(?!=)", " not ", py)
        if not re.fullmatch(r"[\d\s()<>=!+\-*/%andortx]*", py):
            raise P4Error(loc, f"cannot evaluate #if expression {expr!r}")
        try:
            return bool(eval(py, {"__builtins__": {}}, {}))  # noqa: S307 - sanitised above
        except Exception:
            raise P4Error(loc, f"cannot evaluate #if expression {expr!r}") from None


def preprocess(path: str, include_dirs: list[str] | None = None,
               defines: dict[str, str] | None = None) -> list[Token]:
    """Preprocess and lex ``path``; returns the token list ending with an ``eof`` token."""
    pp = Preprocessor(include_dirs, defines)
    p = Path(path)
    if not p.is_file():
        raise P4Error(Loc(str(path), 1, 1), "no such file")
    pp.run_file(p, str(path))
    last = pp.out[-1].loc if pp.out else Loc(str(path), 1, 1)
    pp.out.append(Token("eof", "", last))
    return pp.out

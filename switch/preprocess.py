"""Preprocessor: ``#include``, ``#define`` (object-like), ``#undef``, ``#ifdef``/``#ifndef``/``#if``/
``#elif``/``#else``/``#endif``, ``#error``; the result is one token stream with original positions.

``#include <core.p4>`` and ``<v1model.p4>`` resolve to this package's own declaration files in
``switch/p4include`` (written from the P4-16 and v1model specifications, same names as p4c's), so
a program compiles unchanged here and with p4c.  Macros are expanded at token level, which keeps
the position of every token pointing into the file the programmer wrote.

A program may arrive from any P4Runtime client, so its text is untrusted:

* ``#if``/``#elif`` conditions are evaluated by :mod:`switch.ppexpr` (C preprocessor integer semantics, no
  Python ``eval``, 64-bit values);
* ``#include`` is confined to the program's own directory (its bundle), the include directories the caller
  configured (``-I``, the daemon's ``--include``) and the target's standard include directory.  A name that
  resolves (symbolic links followed) outside all of them is a located error that says only that the path
  leaves them: whether such a file exists, or what it holds, is never revealed;
* macro expansion is iterative and capped at :data:`MAX_TOKENS` tokens, so a chain of macros that double at
  each level is an error instead of a hang.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from .errors import Loc, P4Error, unsupported
from .lexer import Token, lex
from .ppexpr import evaluate, tokenize

BUILTIN_INCLUDE = Path(__file__).with_name("p4include")
#: Tokens a program may hold after preprocessing (every include and macro expansion counted).
MAX_TOKENS = 300_000


class Preprocessor:
    """Expands one top-level file into a flat token list (see :func:`preprocess`)."""

    def __init__(self, include_dirs: list[str] | None = None, defines: dict[str, str] | None = None):
        self.include_dirs = [Path(d) for d in (include_dirs or [])]
        self.macros: dict[str, list[Token]] = {}
        for k, v in (defines or {}).items():
            self.macros[k] = [t for t in lex(str(v), "<command-line>") if t.kind != "eof"]
        self.out: list[Token] = []
        self.depth = 0
        #: directories an ``#include`` may read from (resolved): set by :func:`preprocess` to the program's own
        #: directory, the include directories and the standard include directory
        self.roots: list[Path] = [p.resolve() for p in self.include_dirs] + [BUILTIN_INCLUDE.resolve()]

    # -- file handling -------------------------------------------------------------------------
    def _confined(self, p: Path) -> bool:
        return any(p == r or p.is_relative_to(r) for r in self.roots)

    def _find(self, name: str, angle: bool, current: Path, loc: Loc) -> Path:
        """The file ``#include`` names: beside the including file (quoted form), then in the include
        directories, then the standard ones; only inside :attr:`roots` (see the module docstring)."""
        cands = [] if angle else [current.parent / name]
        cands += [d / name for d in self.include_dirs] + [BUILTIN_INCLUDE / name]
        escaped = False
        for c in cands:
            try:
                r = c.resolve()
            except (OSError, RuntimeError, ValueError):      # a symlink loop, a NUL byte...
                continue
            if not self._confined(r):
                escaped = True
                continue
            if r.is_file():
                return r
        if escaped:
            raise P4Error(loc, f"#include {name!r}: the path leaves the program's directory and the include "
                               f"directories; only files inside them can be included")
        raise P4Error(loc, f"cannot find include file {name!r}")

    def run_file(self, path: Path, display: str) -> None:
        self.depth += 1
        try:
            text = path.read_text()
        except OSError as e:
            raise P4Error(Loc(display, 1, 1), f"cannot read file: {e.strerror}") from None
        except UnicodeDecodeError as e:
            raise P4Error(Loc(display, 1, 1), f"not a UTF-8 text file (byte {e.start})") from None
        toks = lex(text, display)
        # per open conditional: [active, a branch was taken, active outside it, #else seen]
        stack: list[list[bool]] = []
        active = True
        for t in toks:
            if t.kind == "eof":
                break
            if t.kind == "directive":
                active = self._directive(t, stack, active, path)
                continue
            if active:
                self._emit(t)
        if stack:
            raise P4Error(toks[-1].loc, "missing #endif")
        self.depth -= 1

    def _emit(self, t: Token, hide: frozenset = frozenset()) -> None:
        """Append ``t`` to the output, expanding object-like macros (iteratively: a macro is not expanded
        inside its own expansion; the expansion keeps ``t``'s position)."""
        out = self.out
        work = [(t, hide)]
        while work:
            x, h = work.pop()
            if x.kind == "id" and x.text in self.macros and x.text not in h:
                inner = h | {x.text}
                work.extend((Token(r.kind, r.text, t.loc, r.value, r.adjacent), inner)
                            for r in reversed(self.macros[x.text]))
                if len(work) > MAX_TOKENS:
                    raise P4Error(t.loc, f"macro expansion of {t.text!r} exceeds {MAX_TOKENS} tokens")
            else:
                out.append(x)
                if len(out) > MAX_TOKENS:
                    raise P4Error(t.loc, f"the program exceeds {MAX_TOKENS} tokens after preprocessing "
                                         f"(here, expanding {t.text!r})")

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
                if not re.match(r"[A-Za-z_]\w*$", rest.split()[0] if rest else ""):
                    raise P4Error(t.loc, f"#{name} expects a macro name")
                val = rest.split()[0] in self.macros
                if name == "ifndef":
                    val = not val
            stack.append([outer and val, bool(val), outer, False])
            return outer and bool(val)
        if name in ("elif", "else", "endif"):
            if not stack:
                raise P4Error(t.loc, f"#{name} without #if")
            top = stack[-1]
            outer = top[2]
            if name == "endif":
                stack.pop()
                return outer
            if top[3]:
                raise P4Error(t.loc, f"#{name} after #else")
            if name == "else":
                top[3] = True
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
            disp = p.name if p.is_relative_to(BUILTIN_INCLUDE.resolve()) else os.path.relpath(p)
            if self.depth >= 50:
                raise P4Error(t.loc, f"#include nesting deeper than 50 files (does {fname!r} include itself?)")
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
        """Evaluate a ``#if``/``#elif`` condition (see :mod:`switch.ppexpr`)."""
        def body(name: str) -> list[str] | None:
            toks = self.macros.get(name)
            if toks is None:
                return None
            text = " ".join(x.text for x in toks)
            try:
                return tokenize(text, loc)
            except P4Error:
                raise P4Error(loc, f"#if: macro {name} ({text!r}) is not an integer expression") from None
        return evaluate(expr, body, lambda n: n in self.macros, loc)


def preprocess(path: str, include_dirs: list[str] | None = None,
               defines: dict[str, str] | None = None) -> list[Token]:
    """Preprocess and lex ``path``; returns the token list ending with an ``eof`` token.  Includes may read
    from ``path``'s directory, ``include_dirs`` and the standard include directory only."""
    pp = Preprocessor(include_dirs, defines)
    p = Path(path)
    if not p.is_file():
        raise P4Error(Loc(str(path), 1, 1), "no such file")
    pp.roots.insert(0, p.resolve().parent)
    pp.run_file(p, str(path))
    last = pp.out[-1].loc if pp.out else Loc(str(path), 1, 1)
    pp.out.append(Token("eof", "", last))
    return pp.out

"""Preprocessor: ``#include``, ``#define`` (object-like and function-like, with ``#`` and ``##``), ``#undef``, ``#ifdef``/``#ifndef``/``#if``/
``#elif``/``#else``/``#endif``, ``#error``; the result is one token stream with original positions.

``#include <core.p4>`` and ``<v1model.p4>`` resolve to this package's own declaration files in
``switch/frontend/p4include`` (written from the P4-16 and v1model specifications, same names as p4c's), so
a program compiles unchanged here and with p4c.  Macros are expanded at token level, which keeps
the position of every token pointing into the file the programmer wrote.

A program may arrive from any P4Runtime client, so its text is untrusted:

* ``#if``/``#elif`` conditions are evaluated by :mod:`switch.frontend.ppexpr` (C preprocessor integer semantics, no
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

from ..errors import Loc, P4Error, unsupported
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
        self.params: dict[str, list[str]] = {}     # parameters of the function-like macros
        self.produced = 0                         # tokens made by macro expansion so far (MAX_TOKENS)
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
        pending: list[Token] = []      # active text since the last directive, expanded at the next one
        for t in toks:
            if t.kind == "eof":
                break
            if t.kind == "directive":
                self._flush(pending)
                active = self._directive(t, stack, active, path)
                continue
            if active:
                pending.append(t)
        self._flush(pending)
        if stack:
            raise P4Error(toks[-1].loc, "missing #endif")
        self.depth -= 1

    def _flush(self, pending: list[Token]) -> None:
        if pending:
            self.out.extend(self._expand(pending, frozenset(), None))
            pending.clear()
            if len(self.out) > MAX_TOKENS:
                raise P4Error(self.out[-1].loc, f"the program exceeds {MAX_TOKENS} tokens after preprocessing")

    def _count(self, n: int, t: Token, loc: Loc) -> None:
        self.produced += n
        if self.produced > MAX_TOKENS:
            raise P4Error(loc, f"macro expansion of {t.text!r} exceeds {MAX_TOKENS} tokens")

    def _expand(self, toks: list[Token], hide: frozenset, at: Loc | None) -> list[Token]:
        """``toks`` with macros expanded (C rules, simplified: a macro is not expanded inside its own expansion;
        a function-like macro's arguments are expanded before they replace its parameters, except next to
        ``#`` or ``##``).  Expanded tokens take the position ``at`` of the outermost macro use, so errors point
        into the file the programmer wrote."""
        out: list[Token] = []
        i = 0
        n = len(toks)
        while i < n:
            x = toks[i]
            m = self.macros.get(x.text) if x.kind == "id" and x.text not in hide else None
            if m is None:
                out.append(x if at is None else Token(x.kind, x.text, at, x.value, x.adjacent))
                i += 1
                continue
            loc = at or x.loc
            params = self.params.get(x.text)
            if params is None:                                   # object-like
                self._count(len(m), x, loc)
                out += self._expand(m, hide | {x.text}, loc)
                i += 1
                continue
            if i + 1 >= n or toks[i + 1].text != "(":             # a function-like name without '(': plain
                out.append(x if at is None else Token(x.kind, x.text, at, x.value, x.adjacent))
                i += 1
                continue
            args, i = self._arguments(toks, i + 1, x)
            if args == [[]] and not params:
                args = []
            if len(args) != len(params):
                raise P4Error(x.loc, f"macro {x.text} expects {len(params)} argument(s), got {len(args)}")
            body = self._substitute(m, dict(zip(params, args)), hide, loc, x)
            self._count(len(body), x, loc)
            out += self._expand(body, hide | {x.text}, loc)
        return out

    @staticmethod
    def _arguments(toks: list[Token], i: int, name: Token) -> tuple[list[list[Token]], int]:
        """The comma-separated arguments of a function-like macro use whose '(' is ``toks[i]``; returns them and
        the index after the closing ')'."""
        args: list[list[Token]] = [[]]
        depth = 0
        i += 1
        while i < len(toks):
            t = toks[i]
            if t.text in ("(", "[", "{"):
                depth += 1
            elif t.text in (")", "]", "}"):
                if depth == 0 and t.text == ")":
                    return args, i + 1
                depth -= 1
            elif t.text == "," and depth == 0:
                args.append([])
                i += 1
                continue
            args[-1].append(t)
            i += 1
        raise P4Error(name.loc, f"unterminated use of macro {name.text} (its arguments must end before the "
                                "next preprocessor directive)")

    def _substitute(self, body: list[Token], args: dict[str, list[Token]], hide: frozenset, loc: Loc,
                    name: Token) -> list[Token]:
        """A function-like macro's body with its parameters replaced; ``#p`` makes a string, ``a ## b`` pastes."""
        if any(t.text == "##" for t in body):
            return [Token(t.kind, t.text, loc, t.value, t.adjacent) for t in self._paste_sequence(body, args)]
        out: list[Token] = []
        j = 0
        while j < len(body):
            b = body[j]
            if b.text == "#" and j + 1 < len(body) and body[j + 1].text in args:
                text = " ".join(t.text for t in args[body[j + 1].text])
                lit = '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
                out.append(Token("str", lit, loc, text))
                j += 2
                continue
            if b.kind in ("id", "kw") and b.text in args:
                out += self._expand(args[b.text], hide, loc)
            else:
                out.append(b)
            j += 1
        return out

    def _paste_sequence(self, body: list[Token], args: dict[str, list[Token]]) -> list[Token]:
        """The body with ``##`` applied: the text of the operands on each side is joined and lexed again."""
        parts: list[str] = []
        glue = False
        for j, b in enumerate(body):
            if b.text == "##":
                glue = True
                continue
            piece = " ".join(t.text for t in args[b.text]) if b.kind in ("id", "kw") and b.text in args else b.text
            if glue and parts:
                parts[-1] += piece
            else:
                parts.append(piece)
            glue = False
        return _lex_body(" ".join(parts), body[0].loc.file if body else "<macro>")

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
            body_text = m2.group(3)
            params = None
            if m2.group(2):          # function-like: NAME(params) body, '(' right after the name
                m3 = re.match(r"([^)]*)\)(.*)$", body_text, re.S)
                if not m3:
                    raise P4Error(t.loc, f"#define {m2.group(1)}(: missing ')' after the parameters")
                params = [x.strip() for x in m3.group(1).split(",")] if m3.group(1).strip() else []
                for x in params:
                    if x == "...":
                        raise unsupported("variadic macro", t.loc)
                    if not re.match(r"[A-Za-z_]\w*$", x):
                        raise P4Error(t.loc, f"#define {m2.group(1)}: bad parameter name {x!r}")
                if len(set(params)) != len(params):
                    raise P4Error(t.loc, f"#define {m2.group(1)}: a parameter is named twice")
                body_text = m3.group(2)
            body = _lex_body(body_text, t.loc.file)
            for x in body:
                x.loc = t.loc
            self.macros[m2.group(1)] = body
            if params is None:
                self.params.pop(m2.group(1), None)
            else:
                self.params[m2.group(1)] = params
            return active
        if name == "undef":
            self.macros.pop(rest.split()[0] if rest else "", None)
            self.params.pop(rest.split()[0] if rest else "", None)
            return active
        if name == "error":
            raise P4Error(t.loc, f"#error {rest}")
        if name in ("pragma", "line", "warning", ""):
            return active
        raise P4Error(t.loc, f"unknown preprocessor directive #{name}")

    def _eval(self, expr: str, loc: Loc) -> bool:
        """Evaluate a ``#if``/``#elif`` condition (see :mod:`switch.frontend.ppexpr`)."""
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


def _lex_body(text: str, file: str) -> list[Token]:
    """Tokens of a macro body (a leading ``#`` is the stringify operator here, not a directive; ``##`` is one
    token, the paste operator)."""
    toks = [x for x in lex(";" + text, file)[1:] if x.kind != "eof"]
    out: list[Token] = []
    for x in toks:
        if x.text == "#" and out and out[-1].text == "#" and out[-1].loc.line == x.loc.line \
                and out[-1].loc.col + 1 == x.loc.col:
            out[-1] = Token("op", "##", out[-1].loc)
        else:
            out.append(x)
    return out


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

"""The ``#if``/``#elif`` expression evaluator of the preprocessor, with C preprocessor integer semantics.

Why a real evaluator: a P4 program may be pushed by any P4Runtime client, so the condition of an ``#if`` is
untrusted input.  It is tokenised and parsed here (no Python ``eval``), every value is a 64-bit integer as in
C's ``intmax_t``/``uintmax_t`` (so no expression can build a huge number), and every error is a located
:class:`~switch.errors.P4Error`.

Supported (ISO C 6.10.1): integer literals (decimal, ``0x`` hex, ``0`` octal, ``0b`` binary, with ``u``/``l``
suffixes), ``'c'`` character constants, ``defined NAME`` and ``defined(NAME)``, object-like macros (expanded
before evaluation, with the usual rule that a macro is not expanded inside its own expansion), identifiers
left after expansion are 0, and the operators ``! ~ unary+ unary-  * / %  + -  << >>  < <= > >=  == !=  &  ^
|  &&  ||  ?:`` with C precedence, associativity, short circuits and the usual arithmetic conversions (an
operand with a ``u`` suffix makes the operation unsigned).  Division or remainder by zero in an evaluated
operand is an error; shifts by a negative count shift the other way, by 64 or more give 0 (or -1 for a
negative value shifted right), as GCC does.  There is no exponentiation: ``**`` is a syntax error.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from ..errors import Loc, P4Error

MASK64 = (1 << 64) - 1
#: Tokens an expression may hold after macro expansion (a guard against macros that double at each level).
MAX_TOKENS = 10_000

_TOKEN = re.compile(
    r"\s*(?:(?P<num>(?:0[xX][0-9a-fA-F]+|0[bB][01]+|\d+)[uUlL]*)"
    r"|(?P<chr>'(?:[^'\\\n]|\\.)')"
    r"|(?P<id>[A-Za-z_]\w*)"
    r"|(?P<op><<|>>|<=|>=|==|!=|&&|\|\||[-+*/%<>&^|!~?:()]))")
_ESCAPES = {"n": 10, "t": 9, "r": 13, "0": 0, "\\": 92, "'": 39, '"': 34, "a": 7, "b": 8, "f": 12, "v": 11}


@dataclass(frozen=True, slots=True)
class Value:
    """A preprocessor value: the integer (already reduced to its type's range) and whether it is unsigned."""

    v: int
    unsigned: bool = False

    @staticmethod
    def of(v: int, unsigned: bool) -> "Value":
        """Reduce ``v`` modulo 2**64 into the range of intmax_t or uintmax_t."""
        v &= MASK64
        if not unsigned and v >> 63:
            v -= 1 << 64
        return Value(v, unsigned)


def tokenize(text: str, loc: Loc) -> list[str]:
    """Split an ``#if`` expression into tokens; anything else (strings, ``**``, ``=``...) is reported."""
    out: list[str] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            bad = text[pos:].lstrip()[:20]
            raise P4Error(loc, f"#if: unexpected {bad!r} in expression {_quote(text)}")
        out.append(m.group(m.lastgroup))
        pos = m.end()
    return out


def _quote(text: str, limit: int = 60) -> str:
    """The expression as an error message quotes it (long ones cut)."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


def expand(tokens: list[str], macro: Callable[[str], list[str] | None], loc: Loc) -> list[str]:
    """Expand object-like macros in ``tokens`` (``macro(name)`` gives a macro's body as expression tokens, or
    None for a name that is not a macro).

    ``defined NAME`` / ``defined(NAME)`` keep their operand unexpanded.  Iterative, with the set of macros
    being expanded at each point (a macro never expands inside itself) and a cap of :data:`MAX_TOKENS`."""
    out: list[str] = []
    # work stack of (token, names being expanded around it); reversed so pop() yields source order
    work: list[tuple[str, frozenset]] = [(t, frozenset()) for t in reversed(tokens)]
    while work:
        t, hide = work.pop()
        if t == "defined":
            out.append(t)
            # copy the operand untouched: NAME or ( NAME )
            if work and work[-1][0] == "(":
                for _ in range(3):
                    if work:
                        out.append(work.pop()[0])
            elif work:
                out.append(work.pop()[0])
            continue
        body = macro(t) if _is_ident(t) and t not in hide else None
        if body is not None:
            inner = hide | {t}
            work.extend((x, inner) for x in reversed(body))
            if len(work) + len(out) > MAX_TOKENS:
                raise P4Error(loc, f"#if: expression longer than {MAX_TOKENS} tokens after macro expansion")
            continue
        out.append(t)
        if len(out) > MAX_TOKENS:
            raise P4Error(loc, f"#if: expression longer than {MAX_TOKENS} tokens after macro expansion")
    return out


def _is_ident(t: str) -> bool:
    return t[0].isalpha() or t[0] == "_"


# ---- parsing: tokens -> a tree of tuples, evaluated lazily so that && || ?: short-circuit ------------------
_BINARY = {"||": 1, "&&": 2, "|": 3, "^": 4, "&": 5, "==": 6, "!=": 6, "<": 7, "<=": 7, ">": 7, ">=": 7,
           "<<": 8, ">>": 8, "+": 9, "-": 9, "*": 10, "/": 10, "%": 10}


class _Parser:
    def __init__(self, toks: list[str], defined: Callable[[str], bool], loc: Loc, text: str):
        self.toks, self.i, self.defined, self.loc, self.text = toks, 0, defined, loc, text

    def err(self, msg: str) -> P4Error:
        return P4Error(self.loc, f"#if: {msg} in expression {_quote(self.text)}")

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> str:
        t = self.peek()
        if t is None:
            raise self.err("unexpected end")
        self.i += 1
        return t

    def expect(self, t: str) -> None:
        got = self.peek()
        if got != t:
            raise self.err(f"expected '{t}', found {repr(got) if got is not None else 'the end'}")
        self.i += 1

    def parse(self):
        if not self.toks:
            raise self.err("missing expression")
        e = self.conditional()
        if self.peek() is not None:
            raise self.err(f"unexpected {self.peek()!r}")
        return e

    def conditional(self):
        c = self.binary(1)
        if self.peek() == "?":
            self.i += 1
            a = self.conditional()
            self.expect(":")
            b = self.conditional()
            return ("?", c, a, b)
        return c

    def binary(self, min_prec: int):
        left = self.unary()
        while True:
            op = self.peek()
            prec = _BINARY.get(op or "")
            if prec is None or prec < min_prec:
                return left
            self.i += 1
            right = self.binary(prec + 1)          # every binary operator of C is left-associative
            left = (op, left, right)

    def unary(self):
        t = self.take()
        if t in ("!", "~", "-", "+"):
            return ("u" + t, self.unary())
        if t == "(":
            e = self.conditional()
            self.expect(")")
            return e
        if t == "defined":
            paren = self.peek() == "("
            if paren:
                self.i += 1
            name = self.take()
            if not _is_ident(name):
                raise self.err(f"'defined' needs a macro name, found {name!r}")
            if paren:
                self.expect(")")
            return ("lit", Value(int(self.defined(name))))
        if t[0].isdigit():
            return ("lit", self._number(t))
        if t[0] == "'":
            return ("lit", Value(self._char(t)))
        if _is_ident(t):
            return ("lit", Value(0))              # an identifier that is not a macro is 0, as in C
        raise self.err(f"unexpected {t!r}")

    def _number(self, t: str) -> Value:
        m = re.fullmatch(r"(0[xX][0-9a-fA-F]+|0[bB][01]+|\d+)([uUlL]*)", t)
        digits, suffix = m.group(1), m.group(2).lower()
        if suffix not in ("", "u", "l", "ul", "lu", "ll", "ull", "llu"):
            raise self.err(f"invalid suffix on integer literal {t!r}")
        low = digits.lower()
        if low.startswith("0x"):
            v, base = int(digits[2:], 16), 16
        elif low.startswith("0b"):
            v, base = int(digits[2:], 2), 2
        elif len(digits) > 1 and digits[0] == "0":
            if not re.fullmatch(r"[0-7]+", digits):
                raise self.err(f"invalid digit in octal literal {t!r}")
            v, base = int(digits, 8), 8
        else:
            v, base = int(digits), 10
        if v > MASK64:
            raise self.err(f"integer literal {t!r} is too large (64 bits at most)")
        # C: a decimal literal without 'u' that does not fit intmax_t is an error; others become unsigned
        unsigned = "u" in suffix or v >> 63 != 0
        if unsigned and "u" not in suffix and base == 10:
            raise self.err(f"integer literal {t!r} is too large for a signed 64-bit value")
        return Value.of(v, unsigned)

    def _char(self, t: str) -> int:
        body = t[1:-1]
        if body[0] != "\\":
            return ord(body)
        if body[1] in _ESCAPES:
            return _ESCAPES[body[1]]
        raise self.err(f"unsupported escape in character constant {t!r}")


def _shift(a: Value, n: int, left: bool) -> Value:
    if n < 0:
        n, left = -n, not left
    if left:
        return Value.of(a.v << min(n, 64), a.unsigned)
    if n >= 64:
        return Value.of(-1 if a.v < 0 else 0, a.unsigned)
    return Value.of(a.v >> n, a.unsigned)


def _eval(e, err: Callable[[str], P4Error]) -> Value:
    op = e[0]
    if op == "lit":
        return e[1]
    if op == "u!":
        return Value(int(_eval(e[1], err).v == 0))
    if op == "u~":
        a = _eval(e[1], err)
        return Value.of(~a.v, a.unsigned)
    if op == "u-":
        a = _eval(e[1], err)
        return Value.of(-a.v, a.unsigned)
    if op == "u+":
        return _eval(e[1], err)
    if op == "&&":
        return Value(int(_eval(e[1], err).v != 0 and _eval(e[2], err).v != 0))
    if op == "||":
        return Value(int(_eval(e[1], err).v != 0 or _eval(e[2], err).v != 0))
    if op == "?":
        c = _eval(e[1], err).v != 0
        # the result has the common type of both branches; only the chosen one is evaluated
        r = _eval(e[2] if c else e[3], err)
        return Value.of(r.v, r.unsigned or _unsigned_hint(e[3] if c else e[2]))
    a, b = _eval(e[1], err), _eval(e[2], err)
    if op in ("<<", ">>"):
        return _shift(a, b.v, op == "<<")       # the result has the left operand's type
    u = a.unsigned or b.unsigned
    x, y = (a.v & MASK64, b.v & MASK64) if u else (a.v, b.v)
    if op in ("/", "%"):
        if y == 0:
            raise err("division by zero" if op == "/" else "remainder by zero")
        q = abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)     # C truncates toward zero
        return Value.of(q if op == "/" else x - q * y, u)
    if op in ("<", "<=", ">", ">=", "==", "!="):
        r = {"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y, "==": x == y, "!=": x != y}[op]
        return Value(int(r))
    r = {"*": x * y, "+": x + y, "-": x - y, "&": x & y, "|": x | y, "^": x ^ y}[op]
    return Value.of(r, u)


def _unsigned_hint(e) -> bool:
    """Whether an unevaluated branch of ``?:`` has an unsigned type (literals and arithmetic on them)."""
    op = e[0]
    if op == "lit":
        return e[1].unsigned
    if op in ("u!", "&&", "||", "<", "<=", ">", ">=", "==", "!="):
        return False
    if op in ("u~", "u-", "u+"):
        return _unsigned_hint(e[1])
    if op in ("<<", ">>"):
        return _unsigned_hint(e[1])
    if op == "?":
        return _unsigned_hint(e[2]) or _unsigned_hint(e[3])
    return _unsigned_hint(e[1]) or _unsigned_hint(e[2])


def evaluate(text: str, macro: Callable[[str], list[str] | None], defined: Callable[[str], bool],
             loc: Loc) -> bool:
    """Whether the ``#if`` condition ``text`` holds.  ``macro(name)`` gives an object-like macro's body as
    expression tokens (see :func:`tokenize`) or None; ``defined(name)`` says whether a name is a macro.
    Errors: P4Error at ``loc`` (the directive) naming the problem and quoting the expression."""
    toks = expand(tokenize(text, loc), macro, loc)
    p = _Parser(toks, defined, loc, text.strip())
    try:
        return _eval(p.parse(), p.err).v != 0
    except RecursionError:
        raise p.err("expression nested too deeply") from None

"""P4-16 lexer: source text -> tokens with positions.

Preprocessor directives are returned as single ``directive`` tokens (the whole logical line) so
that :mod:`switch.frontend.preprocess` can act on them with exact positions.  ``>>`` is never produced:
two ``>`` tokens with ``adjacent`` set let the parser tell a shift from nested generics
(``bit<8>>``), as the P4-16 grammar requires.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import Loc, P4Error

KEYWORDS = frozenset("""
abstract action apply bit bool const control default else entries enum error exit extern false
header header_union if in inout int key list match_kind out package parser return select state
string struct switch table transition true tuple type typedef varbit void value_set actions
""".split()) - {"actions", "key", "entries"}  # table property names stay plain identifiers


@dataclass(slots=True)
class Token:
    """One token. ``kind`` is id, kw, int, str, op, directive or eof."""

    kind: str
    text: str
    loc: Loc
    value: object = None      # int: (value, width|None, signed)
    adjacent: bool = False    # op '>' immediately followed by another '>'

    def __repr__(self) -> str:
        return f"Token({self.kind},{self.text!r},{self.loc})"


#: The longest integer literal accepted (the widest bit<W> the checker accepts is 4096 bits).
MAX_LITERAL_BITS = 8192

#: p4c's lexer makes each compound assignment operator (P4-16 1.2.4: ``+=`` ... ``|-|=``) one token, as here
_OPS = sorted("""
&&& |+| |-| ... .. ++ << <= >= == != && || ( ) { } [ ] < > ; : , . = + - * / % & | ^ ~ ! ? @ #
+= -= *= /= %= &= |= ^= <<= >>= |+|= |-|=
""".split(), key=len, reverse=True)
_OP_RE = "|".join(re.escape(o) for o in _OPS)
_TOKEN_RE = re.compile(
    r"(?P<ws>[ \t\r\f\v]+)|(?P<nl>\n)|(?P<lc>//[^\n]*)|(?P<bc>/\*.*?\*/)"
    r"|(?P<num>\d+[ws](?:0[xX][0-9a-fA-F_]+|0[bB][01_]+|0[oO][0-7_]+|0[dD][0-9_]+|[0-9_]+)"
    r"|0[xX][0-9a-fA-F_]+|0[bB][01_]+|0[oO][0-7_]+|0[dD][0-9_]+|\d[0-9_]*)"
    r"|(?P<id>[A-Za-z_][A-Za-z0-9_]*)|(?P<str>\"(?:[^\"\\\n]|\\.)*\")|(?P<op>" + _OP_RE + ")",
    re.S,
)


def parse_int(text: str) -> tuple[int, int | None, bool]:
    """Decode a P4 integer literal such as ``8w0xff``, ``4s-1``-style parts or ``0b1010``."""
    width = None
    signed = False
    m = re.match(r"(\d+)([ws])(.*)$", text)
    if m and not text.lower().startswith(("0x", "0b", "0o", "0d")):
        width, signed, text = int(m.group(1)), m.group(2) == "s", m.group(3)
    t = text.replace("_", "")
    low = t.lower()
    if low.startswith("0x"):
        v = int(t[2:], 16)
    elif low.startswith("0b"):
        v = int(t[2:], 2)
    elif low.startswith("0o"):
        v = int(t[2:], 8)
    elif low.startswith("0d"):
        v = int(t[2:], 10)
    else:
        v = int(t, 10)
    return v, width, signed


def lex(text: str, filename: str) -> list[Token]:
    """Tokenise one file; directives become ``directive`` tokens holding the logical line."""
    toks: list[Token] = []
    pos = 0
    line = 1
    line_start = 0
    at_line_start = True
    n = len(text)
    while pos < n:
        col = pos - line_start + 1
        if at_line_start:
            m = re.match(r"[ \t]*#", text[pos:pos + 200])
            if m:
                # directive: up to end of line, honouring backslash continuations
                start_loc = Loc(filename, line, col + m.end() - 1)
                end = pos
                parts = []
                while True:
                    nl = text.find("\n", end)
                    if nl < 0:
                        nl = n
                    seg = text[end:nl]
                    if seg.endswith("\\"):
                        parts.append(seg[:-1])
                        end = nl + 1
                        line += 1
                        line_start = end
                        continue
                    parts.append(seg)
                    end = nl
                    break
                body = " ".join(parts).strip()[1:].strip()
                body = re.sub(r"//.*$", "", body)
                body = re.sub(r"/\*.*?\*/", " ", body).strip()
                toks.append(Token("directive", body, start_loc))
                pos = end
                continue
        m = _TOKEN_RE.match(text, pos)
        if not m:
            raise P4Error(Loc(filename, line, col), f"unexpected character {text[pos]!r}")
        kind = m.lastgroup
        s = m.group(0)
        if kind == "nl":
            line += 1
            line_start = m.end()
            at_line_start = True
            pos = m.end()
            continue
        if kind == "bc":
            k = s.count("\n")
            if k:
                line += k
                line_start = pos + s.rfind("\n") + 1
            pos = m.end()
            continue
        if kind in ("ws", "lc"):
            pos = m.end()
            continue
        at_line_start = False
        loc = Loc(filename, line, col)
        if kind == "num":
            try:
                value = parse_int(s)
            except ValueError:            # more digits than Python converts (4300)
                value = None
            if value is None or value[0].bit_length() > MAX_LITERAL_BITS:
                raise P4Error(loc, f"integer literal longer than {MAX_LITERAL_BITS} bits")
            toks.append(Token("int", s, loc, value))
        elif kind == "id":
            toks.append(Token("kw" if s in KEYWORDS else "id", s, loc))
        elif kind == "str":
            try:
                value = bytes(s[1:-1], "utf-8").decode("unicode_escape")
            except UnicodeDecodeError as e:
                raise P4Error(loc, f"invalid escape sequence in string literal: {e.reason}") from None
            toks.append(Token("str", s, loc, value))
        else:
            t = Token("op", s, loc)
            if s == ">" and m.end() < n and text[m.end()] == ">":
                t.adjacent = True
            toks.append(t)
        pos = m.end()
    if pos > n:
        pass
    toks.append(Token("eof", "", Loc(filename, line, pos - line_start + 1)))
    return toks

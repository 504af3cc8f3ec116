"""Byte layouts for the code generator: how a header's fields map onto ``struct`` formats, and how a
field list's ones' complement checksum folds into a sum of small integers.

Why: composing a header as one big integer (``(a << 152) | (b << 146) | ...``) and slicing it apart
again costs one multi-digit integer operation per field.  ``struct.unpack_from`` / ``struct.pack``
convert a whole header in one C call, leaving only shifts and masks on small integers for fields
that are not byte-aligned.  Everything here is pure and works on widths in bits, most significant
field first, so the generated code can be checked against the big-integer reference directly
(tests/switch/test_fastpath.py).
"""
from __future__ import annotations

from dataclasses import dataclass

_CODES = ((64, "Q"), (32, "I"), (16, "H"), (8, "B"))


@dataclass(frozen=True)
class Plan:
    """A header's fields as big-endian struct parts.

    ``fmt`` is the struct format (``!`` prefix included); ``parts[j] = (start, end)`` are the header
    bit positions (0 = most significant bit of the header) that unpacked value ``j`` covers;
    ``fields[i] = (start, end)`` likewise for field ``i``.
    """

    fmt: str
    parts: tuple[tuple[int, int], ...]
    fields: tuple[tuple[int, int], ...]


def struct_plan(widths: list[int]) -> Plan | None:
    """Plan for fields of the given widths, or None when the total is not a whole number of bytes
    (or is zero).  Byte-aligned runs of fields become one chunk each; a chunk is split greedily into
    8-, 4-, 2- and 1-byte parts, so a 48-bit MAC is an ``I`` and an ``H``."""
    total = sum(widths)
    if total == 0 or total % 8:
        return None
    fields = []
    bounds = [0]
    pos = 0
    for w in widths:
        fields.append((pos, pos + w))
        pos += w
        if pos % 8 == 0 and pos != bounds[-1]:
            bounds.append(pos)
    fmt = "!"
    parts = []
    for a, b in zip(bounds, bounds[1:]):
        p = a
        while p < b:
            for nbits, code in _CODES:
                if b - p >= nbits:
                    fmt += code
                    parts.append((p, p + nbits))
                    p += nbits
                    break
    return Plan(fmt, tuple(parts), tuple(fields))


def _mask(n: int) -> int:
    return (1 << n) - 1


def unpack_field(plan: Plan, i: int, names: list[str]) -> str:
    """Python expression for field ``i`` from the unpacked parts, named ``names[j]``."""
    fs, fe = plan.fields[i]
    if fe == fs:
        return "0"
    pieces = []
    for j, (ps, pe) in enumerate(plan.parts):
        a, b = max(fs, ps), min(fe, pe)
        if a >= b:
            continue
        code = names[j]
        if pe - b:
            code = f"({code} >> {pe - b})"
        if a > ps:                        # bits above the field in this part
            code = f"({code} & {_mask(b - a)})"
        if fe - b:
            code = f"({code} << {fe - b})"
        pieces.append(code)
    return pieces[0] if len(pieces) == 1 else "(" + " | ".join(pieces) + ")"


def pack_part(plan: Plan, j: int, codes: list[str]) -> str:
    """Python expression for unpacked part ``j`` from the fields' (unsigned, in-range) values."""
    ps, pe = plan.parts[j]
    pieces = []
    for (fs, fe), code in zip(plan.fields, codes):
        a, b = max(fs, ps), min(fe, pe)
        if a >= b:
            continue
        if fe - b:
            code = f"({code} >> {fe - b})"
        if a > fs:                        # field bits above this part belong to an earlier part
            code = f"({code} & {_mask(b - a)})"
        if pe - b:
            code = f"({code} << {pe - b})"
        pieces.append(code)
    if not pieces:
        return "0"
    return pieces[0] if len(pieces) == 1 else "(" + " | ".join(pieces) + ")"


def csum16_terms(items: list[tuple[str, int]]) -> list[str]:
    """Terms whose sum is congruent, modulo 0xFFFF, to the concatenated field list zero-padded to
    whole 16-bit words -- and is zero exactly when every field is zero.  Since 2**16 == 1 (mod
    0xFFFF), a field at bit shift ``k`` contributes ``value << (k % 16)``: small integers instead of
    one integer as wide as the whole list.  ``items`` are (unsigned code, width) pairs, most
    significant first, with static widths."""
    total = sum(w for _, w in items)
    shift = total + ((-total) & 15)
    out = []
    for code, w in items:
        shift -= w
        if w == 0:
            continue
        k = shift % 16
        out.append(f"({code} << {k})" if k else code)
    return out


def csum16_fold(t: int) -> int:
    """Reference for the generated fold: csum16 of a list whose :func:`csum16_terms` sum is ``t``."""
    r = t % 0xFFFF
    if r:
        return 0xFFFF - r
    return 0 if t else 0xFFFF

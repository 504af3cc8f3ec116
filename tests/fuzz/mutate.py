"""Deterministic mutations of DLCP datagrams, shared by the transport and the switch fuzz campaigns.

A mutation takes a valid datagram (header of ``wire.HEADER_LEN`` bytes, then payload) and returns a hostile one: bit flips, one header
field (any of :data:`host.wire.FIELDS`) set to a boundary value of its width or next to its genuine value, the
datagram cut short or extended, a byte range overwritten, or one datagram's header spliced onto another's payload.
One to three of them are stacked. Sequence-level mutations (duplication, reordering, replays of other transfers)
are the campaigns' business: they choose which datagrams, in which order, how often.

Everything draws from the ``random.Random`` it is given, so a case is reproduced by its seed.
"""
from __future__ import annotations

import random
from typing import Sequence

from host import wire

__all__ = ["FIELD_NAMES", "boundary_values", "get_field", "set_field", "mutate", "OPERATORS"]

FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in wire.FIELDS)
_BITS = {f.name: f.bits for f in wire.FIELDS}
_WORDS = {f.name: wire.field_word(f.name) for f in wire.FIELDS}  # name -> ("w<i>", shift)


def boundary_values(name: str, genuine: int) -> list[int]:
    """The values a field is set to: 0, 1, the largest and the largest - 1 of its width, the sign bit, and the
    genuine value's neighbours (wrapped to the width)."""
    top = (1 << _BITS[name]) - 1
    return sorted({0, 1, top, top - 1 & top, 1 << (_BITS[name] - 1), (genuine + 1) & top, (genuine - 1) & top,
                   (genuine * 2) & top, genuine ^ top})


def get_field(dgram: bytes | bytearray, name: str) -> int:
    """The value of header field ``name`` of ``dgram`` (which must hold a whole header)."""
    col, shift = _WORDS[name]
    word = wire.WORD_STRUCT.unpack_from(dgram)[int(col[1:])]
    return (word >> shift) & ((1 << _BITS[name]) - 1)


def set_field(dgram: bytearray, name: str, value: int) -> None:
    """Write ``value`` (masked to the field's width) into header field ``name`` of ``dgram`` in place, leaving the
    other fields of its word as they were."""
    col, shift = _WORDS[name]
    i = int(col[1:])
    words = list(wire.WORD_STRUCT.unpack_from(dgram))
    mask = ((1 << _BITS[name]) - 1) << shift
    words[i] = (words[i] & ~mask) | ((value << shift) & mask)
    wire.WORD_STRUCT.pack_into(dgram, 0, *words)


def _bitflip(d: bytearray, rng: random.Random, pool: Sequence[bytes]) -> bytearray:
    if not d:
        return d
    for _ in range(rng.randint(1, 8)):
        # most flips in the header, where the parser decides
        i = rng.randrange(min(len(d), wire.HEADER_LEN)) if rng.random() < 0.7 else rng.randrange(len(d))
        d[i] ^= 1 << rng.randrange(8)
    return d


def _field(d: bytearray, rng: random.Random, pool: Sequence[bytes]) -> bytearray:
    if len(d) < wire.HEADER_LEN:
        return d
    name = rng.choice(FIELD_NAMES)
    genuine = get_field(d, name)
    value = rng.choice(boundary_values(name, genuine)) if rng.random() < 0.85 else rng.getrandbits(_BITS[name])
    set_field(d, name, value)
    return d


def _truncate(d: bytearray, rng: random.Random, pool: Sequence[bytes]) -> bytearray:
    if not d:
        return d
    cuts = [0, 1, wire.HEADER_LEN - 1, wire.HEADER_LEN, wire.HEADER_LEN + 1, len(d) - 1, rng.randrange(len(d))]
    return d[:min(len(d) - 1, max(0, rng.choice(cuts)))]


def _extend(d: bytearray, rng: random.Random, pool: Sequence[bytes]) -> bytearray:
    n = rng.choice((1, 2, 4, 8, rng.randint(1, 64), rng.randint(64, 1400)))
    return d + (bytes(n) if rng.random() < 0.3 else rng.randbytes(n))


def _overwrite(d: bytearray, rng: random.Random, pool: Sequence[bytes]) -> bytearray:
    if not d:
        return d
    a = rng.randrange(len(d))
    b = min(len(d), a + rng.randint(1, 16))
    d[a:b] = rng.choice((bytes(b - a), b"\xff" * (b - a), rng.randbytes(b - a)))
    return d


def _splice(d: bytearray, rng: random.Random, pool: Sequence[bytes]) -> bytearray:
    """This datagram's header on another one's payload, or the other way round."""
    if not pool:
        return d
    other = rng.choice(pool)
    if rng.random() < 0.5:
        return bytearray(d[:wire.HEADER_LEN] + other[wire.HEADER_LEN:])
    return bytearray(other[:wire.HEADER_LEN] + d[wire.HEADER_LEN:])


#: (name, operator, weight): field-wise mutations are the most frequent, as they reach the deepest checks.
OPERATORS = (("bitflip", _bitflip, 3), ("field", _field, 6), ("truncate", _truncate, 1), ("extend", _extend, 1),
             ("overwrite", _overwrite, 1), ("splice", _splice, 1))


def mutate(dgram: bytes, rng: random.Random, pool: Sequence[bytes] = ()) -> tuple[bytes, list[str]]:
    """One to three stacked mutations of ``dgram``; returns the result and the operators' names (``pool``: other
    datagrams a splice may borrow from)."""
    d = bytearray(dgram)
    names = []
    ops = [o for o in OPERATORS]
    weights = [w for _n, _f, w in ops]
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3))):
        name, op, _w = rng.choices(ops, weights)[0]
        d = op(d, rng, pool)
        names.append(name)
    return bytes(d), names

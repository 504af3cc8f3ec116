"""The DLCP wire format: the one definition of the DLCP header, shared by the host stack and the P4 program.

A DLCP datagram is UDP to port :data:`UDP_PORT` carrying a fixed 48-byte header (network byte order) and then a
payload whose meaning depends on the message type (see ``docs/wire-format.md``). The header is declared once, as
the ordered list :data:`FIELDS`; everything else is derived from it:

* :class:`Header` packs/unpacks one header (``struct``),
* :data:`WIRE_DTYPE` / :func:`pack_batch` / :func:`unpack_batch` do a batch of headers at once (numpy),
* ``host.scapy_dlcp`` builds the scapy dissector layer from :data:`FIELDS`,
* ``p4src/include/dlcp_headers.p4`` declares the same header; a test keeps the two in lock-step.

Every malformed input raises :class:`WireError`, which names the offending field: a worker or a switch can log
and count it, never crash on an ``IndexError`` or ``struct.error``.

The header's last field, ``tag``, authenticates the datagram: :func:`packet_tag` is a MAC under the job's 128-bit
key of every byte of the datagram but the tag itself, SipHash-2-4 over the header and a universal hash (NH) of the
payload (this module holds the reference implementation; the transport computes and checks it in C,
``host/transport/_tag.h``). A job without a key sends 0 there.
"""

from __future__ import annotations

import enum
import functools
import struct
from dataclasses import dataclass, fields as dc_fields
from typing import ClassVar, Iterator, NamedTuple

import numpy as np

__all__ = [
    "UDP_PORT", "VERSION", "HEADER_LEN", "FIELDS", "Field", "MsgType", "Flag", "DType", "Header", "WireError",
    "WIRE_DTYPE", "WORD_STRUCT", "FIELDS_DTYPE", "field_word", "pack_batch", "unpack_batch", "headers_to_batch",
    "batch_row", "parse_datagram", "pack_bitmap", "unpack_bitmap",
    "ECN_NOT_ECT", "ECN_ECT0", "ECN_CE", "dscp_for_priority", "TAG_AT", "KEY_LEN", "siphash24", "packet_tag",
    "tag_schedule", "nh_hash", "NH_MAX_PAYLOAD",
]

#: The well-known UDP port DLCP datagrams are sent *to*; the P4 parser recognises DLCP by this destination port.
#: Below Linux's ephemeral range (32768-60999) so no unrelated socket is ever given it.
UDP_PORT = 19400
#: The only header version this code speaks. A different version is rejected as ``WireError(field="version")``.
VERSION = 1


class Field(NamedTuple):
    """One header field: name, width in bits, meaning. Order in :data:`FIELDS` is wire order."""

    name: str
    bits: int
    doc: str


#: The DLCP header, in wire order. Widths sum to 384 bits = 48 bytes; every multi-byte field is naturally aligned
#: (the 64-bit tag at byte 40), so a payload that follows the header at an 8-byte aligned address is itself aligned.
#: A transfer is named by a 64-bit id, ``transfer_hi << 32 | transfer_id``: wide enough that no id space of a job
#: (groups, collectives, point-to-point messages; see ``host.collectives``) wraps in its life.
FIELDS: tuple[Field, ...] = (
    Field("version", 4, "header version, VERSION"),
    Field("msg_type", 4, "MsgType: data, ack, nack (bitmap), control"),
    Field("flags", 8, "Flag bits: drop-eligible, ECN-echo, retransmission, last; others must be 0"),
    Field("priority", 3, "switch queue, 0 lowest (as v1model standard_metadata.priority)"),
    Field("mag_class", 3, "magnitude class of the payload, 0 smallest .. 7 largest"),
    Field("reserved", 2, "must be 0"),
    Field("dtype", 8, "DType of the payload elements"),
    Field("layer", 16, "layer index of the tensor (0 = nearest the input)"),
    Field("rank", 16, "sender rank"),
    Field("job_id", 32, "job identifier; packets of other jobs are dropped by receivers"),
    Field("transfer_id", 32, "low 32 bits of the transfer this packet belongs to, unique per (job, sender)"),
    Field("eligible", 32, "DATA: drop-eligible packets in the transfer, which take seqs 0..eligible-1; else 0"),
    Field("seq", 32, "packet sequence within the transfer; for NACK: first packet the bitmap covers"),
    Field("total", 32, "number of packets in the transfer"),
    Field("offset", 32, "byte offset of the payload within the tensor (transfers are < 4 GiB)"),
    Field("count", 16, "elements in this packet's payload; for ACK/NACK: bits in the bitmap"),
    Field("nonce", 16, "per-job nonce chosen at rendezvous; stale packets of an earlier run are dropped"),
    Field("transfer_hi", 32, "high 32 bits of the transfer id (0 for ids below 2^32)"),
    Field("tag", 64, "keyed tag: SipHash-2-4 under the job's key of the datagram without this field; 0 unkeyed"),
)

_BY_NAME = {f.name: f for f in FIELDS}


class MsgType(enum.IntEnum):
    """Message types. DATA carries tensor elements; ACK/NACK carry a packet bitmap; CONTROL carries bytes."""

    DATA = 0
    ACK = 1
    NACK = 2
    CONTROL = 3


class Flag(enum.IntFlag):
    """Header flag bits (bit 0 is the least significant bit of the flags byte)."""

    NONE = 0
    DROP_ELIGIBLE = 0x01  # the switch may drop this packet under congestion (bounded loss)
    ECN_ECHO = 0x02  # in ACK/NACK: the data this acknowledges arrived with CE marks
    RETRANSMIT = 0x04  # a retransmission of an earlier packet
    LAST = 0x08  # the last packet of the transfer (highest seq)


_FLAGS_VALID = int(Flag.DROP_ELIGIBLE | Flag.ECN_ECHO | Flag.RETRANSMIT | Flag.LAST)


class DType(enum.IntEnum):
    """Payload element types. bf16 travels as its raw 16 bits (numpy has no bfloat16)."""

    UINT8 = 0
    INT8 = 1
    INT16 = 2
    INT32 = 3
    INT64 = 4
    FLOAT16 = 5
    BFLOAT16 = 6
    FLOAT32 = 7
    FLOAT64 = 8
    BOOL = 9

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self]

    @property
    def numpy(self) -> np.dtype:
        """The numpy dtype a payload is viewed as (big-endian on the wire is NOT used: payloads are host order,
        little-endian, as every supported host is; bf16 is viewed as uint16)."""
        return _NUMPY[self]


_ITEMSIZE = {DType.UINT8: 1, DType.INT8: 1, DType.INT16: 2, DType.INT32: 4, DType.INT64: 8, DType.FLOAT16: 2,
             DType.BFLOAT16: 2, DType.FLOAT32: 4, DType.FLOAT64: 8, DType.BOOL: 1}
_NUMPY = {DType.UINT8: np.dtype("<u1"), DType.INT8: np.dtype("<i1"), DType.INT16: np.dtype("<i2"),
          DType.INT32: np.dtype("<i4"), DType.INT64: np.dtype("<i8"), DType.FLOAT16: np.dtype("<f2"),
          DType.BFLOAT16: np.dtype("<u2"), DType.FLOAT32: np.dtype("<f4"), DType.FLOAT64: np.dtype("<f8"),
          DType.BOOL: np.dtype("?")}

# ECN codepoints of the IP header (RFC 3168): protected packets are sent ECT(0), eligible ones Not-ECT.
ECN_NOT_ECT = 0
ECN_ECT0 = 2
ECN_CE = 3


def dscp_for_priority(priority: int) -> int:
    """DSCP a host writes in the IP header to mirror a DLCP priority: class selector CSp (p << 3), so switches
    that classify by DSCP alone (and the P4 program's DSCP map for non-DLCP traffic) serve it the same way."""
    if not 0 <= priority <= 7:
        raise WireError("priority", f"must be 0..7, got {priority}")
    return priority << 3


class WireError(ValueError):
    """A DLCP header or datagram is malformed. ``field`` names the offending field ("header" for length)."""

    def __init__(self, field: str, message: str, index: int | None = None):
        self.field = field
        self.index = index
        where = f"packet {index}: " if index is not None else ""
        super().__init__(f"DLCP {where}field {field!r}: {message}")


# --- derived layout: fields grouped into byte-aligned words -------------------------------------------------

class _Word(NamedTuple):
    offset: int  # byte offset in the header
    size: int  # bytes: 1, 2, 4 or 8
    members: tuple[tuple[str, int, int], ...]  # (field name, shift within word, width)


def _layout(fields: tuple[Field, ...]) -> tuple[_Word, ...]:
    """Group consecutive fields into 8/16/32/64-bit words, most significant bits first (network order); every word
    naturally aligned."""
    words: list[_Word] = []
    group: list[Field] = []
    offset = 0
    for f in fields:
        group.append(f)
        bits = sum(g.bits for g in group)
        if bits in (8, 16, 32, 64):
            shift = bits
            members = []
            for g in group:
                shift -= g.bits
                members.append((g.name, shift, g.bits))
            words.append(_Word(offset, bits // 8, tuple(members)))
            offset += bits // 8
            group = []
        elif bits > 64:
            raise AssertionError(f"DLCP layout: fields {[g.name for g in group]} do not fill a word")
    assert not group, "DLCP layout: trailing fields do not fill a byte"
    for w in words:
        assert w.offset % w.size == 0, f"DLCP layout: word at {w.offset} of {w.size} bytes is unaligned"
    assert sum(w.size for w in words) % 8 == 0, "DLCP layout: the header length is a multiple of 8 bytes"
    return tuple(words)


_WORDS = _layout(FIELDS)
HEADER_LEN: int = sum(w.size for w in _WORDS)


def field_word(name: str) -> tuple[str, int]:
    """The :data:`WIRE_DTYPE` column (``"w<i>"``) holding field ``name``, and the field's shift inside that word."""
    for i, w in enumerate(_WORDS):
        for member, shift, _bits in w.members:
            if member == name:
                return f"w{i}", shift
    raise KeyError(f"no DLCP header field {name!r}")

#: The 48-byte header as its 16 big-endian words, for code that reads or writes headers a word at a time (the
#: transport's hot paths: one struct call instead of a Header). ``field_word`` says which word holds a field.
WORD_STRUCT = struct.Struct("!" + "".join({1: "B", 2: "H", 4: "I", 8: "Q"}[w.size] for w in _WORDS))
assert WORD_STRUCT.size == HEADER_LEN == 48

#: The header as it lies on the wire: one big-endian column per word (sub-byte fields share a word).
WIRE_DTYPE = np.dtype([(f"w{i}", f">u{w.size}") for i, w in enumerate(_WORDS)])
#: One column per logical field, as returned by :func:`unpack_batch` and taken by :func:`pack_batch`.
FIELDS_DTYPE = np.dtype([(f.name, "u1" if f.bits <= 8 else "u2" if f.bits <= 16 else "u4" if f.bits <= 32 else "u8")
                         for f in FIELDS])
#: Byte offset of the tag, the header's last field: a datagram's tag covers ``[0, TAG_AT)`` and ``[HEADER_LEN, end)``.
TAG_AT: int = HEADER_LEN - 8
assert _WORDS[-1] == _Word(TAG_AT, 8, (("tag", 0, 64),)), "the tag is the header's last word"
#: Bytes of a job's tag key (SipHash's 128-bit key).
KEY_LEN = 16


@dataclass(frozen=True, slots=True)
class Header:
    """One DLCP header. Construct with keywords; ``pack()`` validates, ``unpack()`` validates."""

    msg_type: MsgType = MsgType.DATA
    flags: Flag = Flag.NONE
    priority: int = 0
    mag_class: int = 0
    dtype: DType = DType.FLOAT32
    layer: int = 0
    rank: int = 0
    job_id: int = 0
    transfer_id: int = 0
    eligible: int = 0
    seq: int = 0
    total: int = 1
    offset: int = 0
    count: int = 0
    nonce: int = 0
    transfer_hi: int = 0
    tag: int = 0
    version: int = VERSION
    reserved: int = 0

    LEN: ClassVar[int] = HEADER_LEN

    def values(self) -> Iterator[int]:
        """Field values in wire order."""
        for f in FIELDS:
            yield int(getattr(self, f.name))

    def pack(self) -> bytes:
        buf = bytearray(HEADER_LEN)
        self.pack_into(buf, 0)
        return bytes(buf)

    def pack_into(self, buf, offset: int = 0) -> None:
        """Write the header into ``buf[offset:offset+HEADER_LEN]`` after checking every field."""
        vals = {f.name: int(getattr(self, f.name)) for f in FIELDS}
        _check_ranges(vals)
        _check_consistency(vals, None)
        words = []
        for w in _WORDS:
            v = 0
            for name, shift, _bits in w.members:
                v |= vals[name] << shift
            words.append(v)
        if len(buf) - offset < HEADER_LEN:
            raise WireError("header", f"buffer has {len(buf) - offset} bytes at offset {offset}, need {HEADER_LEN}")
        WORD_STRUCT.pack_into(buf, offset, *words)

    @classmethod
    def unpack(cls, buf, offset: int = 0) -> "Header":
        """Parse and validate a header from ``buf[offset:]`` (bytes, bytearray, memoryview)."""
        avail = len(buf) - offset
        if avail < HEADER_LEN:
            missing = next(f for f, end in _field_ends() if end > avail)
            raise WireError(missing.name, f"truncated header: {avail} of {HEADER_LEN} bytes "
                            f"(field {missing.name!r} ends at byte {_end_of(missing.name)})")
        vals = _split_words(WORD_STRUCT.unpack_from(buf, offset))
        _check_version(vals["version"], None)
        _check_consistency(vals, None)
        return cls._from_vals(vals)

    @classmethod
    def _from_vals(cls, vals: dict[str, int]) -> "Header":
        vals = dict(vals)
        vals["msg_type"] = MsgType(vals["msg_type"])
        vals["flags"] = Flag(vals["flags"])
        vals["dtype"] = DType(vals["dtype"])
        return cls(**vals)

    @property
    def payload_len(self) -> int:
        """Bytes of payload this header announces: elements for DATA, bitmap bytes for ACK/NACK, else unknown
        (CONTROL payloads are delimited by the datagram)."""
        if self.msg_type == MsgType.DATA:
            return self.count * DType(self.dtype).itemsize
        if self.msg_type in (MsgType.ACK, MsgType.NACK):
            return (self.count + 7) // 8
        return -1


def _field_ends() -> Iterator[tuple[Field, int]]:
    for f in FIELDS:
        yield f, _end_of(f.name)


def _end_of(name: str) -> int:
    bits = 0
    for f in FIELDS:
        bits += f.bits
        if f.name == name:
            return (bits + 7) // 8
    raise KeyError(name)


def _split_words(words) -> dict[str, int]:
    vals: dict[str, int] = {}
    for w, v in zip(_WORDS, words):
        for name, shift, bits in w.members:
            vals[name] = (v >> shift) & ((1 << bits) - 1)
    return vals


def _check_ranges(vals: dict[str, int]) -> None:
    for f in FIELDS:
        v = vals[f.name]
        if not 0 <= v < (1 << f.bits):
            raise WireError(f.name, f"value {v} does not fit in {f.bits} bits")


def _check_version(version: int, index: int | None) -> None:
    if version != VERSION:
        raise WireError("version", f"unknown version {version} (this code speaks {VERSION})", index)


def _check_consistency(v: dict[str, int], index: int | None) -> None:
    """Rules a well-formed header obeys beyond field widths (also applied, vectorised, by unpack_batch)."""
    if v["version"] != VERSION:
        _check_version(v["version"], index)
    if v["msg_type"] not in _MSG_TYPES:
        raise WireError("msg_type", f"unknown message type {v['msg_type']}", index)
    if v["flags"] & ~_FLAGS_VALID:
        raise WireError("flags", f"reserved flag bits set: {v['flags']:#04x}", index)
    if v["reserved"]:
        raise WireError("reserved", f"must be 0, got {v['reserved']}", index)
    if v["dtype"] not in _DTYPES:
        raise WireError("dtype", f"unknown dtype code {v['dtype']}", index)
    if v["msg_type"] == MsgType.DATA:
        if v["total"] == 0:
            raise WireError("total", "a data transfer has at least one packet", index)
        if v["eligible"] >= v["total"]:
            raise WireError("eligible", f"{v['eligible']} eligible packets of {v['total']}: a transfer keeps at "
                            "least one protected packet", index)
        if v["seq"] >= v["total"]:
            raise WireError("seq", f"sequence {v['seq']} is not below total {v['total']}", index)
        if v["offset"] % _ITEMSIZE[DType(v["dtype"])]:
            raise WireError("offset", f"byte offset {v['offset']} is not a multiple of the "
                            f"{DType(v['dtype']).name} element size", index)
        if bool(v["flags"] & Flag.DROP_ELIGIBLE) != (v["seq"] < v["eligible"]):
            raise WireError("flags", f"DROP_ELIGIBLE must be set exactly on seqs below eligible={v['eligible']} "
                            f"(seq {v['seq']})", index)


_MSG_TYPES = frozenset(int(m) for m in MsgType)
_DTYPES = frozenset(int(d) for d in DType)
_ITEMSIZE_TABLE = np.zeros(256, dtype=np.uint32)  # dtype code -> element size (0 = unknown code)
for _d in DType:
    _ITEMSIZE_TABLE[int(_d)] = _d.itemsize


def parse_datagram(buf, length: int | None = None) -> tuple[Header, memoryview]:
    """Split a received UDP payload into its header and payload, checking the payload length the header announces.

    ``length`` is the number of valid bytes in ``buf`` (as returned by ``recv_into``); default ``len(buf)``.
    """
    mv = memoryview(buf)
    if length is not None:
        mv = mv[:length]
    hdr = Header.unpack(mv)
    payload = mv[HEADER_LEN:]
    want = hdr.payload_len
    if want >= 0 and len(payload) != want:
        field = "count"
        raise WireError(field, f"header announces {want} payload bytes ({hdr.msg_type.name}, count={hdr.count}), "
                        f"datagram carries {len(payload)}")
    return hdr, payload


# --- batches ----------------------------------------------------------------------------------------------

def pack_batch(headers: np.ndarray) -> np.ndarray:
    """Pack a structured array of :data:`FIELDS_DTYPE` rows into wire headers (array of :data:`WIRE_DTYPE`).

    ``result.tobytes()`` is the concatenation of the 48-byte headers; ``result[i].tobytes()`` is header i.
    Values are checked like :meth:`Header.pack`; the first bad row raises ``WireError`` with its index.
    """
    if headers.dtype != FIELDS_DTYPE:
        raise TypeError(f"pack_batch wants dtype FIELDS_DTYPE, got {headers.dtype}")
    for f in FIELDS:
        if f.bits not in (8, 16, 32, 64):
            bad = np.flatnonzero(headers[f.name] >= (1 << f.bits))
            if bad.size:
                i = int(bad[0])
                raise WireError(f.name, f"value {int(headers[f.name][i])} does not fit in {f.bits} bits", i)
    _check_batch(headers)
    out = np.empty(headers.shape, dtype=WIRE_DTYPE)
    for i, w in enumerate(_WORDS):
        col = np.zeros(headers.shape, dtype=f"u{w.size}")
        for name, shift, _bits in w.members:
            col |= headers[name].astype(col.dtype) << np.array(shift, dtype=col.dtype)
        out[f"w{i}"] = col
    return out


def unpack_batch(buf, n: int | None = None) -> np.ndarray:
    """Parse ``n`` consecutive 48-byte headers from ``buf`` (default: as many as it holds exactly).

    Returns a structured array of :data:`FIELDS_DTYPE`; validates every row like :meth:`Header.unpack`.
    """
    mv = memoryview(buf).cast("B")
    if n is None:
        if len(mv) % HEADER_LEN:
            raise WireError("header", f"{len(mv)} bytes is not a whole number of {HEADER_LEN}-byte headers")
        n = len(mv) // HEADER_LEN
    if len(mv) < n * HEADER_LEN:
        i = len(mv) // HEADER_LEN
        raise WireError("header", f"truncated batch: {len(mv)} bytes hold {i} of {n} headers", i)
    wire = np.frombuffer(mv[: n * HEADER_LEN], dtype=WIRE_DTYPE, count=n)
    out = np.empty(n, dtype=FIELDS_DTYPE)
    for i, w in enumerate(_WORDS):
        col = wire[f"w{i}"].astype(f"u{w.size}")
        for name, shift, bits in w.members:
            out[name] = (col >> shift) & ((1 << bits) - 1)
    _check_batch(out)
    return out


def _check_batch(h: np.ndarray) -> None:
    """Vectorised :func:`_check_consistency`: find the first violating row, then report it with the scalar check."""
    known_type = np.isin(h["msg_type"], list(_MSG_TYPES))
    known_dtype = np.isin(h["dtype"], list(_DTYPES))
    data = h["msg_type"] == MsgType.DATA
    size = _ITEMSIZE_TABLE[h["dtype"]]
    bad = (h["version"] != VERSION) | ~known_type | ((h["flags"] & (0xFF ^ _FLAGS_VALID)) != 0) | (h["reserved"] != 0) \
        | ~known_dtype | (data & ((h["total"] == 0) | (h["seq"] >= h["total"])
                                  | (h["offset"] % np.maximum(size, 1) != 0) | (h["eligible"] >= h["total"])
                                  | (((h["flags"] & int(Flag.DROP_ELIGIBLE)) != 0) != (h["seq"] < h["eligible"]))))
    idx = np.flatnonzero(bad)
    if idx.size:
        i = int(idx[0])
        _check_consistency({f.name: int(h[f.name][i]) for f in FIELDS}, i)
        raise AssertionError("batch and scalar header checks disagree")  # pragma: no cover


def headers_to_batch(headers: list[Header]) -> np.ndarray:
    """A FIELDS_DTYPE array from Header objects (tests, small batches)."""
    out = np.zeros(len(headers), dtype=FIELDS_DTYPE)
    for i, hd in enumerate(headers):
        out[i] = tuple(hd.values())
    return out


def batch_row(headers: np.ndarray, i: int) -> Header:
    """Row ``i`` of a FIELDS_DTYPE array as a Header."""
    return Header._from_vals({f.name: int(headers[f.name][i]) for f in FIELDS})


# --- the keyed tag -----------------------------------------------------------------------------------------

_M64 = (1 << 64) - 1


def _rotl(x: int, b: int) -> int:
    return ((x << b) | (x >> (64 - b))) & _M64


def siphash24(key: bytes, data: bytes) -> int:
    """SipHash-2-4 (Aumasson and Bernstein, 2012) of ``data`` under the 16-byte ``key``, as a 64-bit integer: the
    reference the C lanes are tested against (this one is slow: about a microsecond per byte)."""
    if len(key) != KEY_LEN:
        raise ValueError(f"a SipHash key has {KEY_LEN} bytes, got {len(key)}")
    k0, k1 = int.from_bytes(key[:8], "little"), int.from_bytes(key[8:], "little")
    v = [k0 ^ 0x736F6D6570736575, k1 ^ 0x646F72616E646F6D, k0 ^ 0x6C7967656E657261, k1 ^ 0x7465646279746573]

    def rounds(n: int) -> None:
        v0, v1, v2, v3 = v
        for _ in range(n):
            v0 = (v0 + v1) & _M64
            v1 = _rotl(v1, 13) ^ v0
            v0 = _rotl(v0, 32)
            v2 = (v2 + v3) & _M64
            v3 = _rotl(v3, 16) ^ v2
            v0 = (v0 + v3) & _M64
            v3 = _rotl(v3, 21) ^ v0
            v2 = (v2 + v1) & _M64
            v1 = _rotl(v1, 17) ^ v2
            v2 = _rotl(v2, 32)
        v[:] = v0, v1, v2, v3

    data = bytes(data)
    n = len(data)
    whole = n - n % 8
    for i in range(0, whole, 8):
        m = int.from_bytes(data[i:i + 8], "little")
        v[3] ^= m
        rounds(2)
        v[0] ^= m
    m = int.from_bytes(data[whole:], "little") | ((n & 0xFF) << 56)
    v[3] ^= m
    rounds(2)
    v[0] ^= m
    v[2] ^= 0xFF
    rounds(4)
    return v[0] ^ v[1] ^ v[2] ^ v[3]


#: The NH key covers payloads of up to this many bytes (a datagram carries at most 65 459 after its header).
NH_MAX_PAYLOAD = 65536
_NH_KEY_WORDS = NH_MAX_PAYLOAD // 4 + 4  # and 4 more words for the second, Toeplitz-shifted instance
_M32 = (1 << 32) - 1


@functools.lru_cache(maxsize=8)
def tag_schedule(key: bytes) -> tuple[bytes, tuple[int, ...]]:
    """The keyed tag's schedule under the job's 16-byte ``key``: (the PRF key, the NH key as 32-bit words), from
    SipHash-2-4 of the 8-byte little-endian counter 0, 1, 2, ...: outputs 0 and 1 are the PRF key, each further
    output two NH key words, its low half first. (Reference speed: about a second; cached per key.)"""
    prf = siphash24(key, (0).to_bytes(8, "little")).to_bytes(8, "little") + \
        siphash24(key, (1).to_bytes(8, "little")).to_bytes(8, "little")
    words: list[int] = []
    for j in range(_NH_KEY_WORDS // 2):
        v = siphash24(key, (j + 2).to_bytes(8, "little"))
        words += (v & _M32, v >> 32)
    return prf, tuple(words)


def nh_hash(nh_key: tuple[int, ...], payload) -> tuple[int, int]:
    """NH (as UMAC's, RFC 4418 section 5.2) of ``payload`` zero-padded to 32-byte blocks, twice: under the NH key
    and under the same key shifted by 4 words (Toeplitz), each the sum mod 2^64 over the blocks' word pairs ``j``
    and ``j + 4`` of ``((m + k) mod 2^32) * ((m' + k') mod 2^32)``, ``m`` the little-endian 32-bit words."""
    data = bytes(payload)
    if len(data) > NH_MAX_PAYLOAD:
        raise ValueError(f"NH covers at most {NH_MAX_PAYLOAD} bytes, got {len(data)}")
    data += bytes(-len(data) % 32)
    m = [int.from_bytes(data[i:i + 4], "little") for i in range(0, len(data), 4)]
    out = []
    for shift in (0, 4):
        h = 0
        for b in range(0, len(m), 8):
            for j in range(4):
                h += ((m[b + j] + nh_key[b + j + shift]) & _M32) * ((m[b + j + 4] + nh_key[b + j + 4 + shift]) & _M32)
        out.append(h & _M64)
    return out[0], out[1]


def packet_tag(key: bytes, datagram) -> int:
    """The tag of a DLCP datagram under ``key``, written big-endian into the tag field: SipHash-2-4 under the
    schedule's PRF key of the header's bytes before the tag (``[0, TAG_AT)``), the payload's length and the
    payload's two NH hashes (each 8 bytes little-endian). Why this shape (a universal hash of the payload, then a
    PRF) and why it is a MAC: ``host/transport/_tag.h`` and docs/decisions.md."""
    mv = memoryview(datagram).cast("B")
    if len(mv) < HEADER_LEN:
        raise WireError("tag", f"truncated datagram: {len(mv)} of {HEADER_LEN} header bytes")
    prf, nh_key = tag_schedule(bytes(key))
    payload = mv[HEADER_LEN:]
    n0, n1 = nh_hash(nh_key, payload)
    return siphash24(prf, bytes(mv[:TAG_AT]) + b"".join(v.to_bytes(8, "little") for v in (len(payload), n0, n1)))


# --- ACK/NACK bitmaps -------------------------------------------------------------------------------------

def pack_bitmap(bits: np.ndarray) -> bytes:
    """Bitmap payload of an ACK/NACK: bit i (MSB-first within each byte) set = packet ``seq + i`` is meant
    (received, for ACK; missing, for NACK). ``count`` in the header is ``len(bits)``."""
    return np.packbits(np.asarray(bits, dtype=bool), bitorder="big").tobytes()


def unpack_bitmap(payload, count: int) -> np.ndarray:
    """Inverse of :func:`pack_bitmap`: a bool array of ``count`` bits; padding bits must be 0."""
    raw = np.frombuffer(payload, dtype=np.uint8)
    if raw.size != (count + 7) // 8:
        raise WireError("count", f"bitmap of {count} bits needs {(count + 7) // 8} bytes, got {raw.size}")
    bits = np.unpackbits(raw, bitorder="big")
    if bits[count:].any():
        raise WireError("count", f"bitmap has bits set beyond count={count}")
    return bits[:count].astype(bool)


assert [f.name for f in dc_fields(Header)] and {f.name for f in dc_fields(Header)} == set(_BY_NAME), \
    "Header dataclass and FIELDS disagree"

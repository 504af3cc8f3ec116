"""The DLCP wire format: round trips, batches, scapy dissection, P4 agreement, malformed input."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from host import wire
from host.wire import DType, Flag, Header, MsgType, WireError

ROOT = Path(__file__).resolve().parent.parent
P4_HEADERS = ROOT / "p4src" / "include" / "dlcp_headers.p4"


def _field_values(msg_type: MsgType) -> st.SearchStrategy[dict]:
    """Every field over its whole range, constrained only by the consistency rules of that message type."""
    def build(d):
        d["msg_type"] = msg_type
        if msg_type == MsgType.DATA:
            d["total"] = max(d["total"], 1)
            d["seq"] = d["seq"] % d["total"]
            d["offset"] -= d["offset"] % d["dtype"].itemsize
            d["eligible"] = d["eligible"] % d["total"]  # at least one protected packet
            elig = Flag.DROP_ELIGIBLE if d["seq"] < d["eligible"] else Flag.NONE  # flagged exactly below it
            d["flags"] = (d["flags"] & ~Flag.DROP_ELIGIBLE) | elig
        return d

    u = lambda bits: st.integers(0, (1 << bits) - 1)  # noqa: E731
    return st.fixed_dictionaries({
        "flags": st.sampled_from([Flag(v) for v in range(16)]),
        "priority": u(3), "mag_class": u(3), "dtype": st.sampled_from(list(DType)),
        "layer": u(16), "rank": u(16), "job_id": u(32), "transfer_id": u(32), "eligible": u(32), "seq": u(32),
        "total": u(32), "offset": u(32), "count": u(16), "nonce": u(16), "transfer_hi": u(32), "tag": u(64),
    }).map(build)


headers = st.sampled_from(list(MsgType)).flatmap(_field_values).map(lambda d: Header(**d))


@given(headers)
def test_single_round_trip(h: Header) -> None:
    b = h.pack()
    assert len(b) == wire.HEADER_LEN == 48
    assert Header.unpack(b) == h
    # pack_into at an offset of a larger buffer, unpack from a memoryview at that offset
    buf = bytearray(100)
    h.pack_into(buf, 7)
    assert Header.unpack(memoryview(buf), 7) == h


@given(headers)
def test_bit_layout_matches_field_list(h: Header) -> None:
    """Independent of the word grouping: the header is the fields' bits concatenated MSB-first."""
    acc = 0
    for f in wire.FIELDS:
        acc = (acc << f.bits) | int(getattr(h, f.name))
    assert h.pack() == acc.to_bytes(wire.HEADER_LEN, "big")


@given(st.lists(headers, min_size=0, max_size=20))
def test_batch_equals_single(hs: list[Header]) -> None:
    arr = wire.headers_to_batch(hs)
    packed = wire.pack_batch(arr)
    assert packed.tobytes() == b"".join(h.pack() for h in hs)
    for i, h in enumerate(hs):
        assert packed[i].tobytes() == h.pack()
    back = wire.unpack_batch(packed.tobytes())
    assert back.dtype == wire.FIELDS_DTYPE and len(back) == len(hs)
    assert [wire.batch_row(back, i) for i in range(len(hs))] == hs


def test_batch_unpack_counts_and_truncation() -> None:
    hs = [Header(seq=i, total=4, count=1, offset=4 * i) for i in range(4)]
    blob = b"".join(h.pack() for h in hs)
    assert len(wire.unpack_batch(blob, 2)) == 2
    with pytest.raises(WireError) as e:
        wire.unpack_batch(blob[:-1])
    assert e.value.field == "header"
    with pytest.raises(WireError) as e:
        wire.unpack_batch(blob[:2 * wire.HEADER_LEN + 10], 4)
    assert e.value.field == "header" and e.value.index == 2


def test_batch_reports_first_bad_row() -> None:
    hs = [Header(seq=i, total=4, count=1) for i in range(4)]
    blob = bytearray(b"".join(h.pack() for h in hs))
    blob[2 * wire.HEADER_LEN] = (7 << 4) | 0  # row 2: version 7
    with pytest.raises(WireError) as e:
        wire.unpack_batch(bytes(blob))
    assert (e.value.field, e.value.index) == ("version", 2)
    arr = wire.headers_to_batch(hs)
    arr["priority"][3] = 8
    with pytest.raises(WireError) as e:
        wire.pack_batch(arr)
    assert (e.value.field, e.value.index) == ("priority", 3)
    arr = wire.headers_to_batch(hs)
    arr["seq"][1] = 4
    with pytest.raises(WireError) as e:
        wire.pack_batch(arr)
    assert (e.value.field, e.value.index) == ("seq", 1)


def test_scapy_dissects_packed_header() -> None:
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw

    from host.scapy_dlcp import DLCP

    payload = np.arange(5, dtype="<f4").tobytes()
    h = Header(msg_type=MsgType.DATA, flags=Flag.DROP_ELIGIBLE | Flag.LAST, priority=6, mag_class=3,
               dtype=DType.FLOAT32, layer=12, rank=3, job_id=0xDEADBEEF, transfer_id=77, eligible=10, seq=9,
               total=11, offset=36 * 4, count=5, nonce=0xBEEF, tag=0x0123456789ABCDEF)
    frame = bytes(Ether() / IP(dst="10.0.0.2") / UDP(sport=40000, dport=wire.UDP_PORT) / Raw(h.pack() + payload))
    pkt = Ether(frame)
    assert DLCP in pkt
    d = pkt[DLCP]
    for f in wire.FIELDS:
        assert int(d.getfieldval(f.name)) == int(getattr(h, f.name)), f.name
    assert bytes(d.payload) == payload
    assert d.sprintf("%DLCP.msg_type% %DLCP.dtype%") == "data float32"
    # and scapy builds the same bytes from field values
    built = DLCP(**{f.name: int(getattr(h, f.name)) for f in wire.FIELDS})
    assert bytes(built) == h.pack()
    # a UDP datagram on another port is not DLCP
    other = Ether(bytes(Ether() / IP() / UDP(sport=1, dport=53) / Raw(h.pack())))
    assert DLCP not in other


def _parse_p4_header(text: str, name: str) -> list[tuple[str, int]]:
    """A small text parser for `header NAME { bit<W> field; ... }` (until the switch front end takes over)."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    m = re.search(r"\bheader\s+" + name + r"\s*\{(.*?)\}", text, re.S)
    assert m, f"header {name} not declared"
    out = []
    for decl in filter(None, (d.strip() for d in m.group(1).split(";"))):
        fm = re.fullmatch(r"bit\s*<\s*(\d+)\s*>\s+(\w+)", decl)
        assert fm, f"unexpected declaration in {name}: {decl!r}"
        out.append((fm.group(2), int(fm.group(1))))
    return out


def _parse_p4_consts(text: str) -> dict[str, int]:
    return {m.group(2): int(m.group(3), 0)
            for m in re.finditer(r"const\s+bit\s*<\s*(\d+)\s*>\s+(\w+)\s*=\s*(0x[0-9a-fA-F]+|\d+)\s*;", text)}


def test_p4_header_matches_python_definition() -> None:
    text = P4_HEADERS.read_text()
    assert _parse_p4_header(text, "dlcp_h") == [(f.name, f.bits) for f in wire.FIELDS]
    consts = _parse_p4_consts(text)
    assert consts["DLCP_UDP_PORT"] == wire.UDP_PORT
    assert consts["DLCP_VERSION"] == wire.VERSION
    for m in MsgType:
        assert consts[f"DLCP_MSG_{m.name}"] == int(m)
    for fl in (Flag.DROP_ELIGIBLE, Flag.ECN_ECHO, Flag.RETRANSMIT, Flag.LAST):
        assert consts[f"DLCP_FLAG_{fl.name}"] == int(fl)


def test_every_p4_program_uses_the_one_header() -> None:
    """dlcp.p4 and its Tofino twin (p4src/tofino/) take the DLCP header from dlcp_headers.p4, the file checked above
    against host.wire; none declares a DLCP header of its own, so all of them stay in lock-step with the Python
    definition."""
    programs = sorted((ROOT / "p4src").rglob("*.p4"))
    mains = [p for p in programs if re.search(r"^\s*(V1Switch|Switch)\s*\(", p.read_text(), re.M)]
    assert {p.relative_to(ROOT).as_posix() for p in mains} >= {"p4src/dlcp.p4", "p4src/tofino/dlcp_tna.p4"}
    for prog in programs:
        if prog == P4_HEADERS:
            continue
        text = prog.read_text()
        assert not re.search(r"\bheader\s+dlcp_h\b", text), f"{prog} declares dlcp_h itself"
        if prog in mains:
            includes = [(prog.parent / inc).resolve() for inc in re.findall(r'#include\s+"([^"]+)"', text)]
            assert P4_HEADERS.resolve() in includes, f"{prog} does not include {P4_HEADERS}"


def test_p4_text_parser_rejects_drift() -> None:
    """The agreement check can fail: a reordered or resized field is caught."""
    text = P4_HEADERS.read_text()
    swapped = text.replace("bit<16> layer;\n    bit<16> rank;", "bit<16> rank;\n    bit<16> layer;")
    assert swapped != text
    assert _parse_p4_header(swapped, "dlcp_h") != [(f.name, f.bits) for f in wire.FIELDS]
    resized = text.replace("bit<16> nonce;", "bit<8>  nonce;")
    assert resized != text
    assert _parse_p4_header(resized, "dlcp_h") != [(f.name, f.bits) for f in wire.FIELDS]
    untagged = re.sub(r"bit<64> tag;[^\n]*\n", "", text)
    assert untagged != text
    assert _parse_p4_header(untagged, "dlcp_h") != [(f.name, f.bits) for f in wire.FIELDS]


def test_header_layout_is_aligned_and_ends_with_the_tag() -> None:
    assert wire.HEADER_LEN % 8 == 0 and wire.TAG_AT == wire.HEADER_LEN - 8
    for name in wire.WIRE_DTYPE.names:
        off, size = wire.WIRE_DTYPE.fields[name][1], wire.WIRE_DTYPE[name].itemsize
        assert off % size == 0, name
    assert wire.field_word("tag") == (wire.WIRE_DTYPE.names[-1], 0)
    h = Header(tag=0xFEDCBA9876543210)
    assert h.pack()[wire.TAG_AT:] == bytes.fromhex("FEDCBA9876543210")


# --- the keyed tag ----------------------------------------------------------------------------------------

def test_siphash24_reference_vectors() -> None:
    """The vectors of the SipHash paper (appendix A) and the reference implementation's table: key 00..0f,
    message 00..(n-1)."""
    key = bytes(range(16))
    assert wire.siphash24(key, b"") == 0x726FDB47DD0E0E31
    assert wire.siphash24(key, bytes(range(1))) == 0x74F839C593DC67FD
    assert wire.siphash24(key, bytes(range(15))) == 0xA129CA6149BE45E5
    with pytest.raises(ValueError):
        wire.siphash24(b"short", b"")


def test_nh_hash_is_umacs_nh_twice_with_a_toeplitz_shift() -> None:
    """NH by hand on one 32-byte block (words j and j + 4 paired, sums mod 2^32, products summed mod 2^64), the
    second instance under the key shifted by 4 words; a short payload is zero-padded to the block."""
    key = tuple(range(1, 13)) + (0,) * 100
    m = [0xFFFFFFFF, 5, 6, 7, 8, 9, 10, 11]
    pay = b"".join(w.to_bytes(4, "little") for w in m)
    m32 = (1 << 32) - 1
    want0 = sum(((m[j] + key[j]) & m32) * ((m[j + 4] + key[j + 4]) & m32) for j in range(4))
    want1 = sum(((m[j] + key[j + 4]) & m32) * ((m[j + 4] + key[j + 8]) & m32) for j in range(4))
    assert wire.nh_hash(key, pay) == (want0 % (1 << 64), want1 % (1 << 64))
    assert wire.nh_hash(key, pay[:5]) == wire.nh_hash(key, pay[:5] + bytes(27))
    with pytest.raises(ValueError, match="at most"):
        wire.nh_hash(key, bytes(wire.NH_MAX_PAYLOAD + 1))


def test_packet_tag_covers_everything_but_the_tag() -> None:
    key = bytes(range(100, 116))
    dg = bytearray(GOOD.pack() + np.arange(4, dtype="<f4").tobytes())
    t = wire.packet_tag(key, dg)
    dg[wire.TAG_AT:wire.HEADER_LEN] = (t ^ 0xFFFF).to_bytes(8, "big")
    assert wire.packet_tag(key, dg) == t  # the tag field itself is not covered
    for i in [*range(wire.TAG_AT), *range(wire.HEADER_LEN, len(dg))]:  # every other byte is
        flipped = bytearray(dg)
        flipped[i] ^= 0x01
        assert wire.packet_tag(key, flipped) != t, i
    assert wire.packet_tag(bytes(16), dg) != t
    with pytest.raises(WireError) as e:
        wire.packet_tag(key, dg[:20])
    assert e.value.field == "tag"


# --- malformed input: always WireError naming the field, never IndexError/struct.error -------------------

GOOD = Header(seq=1, total=3, count=4, offset=16, dtype=DType.FLOAT32)


@pytest.mark.parametrize("n", range(0, 48))
def test_truncated_header_names_field(n: int) -> None:
    with pytest.raises(WireError) as e:
        Header.unpack(GOOD.pack()[:n])
    # the field reported is the first one that does not fit in n bytes
    ends = {}
    bits = 0
    for f in wire.FIELDS:
        bits += f.bits
        ends[f.name] = (bits + 7) // 8
    expected = next(f.name for f in wire.FIELDS if ends[f.name] > n)
    assert e.value.field == expected
    assert "truncated" in str(e.value)


def _with(h: bytes, byte: int, value: int) -> bytes:
    b = bytearray(h)
    b[byte] = value
    return bytes(b)


@pytest.mark.parametrize("mutate, field", [
    (lambda b: _with(b, 0, (0 << 4) | 0), "version"),
    (lambda b: _with(b, 0, (2 << 4) | 0), "version"),
    (lambda b: _with(b, 0, (1 << 4) | 9), "msg_type"),
    (lambda b: _with(b, 1, 0x80), "flags"),
    (lambda b: _with(b, 2, 0b000_000_01), "reserved"),
    (lambda b: _with(b, 3, 200), "dtype"),
    (lambda b: b[:24] + struct.pack("!I", 0) + b[28:], "total"),  # data with total 0
    (lambda b: b[:20] + struct.pack("!I", 3) + b[24:], "seq"),  # seq == total
    (lambda b: b[:28] + struct.pack("!I", 18) + b[32:], "offset"),  # not a multiple of 4 for f32
])
def test_inconsistent_header_names_field(mutate, field: str) -> None:
    with pytest.raises(WireError) as e:
        Header.unpack(mutate(GOOD.pack()))
    assert e.value.field == field
    assert field in str(e.value)


@pytest.mark.parametrize("kwargs, field", [
    ({"priority": 8}, "priority"), ({"mag_class": -1}, "mag_class"), ({"layer": 1 << 16}, "layer"),
    ({"job_id": 1 << 32}, "job_id"), ({"count": 70000}, "count"), ({"total": 0}, "total"),
    ({"seq": 5, "total": 5}, "seq"), ({"offset": 2, "dtype": DType.FLOAT32}, "offset"), ({"version": 3}, "version"),
])
def test_pack_rejects_bad_fields(kwargs, field: str) -> None:
    with pytest.raises(WireError) as e:
        Header(**kwargs).pack()
    assert e.value.field == field


def test_parse_datagram_checks_payload_length() -> None:
    payload = np.arange(4, dtype="<f4").tobytes()
    hdr, body = wire.parse_datagram(GOOD.pack() + payload)
    assert hdr == GOOD and bytes(body) == payload
    buf = bytearray(2048)
    buf[: wire.HEADER_LEN + 16] = GOOD.pack() + payload
    hdr, body = wire.parse_datagram(buf, wire.HEADER_LEN + 16)  # recv_into-style: valid length given
    assert np.frombuffer(body, "<f4").tolist() == [0, 1, 2, 3]
    for cut in (GOOD.pack() + payload[:-1], GOOD.pack() + payload + b"\0"):
        with pytest.raises(WireError) as e:
            wire.parse_datagram(cut)
        assert e.value.field == "count"
    nack = Header(msg_type=MsgType.NACK, seq=0, total=20, count=20)
    bits = np.zeros(20, bool)
    bits[[1, 7, 19]] = True
    hdr, body = wire.parse_datagram(nack.pack() + wire.pack_bitmap(bits))
    assert np.array_equal(wire.unpack_bitmap(body, hdr.count), bits)
    ctrl = Header(msg_type=MsgType.CONTROL, total=0)
    hdr, body = wire.parse_datagram(ctrl.pack() + b"anything")
    assert bytes(body) == b"anything"


@given(st.lists(st.booleans(), max_size=300))
def test_bitmap_round_trip(bits: list[bool]) -> None:
    arr = np.array(bits, dtype=bool)
    assert np.array_equal(wire.unpack_bitmap(wire.pack_bitmap(arr), len(bits)), arr)


def test_bitmap_malformed() -> None:
    with pytest.raises(WireError):
        wire.unpack_bitmap(b"\x00\x00", 20)  # needs 3 bytes
    with pytest.raises(WireError):
        wire.unpack_bitmap(b"\x01", 7)  # padding bit set


@settings(max_examples=300)
@given(st.binary(max_size=80))
def test_random_bytes_only_raise_wire_error(data: bytes) -> None:
    for fn in (lambda: Header.unpack(data), lambda: wire.parse_datagram(data),
               lambda: wire.unpack_batch(data)):
        try:
            fn()
        except WireError:
            pass


def test_dscp_mirrors_priority() -> None:
    assert [wire.dscp_for_priority(p) for p in range(8)] == [0, 8, 16, 24, 32, 40, 48, 56]
    with pytest.raises(WireError):
        wire.dscp_for_priority(8)


def test_dtype_itemsizes_match_numpy() -> None:
    for d in DType:
        assert d.numpy.itemsize == d.itemsize

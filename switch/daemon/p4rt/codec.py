"""P4Runtime value encodings: canonical byte strings, controller packet headers (PacketIn/PacketOut metadata)
and ``P4Data`` for digests.  Pure functions; errors are :class:`~switch.errors.SwitchError` naming the field."""
from __future__ import annotations

from dataclasses import dataclass

from finsy.proto import p4d, p4r

from ...errors import SwitchError


def encode(value: int) -> bytes:
    """Canonical P4Runtime byte string: shortest big-endian form, at least one byte."""
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def decode(data: bytes, width: int, what: str) -> int:
    """The integer of a P4Runtime byte string that must fit ``width`` bits (leading zero bytes allowed)."""
    if not data:
        raise SwitchError("INVALID_ARGUMENT", f"{what}: empty byte string")
    v = int.from_bytes(data, "big")
    if v >> width:
        raise SwitchError("INVALID_ARGUMENT", f"{what}: value 0x{data.hex()} does not fit in {width} bits")
    return v


@dataclass(frozen=True)
class ControllerHeader:
    """A ``@controller_header`` header from the P4Info: metadata fields (id, name, bitwidth) in wire order."""

    name: str
    fields: tuple[tuple[int, str, int], ...]

    @property
    def bits(self) -> int:
        return sum(f[2] for f in self.fields)

    @classmethod
    def from_p4info(cls, p4info, name: str) -> "ControllerHeader | None":
        for m in p4info.controller_packet_metadata:
            if m.preamble.name == name:
                return cls(name, tuple((x.id, x.name, x.bitwidth) for x in m.metadata))
        return None

    def split(self, data: bytes) -> tuple[list[p4r.PacketMetadata], bytes]:
        """Frame from the CPU port -> (PacketIn metadata, payload).  The program's deparser emitted this header
        first (BMv2's convention); a frame shorter than the header is returned whole with no metadata."""
        nbytes = (self.bits + 7) // 8
        if len(data) < nbytes:
            return [], data
        v = int.from_bytes(data[:nbytes], "big") >> (nbytes * 8 - self.bits)
        out = []
        shift = self.bits
        for fid, _name, w in self.fields:
            shift -= w
            out.append(p4r.PacketMetadata(metadata_id=fid, value=encode((v >> shift) & ((1 << w) - 1))))
        return out, data[nbytes:]

    def build(self, metadata) -> bytes:
        """PacketOut metadata -> the header bytes to prepend.  Unknown or repeated ids and values that do not fit
        are INVALID_ARGUMENT; missing fields are zero."""
        by_id = {f[0]: f for f in self.fields}
        vals: dict[int, int] = {}
        for m in metadata:
            f = by_id.get(m.metadata_id)
            if f is None:
                raise SwitchError("INVALID_ARGUMENT", f"{self.name}: no metadata field with id {m.metadata_id}")
            if m.metadata_id in vals:
                raise SwitchError("INVALID_ARGUMENT", f"{self.name}: metadata field {f[1]} given twice")
            vals[m.metadata_id] = decode(m.value, f[2], f"{self.name}.{f[1]}")
        v = 0
        for fid, _name, w in self.fields:
            v = (v << w) | vals.get(fid, 0)
        nbytes = (self.bits + 7) // 8
        return (v << (nbytes * 8 - self.bits)).to_bytes(nbytes, "big")


def digest_data(values: tuple, fields: list[tuple[str, int | None]]) -> p4d.P4Data:
    """One digest message as ``P4Data`` struct: ``fields`` are (name, bitwidth or None for bool)."""
    d = p4d.P4Data()
    for v, (_name, w) in zip(values, fields):
        m = d.struct.members.add()
        if w is None:
            m.bool = bool(v)
        else:
            m.bitstring = encode(int(v) & ((1 << w) - 1))
    return d

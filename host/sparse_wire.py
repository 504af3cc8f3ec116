"""Sparse (index, value) payloads on the wire: one flat ``uint8`` tensor of fixed-capacity segments.

SparDL (``host.spardl``) moves sparse blocks between ranks with plain point-to-point transfers: a process group's
``isend``/``irecv`` (gloo, dlcp, ...) or the DLCP transport directly. Both need the receiver to post a buffer of
the exact size in advance, so a message is a sequence of **segments with fixed capacities** that sender and
receiver compute alike; a segment holds at most ``capacity`` entries and is padded to its capacity. One segment::

    offset 0   int32 count        entries used (<= capacity)
    offset 4   int32 tag          the block (or origin) this segment carries; checked by the receiver
    offset 8   int32 block_len    elements of the block the indices point into (indices < block_len)
    offset 12  int32 capacity     entries the segment has room for
    offset 16  int32 value_size   bytes per value (the receiver checks it against the dtype it expects)
    offset 20  int32 0            reserved
    offset 24  indices            capacity x index width bytes, padded to a multiple of 8
    ...        values             capacity x value_size bytes, padded to a multiple of 8

The **index width** follows from the block length: 1 byte up to 256 elements, 2 up to 65 536, else 4 (blocks are
below 2**32 elements: a transfer is below 4 GiB). Indices are block-local, so with P blocks they need
log2(n/P) bits rather than log2(n). Every field starts 8-byte aligned, so decoding is a ``view`` of the buffer.
Values keep the tensor's dtype (bf16 and fp16 travel as their raw bits).

The header makes a message self-describing: :func:`walk` parses one without knowing the specs (used to
inspect traffic in tests). Decoding validates everything a corrupted or mismatched message could get wrong
(count, tag, block length, capacity, value size, index range) and raises :class:`SparseWireError` naming the
segment and field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

__all__ = ["SparseWireError", "SegmentSpec", "Segment", "index_dtype", "index_width", "segment_bytes",
           "message_bytes", "encode", "decode", "walk", "HEADER_BYTES"]

HEADER_BYTES = 24


class SparseWireError(ValueError):
    """A sparse message that does not match what the receiver expects (or is corrupted)."""


def index_dtype(block_len: int) -> torch.dtype:
    """The narrowest unsigned integer dtype that can hold every index of a block of ``block_len`` elements."""
    if block_len < 0:
        raise ValueError(f"block length must be >= 0, got {block_len}")
    if block_len <= 1 << 8:
        return torch.uint8
    if block_len <= 1 << 16:
        return torch.uint16
    if block_len <= 1 << 32:
        return torch.uint32
    raise ValueError(f"block of {block_len} elements: blocks must have at most 2**32 elements")


def index_width(block_len: int) -> int:
    """Bytes per index for a block of ``block_len`` elements (1, 2 or 4)."""
    return index_dtype(block_len).itemsize


def _pad8(n: int) -> int:
    return (n + 7) & ~7


@dataclass(frozen=True)
class SegmentSpec:
    """What both ends agree on for one segment: its tag, the block length and the capacity in entries."""

    tag: int
    block_len: int
    capacity: int


@dataclass
class Segment:
    """A decoded (or to-be-encoded) segment: block-local ``indices`` (int64) and their ``values``."""

    tag: int
    indices: torch.Tensor
    values: torch.Tensor


def segment_bytes(spec: SegmentSpec, value_size: int) -> int:
    """Bytes a segment occupies on the wire (independent of how many entries it actually holds)."""
    return HEADER_BYTES + _pad8(spec.capacity * index_width(spec.block_len)) + _pad8(spec.capacity * value_size)


def message_bytes(specs: Sequence[SegmentSpec], value_size: int) -> int:
    return sum(segment_bytes(s, value_size) for s in specs)


_NP_INDEX = {torch.uint8: np.uint8, torch.uint16: np.uint16, torch.uint32: np.uint32}


def encode(specs: Sequence[SegmentSpec], segments: Sequence[Segment], value_dtype: torch.dtype) -> torch.Tensor:
    """One ``uint8`` message holding ``segments`` (in ``specs`` order, one each). Messages are host memory: the
    segments' tensors must be host tensors (``host.spardl.program.encode_message`` stages device ones)."""
    if len(specs) != len(segments):
        raise ValueError(f"{len(segments)} segments for {len(specs)} segment specs")
    vsize = value_dtype.itemsize
    buf = torch.zeros(message_bytes(specs, vsize), dtype=torch.uint8, device="cpu")
    bn = buf.numpy()
    off = 0
    for i, (spec, seg) in enumerate(zip(specs, segments)):
        n = int(seg.indices.numel())
        if n != seg.values.numel():
            raise ValueError(f"segment {i}: {n} indices but {seg.values.numel()} values")
        if n > spec.capacity:
            raise ValueError(f"segment {i} (tag {spec.tag}): {n} entries exceed its capacity {spec.capacity}")
        if seg.indices.device.type != "cpu" or seg.values.device.type != "cpu":
            raise ValueError(f"segment {i} (tag {spec.tag}): tensors on {seg.indices.device}/{seg.values.device}; "
                             f"messages are encoded from host tensors")
        if seg.tag != spec.tag:
            raise ValueError(f"segment {i}: tag {seg.tag}, expected {spec.tag}")
        idx = seg.indices.detach().reshape(-1).numpy()
        if n and (int(idx.min()) < 0 or int(idx.max()) >= spec.block_len):
            raise ValueError(f"segment {i} (tag {spec.tag}): index outside block of {spec.block_len} elements")
        if seg.values.dtype != value_dtype:
            raise ValueError(f"segment {i}: values are {seg.values.dtype}, message carries {value_dtype}")
        bn[off:off + HEADER_BYTES].view(np.int32)[:] = (n, spec.tag, spec.block_len, spec.capacity, vsize, 0)
        p = off + HEADER_BYTES
        idt = index_dtype(spec.block_len)
        iw = index_width(spec.block_len)
        if n:
            bn[p:p + n * iw].view(_NP_INDEX[idt])[:] = idx
        p += _pad8(spec.capacity * iw)
        if n:
            buf[p:p + n * vsize].view(value_dtype).copy_(seg.values.reshape(-1))
        off = p + _pad8(spec.capacity * vsize)
    return buf


def decode(buf: torch.Tensor, specs: Sequence[SegmentSpec], value_dtype: torch.dtype) -> list[Segment]:
    """The segments of ``buf`` (host tensors); raises :class:`SparseWireError` if it does not match ``specs``
    exactly."""
    vsize = value_dtype.itemsize
    want = message_bytes(specs, vsize)
    if buf.dtype != torch.uint8 or buf.dim() != 1 or buf.device.type != "cpu":
        raise SparseWireError(f"a sparse message is a flat uint8 host tensor, got {buf.dtype} of shape "
                              f"{tuple(buf.shape)} on {buf.device}")
    if buf.numel() != want:
        raise SparseWireError(f"sparse message has {buf.numel()} bytes, expected {want} for {len(specs)} "
                              f"segment(s) of {value_dtype} values")
    if buf.storage_offset() % 8 or not buf.is_contiguous():
        buf = buf.clone()
    bn = buf.numpy()
    out = []
    off = 0
    for i, spec in enumerate(specs):
        count, tag, block_len, cap, vs, _ = bn[off:off + HEADER_BYTES].view(np.int32).tolist()
        where = f"segment {i} (tag {spec.tag})"
        if cap != spec.capacity:
            raise SparseWireError(f"{where}: capacity {cap}, expected {spec.capacity}")
        if tag != spec.tag:
            raise SparseWireError(f"{where}: carries tag {tag}")
        if block_len != spec.block_len:
            raise SparseWireError(f"{where}: block length {block_len}, expected {spec.block_len}")
        if vs != vsize:
            raise SparseWireError(f"{where}: {vs}-byte values, expected {vsize} ({value_dtype})")
        if not 0 <= count <= spec.capacity:
            raise SparseWireError(f"{where}: count {count} outside 0..{spec.capacity}")
        p = off + HEADER_BYTES
        idt, iw = index_dtype(block_len), index_width(block_len)
        idx = bn[p:p + count * iw].view(_NP_INDEX[idt]).astype(np.int64)
        p += _pad8(spec.capacity * iw)
        vals = buf[p:p + count * vsize].view(value_dtype).clone()
        off = p + _pad8(spec.capacity * vsize)
        if count and int(idx.max()) >= block_len:
            raise SparseWireError(f"{where}: index {int(idx.max())} outside block of {block_len} elements")
        out.append(Segment(tag, torch.from_numpy(idx), vals))
    return out


def walk(buf: torch.Tensor, value_dtype: torch.dtype) -> list[tuple[SegmentSpec, Segment]]:
    """Parse a message from its own headers: (spec, segment) for every segment. Raises SparseWireError if the
    headers do not add up to the buffer."""
    if buf.dtype != torch.uint8 or buf.dim() != 1:
        raise SparseWireError("a sparse message is a flat uint8 tensor")
    if buf.storage_offset() % 8:
        buf = buf.clone()
    specs = []
    off = 0
    while off < buf.numel():
        if off + HEADER_BYTES > buf.numel():
            raise SparseWireError(f"truncated segment header at byte {off}")
        _, tag, block_len, cap, vs, _ = (int(v) for v in buf[off:off + HEADER_BYTES].view(torch.int32))
        if block_len < 0 or cap < 0 or vs <= 0:
            raise SparseWireError(f"segment header at byte {off} is malformed")
        spec = SegmentSpec(tag, block_len, cap)
        specs.append(spec)
        off += segment_bytes(spec, vs)
    if off != buf.numel():
        raise SparseWireError(f"segments span {off} bytes, message has {buf.numel()}")
    return list(zip(specs, decode(buf, specs, value_dtype)))

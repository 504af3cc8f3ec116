"""MTU-aware chunking of a tensor into DLCP data packets, and the header batch for all of them (pure functions).

A tensor of ``n`` elements is cut into consecutive packets of ``chunk`` elements (the last one shorter), ``chunk``
being as many elements as fit in one IPv4/UDP datagram of the path MTU after the 36-byte DLCP header. Packet *i*
(position) covers elements ``[i*chunk, min((i+1)*chunk, n))``.

Sequence numbers are **not** positions: protected packets get seqs ``0..k-1`` (in position order) and drop-eligible
ones ``k..total-1``. Three things follow, all used by the receiver (``reassembly.py``):

* every packet below the first eligible seq is protected, every packet above it is eligible, so a receiver that
  has seen one eligible packet and everything below it knows that every protected packet has arrived;
* protected packets leave first, the eligible tail last: a receiver that completes early skips the tail;
* positions of missing packets are not needed: lost element ranges are the complement of the received ones.

Every header is built by one :func:`host.wire.pack_batch` call.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from host import wire
from host.wire import DType, Flag, MsgType

__all__ = ["IPV4_UDP_OVERHEAD", "MAX_UDP_PAYLOAD", "payload_capacity", "chunk_elems", "Plan", "plan_packets",
           "tos_byte"]

#: IPv4 header (no options) + UDP header.
IPV4_UDP_OVERHEAD = 28
#: Largest UDP payload of an IPv4 datagram.
MAX_UDP_PAYLOAD = 65507


_W_FLAGS, _W_SEQ, _W_OFFSET, _W_COUNT = (wire.field_word(f)[0] for f in ("flags", "seq", "offset", "count"))
_W_MAG, _MAG_SHIFT = wire.field_word("mag_class")
assert all(wire.field_word(f)[1] == 0 for f in ("flags", "seq", "offset", "count")), "per-packet fields fill their words"


def payload_capacity(mtu: int) -> int:
    """Bytes of tensor data one packet carries at this path MTU."""
    cap = min(mtu - IPV4_UDP_OVERHEAD, MAX_UDP_PAYLOAD) - wire.HEADER_LEN
    if cap < 8:
        raise ValueError(f"MTU {mtu} leaves no room for a payload after the IP/UDP/DLCP headers")
    return cap


def chunk_elems(mtu: int, itemsize: int) -> int:
    """Elements per packet: what fits in the MTU, at most 65535 (the 16-bit ``count`` field)."""
    return min(payload_capacity(mtu) // itemsize, 0xFFFF)


def tos_byte(priority: int, eligible: bool) -> int:
    """IP TOS byte of a data packet: DSCP mirrors the priority; protected packets are ECT(0), eligible Not-ECT
    (so an ECN switch marks protected packets and drops eligible ones, as MLT does on commodity switches)."""
    return (wire.dscp_for_priority(priority) << 2) | (wire.ECN_NOT_ECT if eligible else wire.ECN_ECT0)


@dataclass(frozen=True)
class Plan:
    """All packets of one transfer, indexed by seq."""

    total: int  # packets
    chunk: int  # elements per full packet
    offsets: np.ndarray  # int64 byte offset of each seq's payload in the tensor
    lengths: np.ndarray  # int64 payload bytes of each seq
    eligible: np.ndarray  # bool, per seq
    headers: np.ndarray  # WIRE_DTYPE, per seq (``headers.view(np.uint8)`` is the 36-byte headers back to back)
    tos: np.ndarray  # uint8 IP TOS byte per seq


def plan_packets(*, nelems: int, dtype: DType, mtu: int,
                 classes=None, priority: int = 0, layer: int = 0, rank: int = 0, job_id: int = 0,
                 transfer_id: int = 0, step: int = 0, nonce: int = 0) -> Plan:
    """Cut ``nelems`` elements into packets and build every header.

    ``classes`` is a :class:`host.policy.PacketClasses` for the positions (``None``: all protected, class 0).
    """
    itemsize = DType(dtype).itemsize
    chunk = chunk_elems(mtu, itemsize)
    npk = max(1, -(-nelems // chunk))
    pos = np.arange(npk, dtype=np.int64)
    counts = np.minimum(chunk, nelems - pos * chunk).clip(min=0)
    if classes is None:
        elig_pos = np.zeros(npk, bool)
        mag_pos = np.zeros(npk, np.uint8)
    else:
        elig_pos = np.asarray(classes.eligible, bool)
        mag_pos = np.asarray(classes.mag_class, np.uint8)
        priority = classes.priority
        if elig_pos.shape != (npk,):
            raise ValueError(f"policy classified {elig_pos.shape} packets, the plan has {npk}")
    # seq order: protected positions first, then eligible ones, each in position order (stable)
    order = np.argsort(elig_pos, kind="stable") if elig_pos.any() else np.arange(npk, dtype=np.int64)
    eligible = elig_pos[order]
    mag = mag_pos[order]
    cnt = counts[order]
    offsets = order * (chunk * itemsize)
    # every header is the transfer's template (one Header.pack, checked there) with its per-packet words set:
    # numpy's per-call cost, not the packet count, is what a small transfer pays, so this stays a handful of calls
    template = wire.Header(msg_type=MsgType.DATA, priority=priority, dtype=DType(dtype), layer=layer, rank=rank,
                           job_id=job_id, transfer_id=transfer_id, step=step, total=npk, nonce=nonce).pack()
    h = np.repeat(np.frombuffer(template, wire.WIRE_DTYPE), npk)
    flags = np.where(eligible, np.uint8(int(Flag.DROP_ELIGIBLE)), np.uint8(0))
    flags[-1] |= int(Flag.LAST)
    h[_W_FLAGS] = flags
    if mag.any():
        h[_W_MAG] = h[_W_MAG] | (mag.astype(h[_W_MAG].dtype) << _MAG_SHIFT)
    h[_W_SEQ] = np.arange(npk, dtype=np.uint32)
    h[_W_OFFSET] = offsets
    h[_W_COUNT] = cnt
    tos = np.where(eligible, tos_byte(priority, True), tos_byte(priority, False)).astype(np.uint8)
    return Plan(total=npk, chunk=chunk, offsets=offsets.astype(np.int64), lengths=(cnt * itemsize).astype(np.int64),
                eligible=eligible, headers=h, tos=tos)

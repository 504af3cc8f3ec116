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
    order = np.argsort(elig_pos, kind="stable")
    h = np.zeros(npk, dtype=wire.FIELDS_DTYPE)
    h["version"] = wire.VERSION
    h["msg_type"] = MsgType.DATA
    eligible = elig_pos[order]
    flags = np.where(eligible, int(Flag.DROP_ELIGIBLE), 0).astype(np.uint8)
    flags[-1] |= int(Flag.LAST)
    h["flags"] = flags
    h["priority"] = priority
    h["mag_class"] = mag_pos[order]
    h["dtype"] = int(dtype)
    h["layer"] = layer
    h["rank"] = rank
    h["job_id"] = job_id
    h["transfer_id"] = transfer_id
    h["step"] = step
    h["seq"] = np.arange(npk, dtype=np.uint32)
    h["total"] = npk
    offsets = order * chunk * itemsize
    h["offset"] = offsets
    h["count"] = counts[order]
    h["nonce"] = nonce
    tos = np.where(eligible, tos_byte(priority, True), tos_byte(priority, False)).astype(np.uint8)
    return Plan(total=npk, chunk=chunk, offsets=offsets.astype(np.int64),
                lengths=(counts[order] * itemsize).astype(np.int64), eligible=eligible,
                headers=wire.pack_batch(h), tos=tos)

"""MTU-aware chunking of a tensor into DLCP data packets, and the header batch for all of them (pure functions).

A tensor of ``n`` elements is cut into consecutive packets of ``chunk`` elements (the last one shorter), ``chunk``
being as many elements as fit in one IPv4/UDP datagram of the path MTU after the 48-byte DLCP header. Packet *i*
(position) covers elements ``[i*chunk, min((i+1)*chunk, n))``.

Sequence numbers are **not** positions: drop-eligible packets get seqs ``0..e-1`` and protected ones ``e..total-1``
(each in position order), and every header says ``e`` (its ``eligible`` field). Sent in seq order, the eligible
packets leave first and the protected ones last, the last protected packet carrying LAST. What follows is used by
the receiver (``reassembly.py``):

* it knows from any one packet which seqs are protected: it completes the moment all of them are in, with no wait
  for stragglers, and asks again (NACK) only for protected holes (an eligible one is never retransmitted);
* the LAST packet ends the sender's first pass: whatever eligible packet has not arrived by the time every
  protected one has is counted lost (on a FIFO path it was sent earlier and dropped), so a transfer whose
  eligible packets were all dropped completes without any timeout;
* positions of missing packets are not needed: lost element ranges are the complement of the received ones.

Every header is the transfer's template (one checked :meth:`host.wire.Header.pack`) with its per-packet words set.

A transfer without drop-eligible packets has seq = position, so everything but the magnitude classes is known before
any payload is read: :func:`plan_in_order` lays out such a plan with its headers unwritten and :func:`write_headers`
writes them a range of seqs at a time, as the sender classifies the tensor slice by slice (``Options.classify_slice``
in ``sender.py``: its first packets leave while the rest is still being classified).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import numpy as np

from host import wire
from host.wire import DType, Flag, MsgType

__all__ = ["IPV4_UDP_OVERHEAD", "MAX_UDP_PAYLOAD", "payload_capacity", "chunk_elems", "Plan", "plan_packets",
           "plan_in_order", "write_headers", "tos_byte"]

#: IPv4 header (no options) + UDP header.
IPV4_UDP_OVERHEAD = 28
#: Largest UDP payload of an IPv4 datagram.
MAX_UDP_PAYLOAD = 65507


_W_FLAGS, _W_SEQ, _W_OFFSET, _W_COUNT = (wire.field_word(f)[0] for f in ("flags", "seq", "offset", "count"))
_W_MAG, _MAG_SHIFT = wire.field_word("mag_class")
assert all(wire.field_word(f)[1] == 0 for f in ("flags", "seq", "offset", "count")), \
    "per-packet fields fill their words"


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
    headers: np.ndarray  # WIRE_DTYPE, per seq (``headers.view(np.uint8)`` is the headers back to back)
    tos: np.ndarray  # uint8 IP TOS byte per seq
    itemsize: int  # bytes per element
    template: bytes  # the transfer's header with the per-packet words zero


def plan_packets(*, nelems: int, dtype: DType, mtu: int,
                 classes=None, priority: int = 0, layer: int = 0, rank: int = 0, job_id: int = 0,
                 transfer_id: int = 0, nonce: int = 0) -> Plan:
    """Cut ``nelems`` elements into packets and build every header.

    ``classes`` is a :class:`host.policy.PacketClasses` for the positions (``None``: all protected, class 0).
    """
    itemsize = DType(dtype).itemsize
    chunk = chunk_elems(mtu, itemsize)
    npk = max(1, -(-nelems // chunk))
    if classes is not None:
        priority = classes.priority
        if np.shape(classes.eligible) != (npk,):
            raise ValueError(f"policy classified {np.shape(classes.eligible)} packets, the plan has {npk}")
    n_elig = 0 if classes is None else int(np.count_nonzero(classes.eligible))
    if n_elig >= npk:
        raise ValueError(f"policy made all {npk} packets drop-eligible: a transfer keeps at least one protected")
    template = _template(priority, dtype, layer, rank, job_id, transfer_id, n_elig, npk, nonce)
    native = _native_plan()
    if native is not None:
        return _plan_native(native, nelems, itemsize, chunk, npk, classes, priority, template)
    if npk <= SMALL_PLAN:
        return _plan_lists(nelems, itemsize, chunk, npk, classes, priority, template)
    if classes is None or not np.any(classes.eligible):
        plan = _layout_in_order(nelems, itemsize, chunk, npk, priority, template)
        write_headers(plan, 0, npk, None if classes is None else classes.mag_class)
        return plan
    return _plan_arrays(nelems, itemsize, chunk, npk, classes, priority, template)


def plan_in_order(*, nelems: int, dtype: DType, mtu: int, priority: int = 0, layer: int = 0, rank: int = 0,
                  job_id: int = 0, transfer_id: int = 0, nonce: int = 0) -> Plan:
    """The plan of a transfer without drop-eligible packets (seq = position), its headers not yet written: the
    caller writes each range of seqs with :func:`write_headers` before it sends any of them."""
    itemsize = DType(dtype).itemsize
    chunk = chunk_elems(mtu, itemsize)
    npk = max(1, -(-nelems // chunk))
    template = _template(priority, dtype, layer, rank, job_id, transfer_id, 0, npk, nonce)
    return _layout_in_order(nelems, itemsize, chunk, npk, priority, template)


def write_headers(plan: Plan, lo: int, hi: int, mag_class=None) -> None:
    """Write the headers of seqs ``lo..hi-1`` of an in-order plan (:func:`plan_in_order`); ``mag_class``: their
    magnitude classes (``None``: class 0). Gives the bytes :func:`plan_packets` gives for the same classes: in one
    C pass (``_txlane.in_order_headers``) where the extension is built and its layout is this wire format's, else
    numpy's (:func:`write_headers_numpy`)."""
    native = _native_headers()
    if native is None:
        write_headers_numpy(plan, lo, hi, mag_class)
        return
    if mag_class is not None:
        mag_class = np.ascontiguousarray(mag_class, np.uint8)
        if mag_class.shape != (hi - lo,):
            raise ValueError(f"{mag_class.shape} magnitude classes for seqs {lo}..{hi - 1}")
    native(plan.headers, plan.template, lo, hi, plan.total, plan.chunk, plan.itemsize,
           int(plan.offsets[-1]) // plan.itemsize + int(plan.lengths[-1]) // plan.itemsize, mag_class)


#: ``_txlane.HEADER_LAYOUT`` as this wire format has it: (byte of flags, byte of mag_class, its shift, byte of seq,
#: of offset, of count, the LAST flag)
_LAYOUT = (wire.WIRE_DTYPE.fields[_W_FLAGS][1], wire.WIRE_DTYPE.fields[_W_MAG][1], _MAG_SHIFT,
           wire.WIRE_DTYPE.fields[_W_SEQ][1], wire.WIRE_DTYPE.fields[_W_OFFSET][1],
           wire.WIRE_DTYPE.fields[_W_COUNT][1], int(Flag.LAST), int(Flag.DROP_ELIGIBLE))
assert [wire.WIRE_DTYPE[w].itemsize for w in (_W_FLAGS, _W_MAG, _W_SEQ, _W_OFFSET, _W_COUNT)] == [1, 1, 4, 4, 2]


@functools.lru_cache(maxsize=1)
def _native_fns():
    try:
        from host.transport import _txlane
    except ImportError:  # pragma: no cover - without the build: numpy's path
        return None, None
    if getattr(_txlane, "HEADER_LAYOUT", None) != _LAYOUT:
        return None, None
    return _txlane.in_order_headers, _txlane.classified_plan


def _native_headers():
    """The C header writer, or None without the build, with another layout, or with ``DLCP_NATIVE=0``."""
    return None if os.environ.get("DLCP_NATIVE", "1") == "0" else _native_fns()[0]


def _native_plan():
    """The C builder of classified plans (``_txlane.classified_plan``), or None as :func:`_native_headers`."""
    return None if os.environ.get("DLCP_NATIVE", "1") == "0" else _native_fns()[1]


def _plan_native(native, nelems: int, itemsize: int, chunk: int, npk: int, classes, priority: int,
                 template: bytes) -> Plan:
    """:func:`plan_packets`'s plan from the C builder: the arrays :func:`_plan_arrays` (or :func:`_plan_lists`)
    gives, byte for byte (tests/host/test_chunking.py)."""
    offsets, lengths = np.empty(npk, np.int64), np.empty(npk, np.int64)
    eligible, tos, headers = np.empty(npk, bool), np.empty(npk, np.uint8), np.empty(npk, wire.WIRE_DTYPE)
    elig = mag = None
    if classes is not None:
        elig = np.ascontiguousarray(classes.eligible, bool)
        mag = np.ascontiguousarray(classes.mag_class, np.uint8)
    native(headers, offsets, lengths, eligible, tos, template, chunk, itemsize, nelems, elig, mag,
           tos_byte(priority, False), tos_byte(priority, True))
    return Plan(total=npk, chunk=chunk, offsets=offsets, lengths=lengths, eligible=eligible, headers=headers, tos=tos,
                itemsize=itemsize, template=template)


def write_headers_numpy(plan: Plan, lo: int, hi: int, mag_class=None) -> None:
    """:func:`write_headers` in numpy (the reference the C writer is held to)."""
    h = plan.headers[lo:hi]
    h[...] = np.frombuffer(plan.template, wire.WIRE_DTYPE)[0]
    flags = np.zeros(hi - lo, np.uint8)
    if hi == plan.total:
        flags[-1] = int(Flag.LAST)
    h[_W_FLAGS] = flags
    if mag_class is not None:
        mag = np.asarray(mag_class, np.uint8)
        if mag.shape != (hi - lo,):
            raise ValueError(f"{mag.shape} magnitude classes for seqs {lo}..{hi - 1}")
        if mag.any():
            h[_W_MAG] = h[_W_MAG] | (mag.astype(h[_W_MAG].dtype) << _MAG_SHIFT)
    h[_W_SEQ] = np.arange(lo, hi, dtype=np.uint32)
    h[_W_OFFSET] = plan.offsets[lo:hi]
    h[_W_COUNT] = plan.lengths[lo:hi] // plan.itemsize


def _template(priority, dtype, layer, rank, job_id, transfer_id, eligible, npk, nonce) -> bytes:
    """Every header is the transfer's template (one Header.pack, checked there) with its per-packet words set.
    The checked header without its transfer id is kept per sender, layer and size (a Header costs 30 us, 90 us on
    a cold cache, and a collective's transfers differ only in their ids); the 64-bit id fills its own two 32-bit
    words (``transfer_id`` and ``transfer_hi``)."""
    if not 0 <= transfer_id < 1 << 64:
        raise wire.WireError("transfer_id", f"value {transfer_id} does not fit in 64 bits")
    base = _checked_template(priority, DType(dtype), layer, rank, job_id, eligible, npk, nonce)
    return (base[:_TID_AT] + (transfer_id & 0xFFFFFFFF).to_bytes(4, "big") + base[_TID_AT + 4:_TID_HI_AT]
            + (transfer_id >> 32).to_bytes(4, "big") + base[_TID_HI_AT + 4:])


@functools.lru_cache(maxsize=256)
def _checked_template(priority, dtype, layer, rank, job_id, eligible, npk, nonce) -> bytes:
    # checked as the first protected packet (seq ``eligible``), whose flags are right with none set; the seq word is
    # then zeroed like the other per-packet words
    h = wire.Header(msg_type=MsgType.DATA, priority=priority, dtype=dtype, layer=layer, rank=rank, job_id=job_id,
                    transfer_id=0, eligible=eligible, seq=eligible, total=npk, nonce=nonce).pack()
    return h[:_SEQ_AT] + bytes(4) + h[_SEQ_AT + 4:]


_W_TID, _TID_SHIFT = wire.field_word("transfer_id")
_TID_AT = wire.WIRE_DTYPE.fields[_W_TID][1]  # byte offset of the transfer id's word
_SEQ_AT = wire.WIRE_DTYPE.fields[_W_SEQ][1]  # byte offset of the seq word
_W_TID_HI, _TID_HI_SHIFT = wire.field_word("transfer_hi")
_TID_HI_AT = wire.WIRE_DTYPE.fields[_W_TID_HI][1]
assert _TID_SHIFT == _TID_HI_SHIFT == 0 and wire.WIRE_DTYPE[_W_TID].itemsize == wire.WIRE_DTYPE[_W_TID_HI].itemsize \
    == 4 and _TID_AT < _TID_HI_AT, "the transfer id's two halves fill their words"


def _layout_in_order(nelems: int, itemsize: int, chunk: int, npk: int, priority: int, template) -> Plan:
    pos = np.arange(npk, dtype=np.int64)
    lengths = np.minimum(chunk, nelems - pos * chunk).clip(min=0) * itemsize
    return Plan(total=npk, chunk=chunk, offsets=pos * (chunk * itemsize), lengths=lengths,
                eligible=np.zeros(npk, bool), headers=np.empty(npk, wire.WIRE_DTYPE),
                tos=np.full(npk, tos_byte(priority, False), np.uint8), itemsize=itemsize, template=template)


#: Packets up to which a plan is built from Python lists: below it numpy's per-call cost (two dozen calls, 1-7 us
#: each, several times that on a cold cache) is most of a small send()'s set-up. Both builders give equal plans.
SMALL_PLAN = 16


def _plan_lists(nelems: int, itemsize: int, chunk: int, npk: int, classes, priority: int, template: bytes) -> Plan:
    counts = [max(0, min(chunk, nelems - i * chunk)) for i in range(npk)]
    elig = [False] * npk if classes is None else [bool(e) for e in np.asarray(classes.eligible).tolist()]
    mag = [0] * npk if classes is None else [int(m) for m in np.asarray(classes.mag_class).tolist()]
    # seq order: eligible positions first, then protected ones, each in position order (a stable sort)
    order = sorted(range(npk), key=lambda i: not elig[i]) if True in elig else range(npk)
    eligible = [elig[i] for i in order]
    cnt = [counts[i] for i in order]
    h = np.frombuffer(bytearray(template * npk), wire.WIRE_DTYPE)
    flags = [int(Flag.DROP_ELIGIBLE) if e else 0 for e in eligible]
    flags[-1] |= int(Flag.LAST)
    h[_W_FLAGS] = flags
    if any(mag):
        base = int(h[_W_MAG][0])
        h[_W_MAG] = [base | (mag[i] << _MAG_SHIFT) for i in order]
    h[_W_SEQ] = list(range(npk))
    offsets = [i * chunk * itemsize for i in order]
    h[_W_OFFSET] = offsets
    h[_W_COUNT] = cnt
    tp, te = tos_byte(priority, False), tos_byte(priority, True)
    return Plan(total=npk, chunk=chunk, offsets=np.array(offsets, np.int64),
                lengths=np.array([c * itemsize for c in cnt], np.int64), eligible=np.array(eligible, bool),
                headers=h, tos=np.array([te if e else tp for e in eligible], np.uint8), itemsize=itemsize,
                template=template)


def _plan_arrays(nelems: int, itemsize: int, chunk: int, npk: int, classes, priority: int, template: bytes) -> Plan:
    """A plan with drop-eligible packets (without any, :func:`_layout_in_order` and :func:`write_headers`)."""
    pos = np.arange(npk, dtype=np.int64)
    counts = np.minimum(chunk, nelems - pos * chunk).clip(min=0)
    elig_pos = np.asarray(classes.eligible, bool)
    mag_pos = np.asarray(classes.mag_class, np.uint8)
    # seq order: eligible positions first, then protected ones, each in position order (stable)
    order = np.argsort(~elig_pos, kind="stable")
    eligible = elig_pos[order]
    mag = mag_pos[order]
    cnt = counts[order]
    offsets = order * (chunk * itemsize)
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
                eligible=eligible, headers=h, tos=tos, itemsize=itemsize, template=template)

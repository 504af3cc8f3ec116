"""The transport's view of the DLCP header, and its control messages (ACK, NACK, CONTROL).

What: the 48-byte header as its 16 wire words (:data:`HDR`, indices ``W_*``), with which the hot receive path reads
a header in one ``struct`` call instead of building a ``wire.Header``; how an ACK/NACK/CONTROL header is written
(:func:`pack_control_header`); the CONTROL opcodes and their payload (:data:`CTL`); the 32-bit microsecond clock
ACK and NACK carry (:func:`clock_us`); the least reordering window both ends assume (:data:`REORDER_TIME`). Why a
module: the receiver, the sender, the liveness checks and the datagram intake all read and write these words, and
the tests check them against ``host.wire`` (``test_chunking.py``).

Promises: :func:`pack_control_header` writes exactly the fields ``wire.Header`` defines (priority 7, dtype 0, tag
0: the socket layer writes the keyed tag once the payload is there); the word indices are the header's field order.
"""

from __future__ import annotations

import struct

from host import wire
from host.policy import CONTROL_PRIORITY
from host.wire import DType

__all__ = ["HDR", "W_VT", "W_FLAGS", "W_PMR", "W_DTYPE", "W_LAYER", "W_RANK", "W_JOB", "W_TID", "W_ELIG", "W_SEQ",
           "W_TOTAL", "W_OFFSET", "W_COUNT", "W_NONCE", "W_TID_HI", "W_TAG", "ITEMSIZE", "NDTYPES", "FLAGS_AT",
           "CTL", "CTL_DONE", "CTL_DEAD", "CTL_PROBE", "CTL_ALIVE", "CTL_BYE", "BYE_CLOSING", "BYE_DONE",
           "DONE_UNKNOWN", "decode_words", "pack_control_header", "clock_us", "REORDER_TIME"]

#: The 48-byte header as its 16 wire words. Anything that fails the receive path's cheap checks on these words is
#: re-parsed by ``wire.parse_datagram`` to name the bad field.
HDR = wire.WORD_STRUCT
# word indices (tests/host/test_chunking.py checks them against wire.Header)
W_VT, W_FLAGS, W_PMR, W_DTYPE, W_LAYER, W_RANK, W_JOB, W_TID, W_ELIG, W_SEQ, W_TOTAL, W_OFFSET, W_COUNT, W_NONCE, \
    W_TID_HI, W_TAG = range(16)
#: element size by wire dtype code (0 for codes that name no dtype)
ITEMSIZE = [0] * 256
for _d in DType:
    ITEMSIZE[int(_d)] = _d.itemsize
NDTYPES = len(DType)
FLAGS_AT = wire.WIRE_DTYPE.fields[wire.WIRE_DTYPE.names[W_FLAGS]][1]  # byte offset of the flags

# CONTROL payloads: an opcode byte and a u32 argument (docs/transport.md, Packets and Failures)
CTL = struct.Struct("!BI")
CTL_DONE = 1  # the transfer named by the header is done; the argument: packets received (DONE_UNKNOWN: unknown)
CTL_DEAD = 2  # the rank in the argument is dead (the sender's own rank: it aborted); UTF-8 reason follows
CTL_PROBE = 3  # are you alive? (sent to a peer this rank waits on and has not heard from for a while)
CTL_ALIVE = 4  # the answer to a probe
CTL_BYE = 5  # closing handshake: argument BYE_CLOSING (this rank's endpoint is closing) or BYE_DONE (the answer:
#              the answering rank needs nothing more from it)
BYE_CLOSING, BYE_DONE = 0, 1
DONE_UNKNOWN = 0xFFFFFFFF  # a DONE's packet count when the receiver no longer knows it (a late packet's answer)

#: The least reordering window both ends assume (seconds): the sender judges a packet lost only when one sent this
#: much later (and a few packets later) was ACKed; the receiver waits at least this long after the LAST packet
#: before it NACKs the holes (each end adapts it: ``sender.py``, ``receiver.py``).
REORDER_TIME = 0.001


def decode_words(buf) -> tuple[int, ...]:
    """The 16 header words of ``buf`` (for tests and tools)."""
    return HDR.unpack_from(buf)


def pack_control_header(buf, msg_type: int, *, flags: int, rank: int, job_id: int, transfer_id: int,
                        seq: int, total: int, count: int, nonce: int, layer: int = 0, offset: int = 0) -> None:
    """Write an ACK/NACK/CONTROL header into ``buf[:HEADER_LEN]`` (priority 7, dtype 0, tag 0: the sender writes
    the tag once the payload is there). ``transfer_id`` is the 64-bit id. For ACK/NACK, ``offset`` carries the
    receiver's clock (:func:`clock_us`)."""
    HDR.pack_into(buf, 0, (wire.VERSION << 4) | msg_type, flags, CONTROL_PRIORITY << 5, 0, layer, rank, job_id,
                  transfer_id & 0xFFFFFFFF, 0, seq, total, offset, count, nonce, transfer_id >> 32, 0)


def clock_us(t: float) -> int:
    """A monotonic time as the 32-bit microsecond clock ACK/NACK carry in ``offset`` (wraps every 71 minutes)."""
    return int(t * 1e6) & 0xFFFFFFFF

"""A lossy socket wrapper: in-process loss, duplication, reordering and CE marking on the send path.

This kernel has no netem, so faults are injected where the endpoint hands datagrams to the kernel:
``Options(socket_wrapper=lambda s: LossySocket(s, loss=0.05, seed=1))``. The wrapper has the ``sendmsg`` signature of
a socket; every datagram it lets through is still a real UDP datagram through the real stack.

* ``loss`` / ``loss_eligible`` / ``loss_protected``: drop probabilities (by the DLCP drop-eligible flag; ``loss``
  sets both). ``loss_control``: for ACK/NACK/CONTROL messages.
* ``dup``: probability of sending a datagram twice.
* ``reorder``: probability of holding a datagram back until up to ``reorder_depth`` later ones have gone out.
* ``ce``: probability of sending a protected (ECT) data packet with CE instead, as a marking switch would.
* ``drop_fn(header_bytes) -> bool``: an extra, deterministic drop rule (e.g. "drop seq 3 of every transfer once").

Counters (``sent``, ``dropped``, ``duplicated``, ``reordered``, ``marked``) let tests check that faults happened.
"""

from __future__ import annotations

import random
import socket
import threading
from typing import Callable, Sequence

from host.wire import ECN_CE, HEADER_LEN, Flag, MsgType

__all__ = ["LossySocket"]


class LossySocket:
    def __init__(self, sock: socket.socket, *, loss: float = 0.0, loss_eligible: float | None = None,
                 loss_protected: float | None = None, loss_control: float = 0.0, dup: float = 0.0,
                 reorder: float = 0.0, reorder_depth: int = 8, ce: float = 0.0,
                 drop_fn: Callable[[bytes], bool] | None = None, seed: int | None = None):
        self.sock = sock
        self.loss_eligible = loss if loss_eligible is None else loss_eligible
        self.loss_protected = loss if loss_protected is None else loss_protected
        self.loss_control = loss_control
        self.dup, self.reorder, self.reorder_depth, self.ce = dup, reorder, reorder_depth, ce
        self.drop_fn = drop_fn
        self.rng = random.Random(seed)
        self._lock = threading.Lock()
        self._held: list[list] = []  # [remaining, buffers, ancdata, flags, addr]
        self.sent = self.dropped = self.duplicated = self.reordered = self.marked = 0

    def __getattr__(self, name):  # everything else (fileno, setsockopt, ...) is the real socket's
        return getattr(self.sock, name)

    def sendmsg(self, buffers: Sequence, ancdata=(), flags: int = 0, address=None) -> int:
        first = bytes(buffers[0][:HEADER_LEN])
        nbytes = sum(len(b) for b in buffers)
        with self._lock:
            out = self._decide(first, list(buffers), list(ancdata), flags, address)
            out.extend(self._release())
        for bufs, anc, fl, addr in out:
            self.sock.sendmsg(bufs, anc, fl, addr)
        return nbytes

    def flush(self) -> None:
        """Send every held-back datagram now."""
        with self._lock:
            held, self._held = self._held, []
        for _, bufs, anc, fl, addr in held:
            self.sock.sendmsg(bufs, anc, fl, addr)

    def _decide(self, first: bytes, bufs, anc, fl, addr) -> list:
        rng = self.rng
        msg_type = first[0] & 0x0F if first else 0xF
        if msg_type == MsgType.DATA:
            eligible = bool(first[1] & Flag.DROP_ELIGIBLE)
            p_loss = self.loss_eligible if eligible else self.loss_protected
        else:
            eligible = False
            p_loss = self.loss_control
        if (self.drop_fn is not None and self.drop_fn(first)) or (p_loss and rng.random() < p_loss):
            self.dropped += 1
            return []
        if msg_type == MsgType.DATA and not eligible and self.ce and rng.random() < self.ce:
            anc = [(lvl, typ, bytes([data[0] | ECN_CE])) if typ == socket.IP_TOS else (lvl, typ, data)
                   for lvl, typ, data in anc]
            self.marked += 1
        copies = 2 if (self.dup and rng.random() < self.dup) else 1
        self.duplicated += copies - 1
        if self.reorder and rng.random() < self.reorder:
            self.reordered += 1
            self._held.append([rng.randint(1, self.reorder_depth), bufs, anc, fl, addr])
            copies -= 1
        self.sent += copies
        return [(bufs, anc, fl, addr)] * copies

    def _release(self) -> list:
        out, keep = [], []
        for h in self._held:
            h[0] -= 1
            (out if h[0] <= 0 else keep).append(h)
        self._held = keep
        return [(b, a, f, ad) for _, b, a, f, ad in out]

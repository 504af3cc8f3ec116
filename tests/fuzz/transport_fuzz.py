"""Mutated DLCP datagrams into a live transport: two real endpoints on loopback, a genuine transfer between them in
every round, and a stream of hostile datagrams aimed at both while it runs.

Each round ``i`` of seed ``s`` (always the same inputs for the same ``(s, i)``):

* rank 0 sends a tensor (dtype, size and values drawn from the round's ``random.Random``) to rank 1, reliably
  (bounded loss off); rank 1 posts its receive before the send, or after it (the staging path);
* rank 1 also posts a *decoy* receive, and the injector plays a decoy transfer into it and into an unposted one;
* meanwhile the injector sends mutants (``tests/fuzz/mutate.py``) of genuine datagrams of this round's transfer,
  of the decoys, of earlier rounds' transfers (replays) and of ACK/NACK/CONTROL messages; some unmodified
  (replays), some several times (duplication), in a shuffled order (reordering). They leave a raw IP socket with
  the source address of the rank they claim (as a spoofing attacker sends them), or of a stranger.

Oracle, every round: the genuine receive completes within ``round_timeout`` (no hang) with exactly the tensor
that was sent and nothing zero-filled (no corrupted result), the send completes, no exception escapes any thread
(``threading.excepthook``) and the endpoints count no internal error; over the campaign the receiver's drop
counters (malformed, rejected, foreign, ...) grow.

Modes, for the per-packet tag (``wire.packet_tag``, a MAC under the job's key):

* ``off``: no key. Nothing authenticates a datagram then, so an impostor who can send with a member's address,
  job id and nonce *can* change a transfer (docs/transport.md says so): the fuzzer never sends a well-formed
  datagram that claims one of the genuine transfers (or a DEAD notice) unless it is byte for byte a genuine one.
* ``outsider``: the endpoints have a key, the fuzzer does not: mutants keep the genuine (now wrong) tag, nothing
  is filtered, and every mutant must be dropped (the genuine result is exact even under forged ACKs and DEAD
  notices).
* ``insider``: the fuzzer knows the key and tags every mutant, so it passes the tag check and reaches the
  parsing and receive checks behind it; filtered as in ``off`` (a key holder is a member).

``python -m tests.fuzz.transport_fuzz --seconds 60 --mode insider`` runs a longer campaign and prints the counts.
"""
from __future__ import annotations

import random
import socket
import struct
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from host import wire
from host.policy import LayerMagnitudePolicy, as_float_view
from host.transport import Endpoint, Options, TransportError
from host.transport.chunking import chunk_elems, plan_packets
from host.transport.control import CTL_ALIVE, CTL_DEAD, CTL_DONE, CTL_PROBE, pack_control_header
from host.transport.tensors import view_tensor
from host.wire import MsgType

from tests.fuzz.mutate import get_field, mutate, set_field

__all__ = ["MODES", "Result", "campaign", "spoofed_datagram", "main"]

MODES = ("off", "outsider", "insider")
JOB, NONCE = 0x5EED, 0xF022
MTU = 1500
#: transfer ids of the genuine transfers (one per round) and of the decoys: far apart, so a mutated id lands on
#: a genuine one only where the mode allows it
LEGIT_BASE, DECOY_BASE = 0x10000000, 0x60000000
_LEGIT_SPAN = 1 << 24
#: counters of the receiving endpoint that count a dropped datagram (by reason)
DROP_COUNTERS = ("malformed", "rejected", "foreign", "stray", "inconsistent", "unclaimed_dropped", "duplicates",
                 "late", "stale_feedback")
_DTYPES = (np.float32, np.float16, np.float64, np.int64, np.int32, np.uint8)
_SIZES = (0, 1, 7, 300, 2_000, 20_000, 120_000)


# --- datagrams ------------------------------------------------------------------------------------------------

def _packet_tag(key: bytes, header, payload) -> int:
    """The keyed tag of a datagram: the transport's own (the C send lane's) where it has one, else the reference
    ``wire.packet_tag`` (slow, a microsecond a byte)."""
    import host.transport.packetio as packetio
    fn = getattr(packetio, "packet_tag", None)
    if fn is not None:
        return fn(key, bytes(header), bytes(payload))
    return wire.packet_tag(key, bytes(header) + bytes(payload))


def _tag_field_exists() -> bool:
    return any(f.name == "tag" for f in wire.FIELDS)


def seal(dgram: bytes | bytearray, key: bytes | None) -> bytes:
    """``dgram`` with its tag field set under ``key`` (unchanged without a key, or a datagram too short to hold a
    header)."""
    if key is None or len(dgram) < wire.HEADER_LEN:
        return bytes(dgram)
    d = bytearray(dgram)
    hl = wire.HEADER_LEN
    set_field(d, "tag", _packet_tag(key, d[:hl], d[hl:]))
    return bytes(d)


def genuine_data(x: np.ndarray, *, tid: int, rank: int, layer: int = 0) -> list[bytes]:
    """The DATA datagrams a sender makes of ``x`` (reliable send, the default policy), in seq order, untagged."""
    tv = view_tensor(x)
    chunk = chunk_elems(MTU, tv.dtype.itemsize)
    npk = max(1, -(-tv.nelems // chunk))
    counts = np.minimum(chunk, tv.nelems - np.arange(npk, dtype=np.int64) * chunk).clip(min=0)
    values = as_float_view(tv.array, bf16=False)
    classes = LayerMagnitudePolicy().classify(values, counts, layer=layer, loss_bound=0.0)
    plan = plan_packets(nelems=tv.nelems, dtype=tv.dtype, mtu=MTU, classes=classes, layer=layer, rank=rank,
                        job_id=JOB, transfer_id=tid, nonce=NONCE)
    hdrs = plan.headers.view(np.uint8).reshape(-1, wire.HEADER_LEN)
    raw = bytes(tv.raw)
    return [hdrs[s].tobytes() + raw[int(plan.offsets[s]): int(plan.offsets[s] + plan.lengths[s])]
            for s in range(plan.total)]


def genuine_feedback(rng: random.Random, *, rank: int, tid: int, total: int) -> bytes:
    """An ACK, NACK or CONTROL datagram from ``rank`` about transfer ``tid``, untagged."""
    mt = rng.choice((MsgType.ACK, MsgType.NACK, MsgType.CONTROL))
    if mt == MsgType.CONTROL:
        op = rng.choice((CTL_DONE, CTL_PROBE, CTL_ALIVE, CTL_DEAD))
        arg = rank if op == CTL_DEAD else rng.choice((total, 0xFFFFFFFF))
        payload = struct.pack("!BI", op, arg) + (b"fuzz" if op == CTL_DEAD else b"")
        count = len(payload)
    else:
        count = rng.randint(1, 64)
        payload = wire.pack_bitmap(np.array([rng.random() < 0.7 for _ in range(count)], bool))
    buf = bytearray(wire.HEADER_LEN + len(payload))
    pack_control_header(buf, int(mt), flags=0, rank=rank, job_id=JOB, transfer_id=tid, seq=rng.randrange(max(1, total)),
                        total=total, count=count if mt != MsgType.CONTROL else len(payload), nonce=NONCE)
    buf[wire.HEADER_LEN:] = payload
    return bytes(buf)


def spoofed_datagram(src: tuple[str, int], dst: tuple[str, int], payload: bytes, tos: int = 0) -> bytes:
    """An IPv4 + UDP packet (for an ``IPPROTO_RAW`` socket) carrying ``payload`` from ``src`` to ``dst``. The
    kernel fills the IP checksum and id; the UDP checksum is 0 (none, allowed over IPv4)."""
    ulen = 8 + len(payload)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, tos, 20 + ulen, 0, 0, 64, socket.IPPROTO_UDP, 0,
                     socket.inet_aton(src[0]), socket.inet_aton(dst[0]))
    return ip + struct.pack("!HHHH", src[1], dst[1], ulen, 0) + payload


# --- the campaign -------------------------------------------------------------------------------------------------

@dataclass
class Result:
    """Counts of one campaign and every broken property."""

    mode: str = "off"
    native: bool = True
    seed: int = 0
    rounds: int = 0
    datagrams_sent: int = 0  # hostile datagrams that left the raw socket (mutants, replays, duplicates)
    mutants: int = 0
    replays: int = 0
    filtered: int = 0  # mutants not sent: well-formed claims on a genuine transfer in a mode without authentication
    genuine_bytes: int = 0
    reverse_failed: int = 0  # reverse decoys that failed (judged in the outsider mode only, see _round)
    crashes: int = 0
    hangs: int = 0
    corrupted: int = 0
    operators: dict[str, int] = field(default_factory=dict)
    drops: dict[str, int] = field(default_factory=dict)  # the receiver's drop counters over the campaign
    rejected_by_field: dict[str, int] = field(default_factory=dict)
    malformed_by_field: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


def _endpoint(rank: int, amap: dict[int, str], key: bytes | None, timeout: float, native: bool) -> Endpoint:
    """An endpoint of the fuzzed job (keyed when ``key`` is given), through the public constructor. ``native``:
    the C fast lanes (False: every datagram takes the Python path)."""
    opts = Options(peer_timeout=timeout, recv_timeout=timeout, native=native)
    if key is None:
        return Endpoint(rank, amap, JOB, NONCE, opts)
    return Endpoint(rank, amap, JOB, NONCE, opts, key=key)


def _brief(ep: Endpoint) -> dict[str, Any]:
    """An endpoint's non-zero counters and drops by field (for a failure's message)."""
    st = ep.stats()
    return {k: v for k, v in st.items() if v and k not in ("peers", "sock_buf_capped")}


def _drops(stats: dict[str, Any]) -> dict[str, int]:
    return {k: int(stats[k]) for k in DROP_COUNTERS if k in stats}


class _Forgery:
    """Which datagrams a mode without authentication may not send: those whose header claims a genuine transfer (or
    announces a member dead) and are not byte for byte a genuine datagram. The claim is read leniently (the
    words, as the receiver's cheap checks read them), not by ``wire.parse_datagram``: a header the wire format
    calls inconsistent (a LAST flag on another seq, say) may still pass the receiver's checks, and then it can
    open or fill the genuine transfer, which only the tag can prevent."""

    def __init__(self) -> None:
        self.genuine: set[bytes] = set()

    def forges(self, d: bytes, key: bytes | None) -> bool:
        if len(d) < wire.HEADER_LEN:
            return False
        body = bytearray(d)
        if key is not None:
            set_field(body, "tag", 0)
        if bytes(body) in self.genuine:
            return False
        if get_field(body, "job_id") != JOB or get_field(body, "nonce") != NONCE or get_field(body, "rank") > 1:
            return False
        if LEGIT_BASE <= get_field(body, "transfer_id") < LEGIT_BASE + _LEGIT_SPAN:
            return True
        return get_field(body, "msg_type") == MsgType.CONTROL and len(body) > wire.HEADER_LEN \
            and body[wire.HEADER_LEN] == CTL_DEAD


def campaign(seed: int, seconds: float, *, mode: str = "off", native: bool = True, min_rounds: int = 1,
             max_rounds: int = 10**9, mutants_per_round: tuple[int, int] = (20, 120),
             round_timeout: float = 15.0) -> Result:
    """Run rounds ``0, 1, ...`` of ``seed`` for ``seconds`` (at least ``min_rounds``); returns the counts.
    ``native``: the endpoints use their C fast lanes (the default, as in production) or the Python paths only."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    keyed = mode != "off"
    if keyed and not _tag_field_exists():
        raise RuntimeError(f"mode {mode!r} needs the keyed tag (host.wire has no 'tag' field)")
    key = bytes(random.Random(f"key:{seed}").randbytes(wire.KEY_LEN)) if keyed else None
    mkey = key if mode == "insider" else None  # what the fuzzer seals its mutants with
    res = Result(mode=mode, native=native, seed=seed)
    a, b = random.Random().randrange(1, 255), random.Random().randrange(1, 255)  # a private 127.a.b.0/24
    amap = {0: f"127.{a}.{b}.1", 1: f"127.{a}.{b}.2"}
    addr = {r: (h, wire.UDP_PORT) for r, h in amap.items()}
    stranger = (f"127.{a}.{b}.9", wire.UDP_PORT)

    escaped: list[str] = []
    old_hook = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        escaped.append(f"thread {args.thread.name if args.thread else '?'}: "
                       + "".join(traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback)))
        old_hook(args)

    threading.excepthook = hook
    raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    sender = _endpoint(0, amap, key, round_timeout, native)
    receiver = _endpoint(1, amap, key, round_timeout, native)
    eps = (sender, receiver)
    forgery = _Forgery()
    replay_pool: list[bytes] = []  # genuine datagrams of earlier rounds, untagged
    base = _drops(receiver.stats())
    deadline = time.monotonic() + seconds
    try:
        i = 0
        while i < max_rounds and (i < min_rounds or time.monotonic() < deadline):
            _round(i, seed, mode, key, mkey, res, raw, sender, receiver, addr, stranger, forgery, replay_pool,
                   mutants_per_round, round_timeout)
            res.rounds += 1
            i += 1
            st = [e.stats() for e in eps]
            bad = [s["internal_errors"] for s in st]
            if any(bad) or escaped:
                res.crashes += 1
                res.failures.append(f"round {seed}:{i - 1}: internal errors {bad}, escaped: {escaped[:2]}")
                escaped.clear()
            dead = [t.name for t in threading.enumerate() if t.name.startswith("dlcp-io-")]
            if len(dead) < 2:
                res.crashes += 1
                res.failures.append(f"round {seed}:{i - 1}: an endpoint's I/O thread is gone ({dead})")
                break
    finally:
        st = receiver.stats()
        res.drops = {k: v - base.get(k, 0) for k, v in _drops(st).items()}
        res.rejected_by_field = dict(st.get("rejected_by_field", {}))
        res.malformed_by_field = dict(st.get("malformed_by_field", {}))
        for e in eps:
            e.close()
        raw.close()
        threading.excepthook = old_hook
    if res.datagrams_sent and not sum(res.drops.values()):
        res.failures.append("the receiver counted no dropped datagram although hostile ones were sent")
    return res


def _round(i: int, seed: int, mode: str, key: bytes | None, mkey: bytes | None, res: Result,
           raw: socket.socket, sender: Endpoint, receiver: Endpoint, addr: dict[int, tuple[str, int]],
           stranger: tuple[str, int], forgery: _Forgery, replay_pool: list[bytes],
           mutants_per_round: tuple[int, int], round_timeout: float) -> None:
    rng = random.Random(f"{seed}:{i}")
    nrng = np.random.default_rng(rng.getrandbits(32))
    dt = np.dtype(rng.choice(_DTYPES))
    n = rng.choice(_SIZES)
    if dt.kind == "f":
        x = nrng.standard_normal(n).astype(dt)
    else:
        x = nrng.integers(0, 100 if dt == np.uint8 else 1 << 20, n).astype(dt)
    tid, decoy_tid, stray_tid = LEGIT_BASE + i, DECOY_BASE + 3 * i, DECOY_BASE + 3 * i + 1
    rev_tid = DECOY_BASE + 3 * i + 2  # a decoy the other way, rank 1 to rank 0: live sender state to attack
    layer = rng.randrange(4)
    legit = genuine_data(x, tid=tid, rank=0, layer=layer)
    dx = nrng.standard_normal(rng.choice((50, 900, 5000))).astype(np.float32)
    decoy = genuine_data(dx, tid=decoy_tid, rank=0)
    stray = genuine_data(dx[: max(1, len(dx) // 3)], tid=stray_tid, rank=0)
    for d in legit:
        forgery.genuine.add(d)
    rx = nrng.standard_normal(rng.choice((100, 3000, 30000))).astype(np.float32)
    rev_total = len(genuine_data(rx, tid=rev_tid, rank=1))
    feedback = [genuine_feedback(rng, rank=rng.choice((0, 1)), tid=rng.choice((tid, decoy_tid, stray_tid)),
                                 total=len(legit)) for _ in range(4)]
    feedback += [genuine_feedback(rng, rank=0, tid=rev_tid, total=rev_total) for _ in range(6)]
    # datagrams a member sends (and so tags): data of this round's transfers and of earlier rounds'; feedback
    # the fuzzer makes up is tagged only where the fuzzer holds the key (insider); an outsider cannot tag it, and
    # replaying what a member never sent is no replay
    sent = legit + decoy + stray + rng.sample(replay_pool, min(len(replay_pool), 20))
    made_up_key = key if mode == "insider" else None
    seeds = [seal(d, key) for d in sent] + [seal(d, made_up_key) for d in feedback]

    # the hostile stream: (datagram, destination rank, TOS)
    stream: list[tuple[bytes, int, int]] = []
    lo, hi = mutants_per_round
    for _ in range(rng.randint(lo, hi)):
        src = rng.choice(seeds)
        kind = rng.random()
        if kind < 0.12:  # a replay, unmodified
            d, ops = src, ["replay"]
            res.replays += 1
        else:
            d, ops = mutate(src, rng, seeds)
            if mkey is not None:
                d = seal(d, mkey)
            res.mutants += 1
        if mode != "outsider" and forgery.forges(d, key):
            res.filtered += 1
            continue
        for op in ops:
            res.operators[op] = res.operators.get(op, 0) + 1
        tos = rng.choice((0, 0, wire.ECN_ECT0, wire.ECN_CE, rng.randrange(256)))
        for _ in range(rng.choice((1, 1, 1, 2, 4))):  # duplication
            claimed = get_field(d, "rank") if len(d) >= wire.HEADER_LEN else 2
            dst = 1 - claimed if claimed in (0, 1) and rng.random() < 0.85 else rng.randrange(2)
            stream.append((d, dst, tos))
    # the decoy transfers, genuine (into a posted and an unposted receive), among the mutants
    stream += [(seal(d, key), 1, 0) for d in decoy + stray]
    rng.shuffle(stream)  # reordering
    # genuine copies of the transfer itself, duplicated and out of order (they must not corrupt it)
    stream += [(seal(d, key), 1, 0) for d in rng.sample(legit, min(len(legit), 4))]

    def inject() -> None:
        for k, (d, dst, tos) in enumerate(stream):
            claimed = get_field(d, "rank") if len(d) >= wire.HEADER_LEN else -1
            src = addr.get(claimed, stranger) if rng.random() < 0.9 else stranger
            try:
                raw.sendto(spoofed_datagram(src, addr[dst], d, tos), (addr[dst][0], 0))
                res.datagrams_sent += 1
            except OSError as e:  # (EMSGSIZE: an extension past the largest IP packet)
                res.operators["send_refused"] = res.operators.get("send_refused", 0) + 1
                if e.errno not in (90,):
                    raise
            if k % 16 == 15:
                time.sleep(0.0005)  # interleave with the genuine transfer instead of racing ahead of it

    out = np.full_like(x, 7 if dt.kind != "f" else np.nan)
    dout = np.zeros_like(dx)
    post_first = rng.random() < 0.7
    decoy_h = receiver.post_recv(0, decoy_tid, dout, timeout=round_timeout)
    rev_out = np.zeros_like(rx)
    rev_h = sender.post_recv(1, rev_tid, rev_out, timeout=round_timeout)
    rev_s = receiver.send(0, rx, transfer_id=rev_tid)
    h = receiver.post_recv(0, tid, out, timeout=round_timeout) if post_first else None
    injector = threading.Thread(target=inject, name="fuzz-inject", daemon=True)
    injector.start()
    where = f"round {seed}:{i} ({mode}, {n} x {dt.name})"
    try:
        sh = sender.send(1, x, transfer_id=tid, layer=layer)
        if h is None:
            time.sleep(rng.choice((0.0, 0.001, 0.01)))
            h = receiver.post_recv(0, tid, out, timeout=round_timeout)
        r = h.wait()
        if r.report.lost_ranges or not np.array_equal(r.data, x, equal_nan=False) \
                or r.data.tobytes() != x.tobytes():
            res.corrupted += 1
            res.failures.append(f"{where}: the received tensor differs from the sent one "
                                f"(lost {r.report.lost_ranges[:3]})")
        sh.wait(round_timeout)
        res.genuine_bytes += x.nbytes
    except TransportError as e:
        res.hangs += 1
        res.failures.append(f"{where}: the genuine transfer did not complete: {e}; sender {_brief(sender)}; "
                            f"receiver {_brief(receiver)}")
    finally:
        injector.join(round_timeout)
        if injector.is_alive():
            res.hangs += 1
            res.failures.append(f"{where}: the injector did not finish")
        decoy_h.cancel()
        # The reverse decoy meets forged feedback in every mode. Without a key (off) or from a key holder (insider)
        # a forged ACK or DONE can end its send early, and its receive then waits in vain: its outcome is counted,
        # not judged, and it is given a few seconds, not the round's timeout. An outsider must not disturb it.
        try:
            rr = rev_h.wait(round_timeout if mode == "outsider" else min(round_timeout, 3.0))
            if mode == "outsider" and (rr.report.lost_ranges or rev_out.tobytes() != rx.tobytes()):
                res.corrupted += 1
                res.failures.append(f"{where}: the reverse transfer's tensor differs from the sent one")
        except TransportError as e:
            res.reverse_failed += 1
            if mode == "outsider":
                res.hangs += 1
                res.failures.append(f"{where}: the reverse transfer did not complete: {e}")
        try:
            rev_s.wait(round_timeout)
        except TransportError as e:
            res.reverse_failed += 1
            if mode == "outsider":
                res.hangs += 1
                res.failures.append(f"{where}: the reverse send did not complete: {e}")
    replay_pool.extend(legit[:3] + decoy[:2])
    del replay_pool[:-200]


def main() -> int:
    from tests.fuzz.run import campaign_main
    return campaign_main(__doc__, campaign, lambda r: r.ok,
                         lambda ap: ap.add_argument("--mode", choices=MODES, default="off"))


if __name__ == "__main__":
    sys.exit(main())

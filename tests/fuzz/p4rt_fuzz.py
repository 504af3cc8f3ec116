"""Mutated P4Runtime requests against the real server of a running ``dlcp-switch`` (a subprocess running
p4src/dlcp.p4), over gRPC with finsy's protobufs.

Each case ``i`` of seed ``s`` (always the same request for the same ``(s, i)``) takes a valid request built from
the pipeline's P4Info (a WriteRequest of table entries, register and counter cells; a ReadRequest; a
SetForwardingPipelineConfigRequest; a StreamMessageRequest) and mutates it:

* field-wise: a scalar field anywhere in the message set to a boundary value (0, 1, -1, the largest of its type,
  an unknown enum value; bytes emptied, lengthened, cut, replaced), a repeated element dropped or duplicated, a
  sub-message cleared;
* byte-wise: the serialized request with bits flipped, bytes cut, inserted or overwritten, sent as raw bytes (the
  server's own parser sees it).

Oracle: every request is answered with a gRPC status within ``deadline`` (no hang), never an application
exception (``UNKNOWN`` "Exception calling application", the servicer's own crash report); the daemon process stays
alive and its state readable; a Write changes exactly what its accepted updates name: an update the server
refused leaves its entity as it was, and no entity outside the batch changes (Read before and after). Stream
messages are sent on a stream of their own, which must end with a status once the client half-closes.

``python -m tests.fuzz.p4rt_fuzz --seconds 60`` runs a longer campaign and prints the counts.
"""
from __future__ import annotations

import queue
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import grpc
from google.protobuf import descriptor as _desc
from google.protobuf.message import DecodeError, Message

from finsy.proto import p4i, p4r, p4r_grpc, rpc_status
from switch.backend.p4info import P4InfoBuilder
from switch.target import Switch

__all__ = ["Result", "campaign", "mutate_message", "mutate_bytes", "main"]

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "p4src" / "dlcp.p4"
INCLUDE = ROOT / "p4src" / "include"
_SVC = "/p4.v1.P4Runtime/"
_M_EXACT, _M_LPM, _M_TERNARY, _M_RANGE, _M_OPTIONAL = 2, 3, 4, 5, 6
_SET = p4r.SetForwardingPipelineConfigRequest


def _bits(v: int, width: int) -> bytes:
    """``v`` (masked to ``width`` bits) as P4Runtime's canonical bytestring: big-endian, no leading zero byte."""
    v &= (1 << width) - 1
    return v.to_bytes(max(1, (v.bit_length() + 7) // 8), "big")


# --- valid requests from the P4Info -----------------------------------------------------------------------------

class Corpus:
    """Valid requests for the pipeline described by ``info``."""

    def __init__(self, info: p4i.P4Info, device_config: bytes):
        self.info = info
        self.device_config = device_config
        self.actions = {a.preamble.id: a for a in info.actions}

    def table_entry(self, rng: random.Random, t: p4i.Table | None = None) -> p4r.TableEntry:
        t = t or rng.choice(self.info.tables)
        e = p4r.TableEntry(table_id=t.preamble.id)
        needs_priority = False
        for mf in t.match_fields:
            w = mf.bitwidth
            m = p4r.FieldMatch(field_id=mf.id)
            v = rng.getrandbits(w)
            if mf.match_type == _M_EXACT:
                m.exact.value = _bits(v, w)
            elif mf.match_type == _M_LPM:
                plen = rng.randint(1, w)
                m.lpm.value = _bits(v & (((1 << plen) - 1) << (w - plen)), w)
                m.lpm.prefix_len = plen
            elif mf.match_type == _M_TERNARY:
                needs_priority = True
                mask = rng.getrandbits(w) or 1
                m.ternary.value = _bits(v & mask, w)
                m.ternary.mask = _bits(mask, w)
            elif mf.match_type == _M_RANGE:
                needs_priority = True
                lo = rng.getrandbits(w)
                hi = rng.randint(lo, (1 << w) - 1)
                if (lo, hi) == (0, (1 << w) - 1):  # (the whole range is a don't-care: omitted)
                    continue
                m.range.low, m.range.high = _bits(lo, w), _bits(hi, w)
            else:
                m.optional.value = _bits(v, w)
                needs_priority = True
            e.match.append(m)
        if needs_priority:
            e.priority = rng.randint(1, 1000)
        a = self.actions[rng.choice(t.action_refs).id]
        e.action.action.action_id = a.preamble.id
        for p in a.params:
            e.action.action.params.append(p4r.Action.Param(param_id=p.id, value=_bits(rng.getrandbits(p.bitwidth),
                                                                                     p.bitwidth)))
        return e

    def write(self, rng: random.Random, election: int, known: list[p4r.TableEntry]) -> p4r.WriteRequest:
        req = p4r.WriteRequest(device_id=0, election_id=p4r.Uint128(high=0, low=election))
        for _ in range(rng.randint(1, 4)):
            u = req.updates.add()
            k = rng.random()
            if k < 0.5 or not known:
                u.type = p4r.Update.INSERT
                u.entity.table_entry.CopyFrom(self.table_entry(rng))
            elif k < 0.7:
                u.type = rng.choice((p4r.Update.MODIFY, p4r.Update.DELETE))
                u.entity.table_entry.CopyFrom(rng.choice(known))
            elif k < 0.85 and self.info.registers:
                r = rng.choice(self.info.registers)
                u.type = p4r.Update.MODIFY
                u.entity.register_entry.register_id = r.preamble.id
                u.entity.register_entry.index.index = rng.randrange(r.size)
                w = r.type_spec.bitstring.bit.bitwidth or 32
                u.entity.register_entry.data.bitstring = _bits(rng.getrandbits(w), w)
            elif self.info.counters:
                c = rng.choice(self.info.counters)
                u.type = p4r.Update.MODIFY
                u.entity.counter_entry.counter_id = c.preamble.id
                u.entity.counter_entry.index.index = rng.randrange(c.size)
                u.entity.counter_entry.data.packet_count = rng.randrange(1000)
            else:
                u.type = p4r.Update.INSERT
                u.entity.table_entry.CopyFrom(self.table_entry(rng))
        return req

    def read(self, rng: random.Random) -> p4r.ReadRequest:
        req = p4r.ReadRequest(device_id=0)
        for _ in range(rng.randint(1, 3)):
            k = rng.random()
            ent = req.entities.add()
            if k < 0.4:
                ent.table_entry.table_id = rng.choice((0, rng.choice(self.info.tables).preamble.id))
            elif k < 0.6:
                ent.table_entry.CopyFrom(self.table_entry(rng))
            elif k < 0.8 and self.info.registers:
                r = rng.choice(self.info.registers)
                ent.register_entry.register_id = r.preamble.id
                if rng.random() < 0.5:
                    ent.register_entry.index.index = rng.randrange(r.size)
            elif self.info.counters:
                c = rng.choice(self.info.counters)
                ent.counter_entry.counter_id = c.preamble.id
                if rng.random() < 0.5:
                    ent.counter_entry.index.index = rng.randrange(c.size)
            else:
                ent.table_entry.table_id = 0
        return req

    def set_pipeline(self, rng: random.Random, election: int) -> p4r.SetForwardingPipelineConfigRequest:
        req = _SET(device_id=0, election_id=p4r.Uint128(high=0, low=election), action=_SET.VERIFY)
        req.config.p4info.CopyFrom(self.info)
        req.config.p4_device_config = self.device_config
        req.config.cookie.cookie = rng.getrandbits(64)
        return req

    def stream_messages(self, rng: random.Random, election: int) -> list[p4r.StreamMessageRequest]:
        msgs = [p4r.StreamMessageRequest(arbitration=p4r.MasterArbitrationUpdate(
            device_id=0, election_id=p4r.Uint128(high=0, low=election + rng.choice((-1, 0, 1)))))]
        for _ in range(rng.randint(0, 3)):
            m = p4r.StreamMessageRequest()
            k = rng.random()
            if k < 0.6:
                m.packet.payload = rng.randbytes(rng.randint(0, 80))
                for mid in rng.sample((1, 2, 3), rng.randint(0, 2)):
                    m.packet.metadata.add(metadata_id=mid, value=_bits(rng.getrandbits(9), 9))
            elif k < 0.8:
                m.digest_ack.digest_id = rng.getrandbits(32)
                m.digest_ack.list_id = rng.getrandbits(64)
            else:
                m.arbitration.device_id = 0
                m.arbitration.election_id.low = rng.getrandbits(8)
            msgs.append(m)
        return msgs


# --- mutations ------------------------------------------------------------------------------------------------

_INT_BOUNDS = {
    _desc.FieldDescriptor.TYPE_INT32: (0, 1, -1, 2**31 - 1, -2**31),
    _desc.FieldDescriptor.TYPE_SINT32: (0, 1, -1, 2**31 - 1, -2**31),
    _desc.FieldDescriptor.TYPE_SFIXED32: (0, 1, -1, 2**31 - 1, -2**31),
    _desc.FieldDescriptor.TYPE_INT64: (0, 1, -1, 2**63 - 1, -2**63),
    _desc.FieldDescriptor.TYPE_SINT64: (0, 1, -1, 2**63 - 1, -2**63),
    _desc.FieldDescriptor.TYPE_SFIXED64: (0, 1, -1, 2**63 - 1, -2**63),
    _desc.FieldDescriptor.TYPE_UINT32: (0, 1, 2**31, 2**32 - 1),
    _desc.FieldDescriptor.TYPE_FIXED32: (0, 1, 2**31, 2**32 - 1),
    _desc.FieldDescriptor.TYPE_UINT64: (0, 1, 2**63, 2**64 - 1),
    _desc.FieldDescriptor.TYPE_FIXED64: (0, 1, 2**63, 2**64 - 1),
}


def _slots(msg: Message, path: tuple = ()) -> Iterator[tuple[Message, _desc.FieldDescriptor, int | None, tuple]]:
    """Every (message, field, index of a repeated element or None) reachable in ``msg``: set fields, and unset
    scalar fields of set messages (a mutation may set what a valid request leaves out)."""
    for fd in msg.DESCRIPTOR.fields:
        if fd.is_repeated:
            items = getattr(msg, fd.name)
            yield msg, fd, None, path + (fd.name,)
            for i, item in enumerate(items):
                if fd.type == fd.TYPE_MESSAGE:
                    yield msg, fd, i, path + (f"{fd.name}[{i}]",)
                    yield from _slots(item, path + (f"{fd.name}[{i}]",))
                else:
                    yield msg, fd, i, path + (f"{fd.name}[{i}]",)
        elif fd.type == fd.TYPE_MESSAGE:
            if msg.HasField(fd.name):
                yield msg, fd, None, path + (fd.name,)
                yield from _slots(getattr(msg, fd.name), path + (fd.name,))
        else:
            yield msg, fd, None, path + (fd.name,)


def _scalar(fd: _desc.FieldDescriptor, old: Any, rng: random.Random) -> Any:
    if fd.type in _INT_BOUNDS:
        return rng.choice(_INT_BOUNDS[fd.type] + ((old + 1) if isinstance(old, int) else 0,))
    if fd.type == fd.TYPE_ENUM:
        known = [v.number for v in fd.enum_type.values]
        return rng.choice(known + [max(known) + 1, 99, -1])
    if fd.type == fd.TYPE_BOOL:
        return not old
    if fd.type == fd.TYPE_BYTES:
        old = old or b""
        return rng.choice((b"", b"\x00", b"\x00" + old, old[:-1], old + b"\xff", b"\xff" * rng.randint(1, 40),
                           rng.randbytes(rng.randint(1, 20)), old[::-1]))
    if fd.type == fd.TYPE_STRING:
        return rng.choice(("", "x" * 300, "\u00e9\u0000", (old or "") + "_", "DlcpIngress." * 20))
    if fd.type in (fd.TYPE_DOUBLE, fd.TYPE_FLOAT):
        return rng.choice((0.0, -1.0, float("inf"), float("nan"), 1e308))
    return old


def mutate_message(msg: Message, rng: random.Random) -> tuple[Message, str]:
    """A copy of ``msg`` with one to three field-wise mutations; returns it and a description."""
    out = type(msg)()
    out.CopyFrom(msg)
    what = []
    for _ in range(rng.randint(1, 3)):
        slots = list(_slots(out))
        if not slots:  # (a message with nothing set and no scalar field)
            break
        parent, fd, idx, path = rng.choice(slots)
        name = ".".join(path)
        if fd.is_repeated:
            items = getattr(parent, fd.name)
            if idx is None or rng.random() < 0.3:
                if len(items) and rng.random() < 0.5:
                    del items[rng.randrange(len(items))]
                    what.append(f"drop {name}")
                elif len(items):
                    j = rng.randrange(len(items))
                    if fd.type == fd.TYPE_MESSAGE:
                        items.add().CopyFrom(items[j])
                    else:
                        items.append(items[j])
                    what.append(f"dup {name}")
                continue
            if fd.type == fd.TYPE_MESSAGE:
                items[idx].Clear() if rng.random() < 0.3 else None
                what.append(f"clear? {name}")
            else:
                items[idx] = _scalar(fd, items[idx], rng)
                what.append(f"set {name}")
        elif fd.type == fd.TYPE_MESSAGE:
            parent.ClearField(fd.name)
            what.append(f"clear {name}")
        else:
            try:
                setattr(parent, fd.name, _scalar(fd, getattr(parent, fd.name), rng))
                what.append(f"set {name}")
            except (ValueError, TypeError):   # (a value the client library itself refuses: not sent)
                what.append(f"refused {name}")
    return out, "; ".join(what)


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    """``data`` with bits flipped, a cut, an insertion or an overwrite (one to three)."""
    d = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        k = rng.randrange(4)
        if k == 0 and d:
            for _ in range(rng.randint(1, 8)):
                d[rng.randrange(len(d))] ^= 1 << rng.randrange(8)
        elif k == 1 and d:
            a = rng.randrange(len(d))
            del d[a: a + rng.randint(1, 32)]
        elif k == 2:
            a = rng.randrange(len(d) + 1)
            d[a:a] = rng.choice((b"\x00", b"\xff" * 9, rng.randbytes(rng.randint(1, 16)), b"\x0a\xff\xff\xff\x0f"))
        elif d:
            a = rng.randrange(len(d))
            d[a: a + 4] = rng.randbytes(min(4, len(d) - a))
    return bytes(d)


# --- the campaign -----------------------------------------------------------------------------------------------

@dataclass
class Result:
    """Counts of one campaign and every broken property."""

    seed: int = 0
    requests: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)  # write/read/pipeline/stream x field/bytes
    status_codes: dict[str, int] = field(default_factory=dict)
    examples: dict[str, str] = field(default_factory=dict)  # the first message seen with each status code
    updates_accepted: int = 0
    updates_refused: int = 0
    state_checks: int = 0
    crashes: int = 0
    hangs: int = 0
    partial_states: int = 0
    failures: list[str] = field(default_factory=list)


def _raw(ch: grpc.Channel, method: str, stream: bool = False) -> Callable:
    ident = lambda b: b  # noqa: E731 - bytes travel as they are
    if method == "Read":
        return ch.unary_stream(_SVC + method, request_serializer=ident, response_deserializer=ident)
    if stream:
        return ch.stream_stream(_SVC + method, request_serializer=ident, response_deserializer=ident)
    return ch.unary_unary(_SVC + method, request_serializer=ident, response_deserializer=ident)


def _canonical(m: p4r.FieldMatch) -> bytes:
    """A field match with its bytestrings in canonical form (no leading zero bytes): the server takes a value
    with leading zeros and reads it back canonical, so both name the same entry."""
    c = p4r.FieldMatch()
    c.CopyFrom(m)
    kind = c.WhichOneof("field_match_type")
    if kind is not None:
        sub = getattr(c, kind)
        for fd in sub.DESCRIPTOR.fields:
            if fd.type == fd.TYPE_BYTES:
                setattr(sub, fd.name, getattr(sub, fd.name).lstrip(b"\0") or b"\0")
    return c.SerializeToString(deterministic=True)


def _ekey(ent: p4r.Entity) -> tuple:
    """The identity of an entity (what a Read returns one of): table entries by table, match and priority."""
    kind = ent.WhichOneof("entity")
    if kind == "table_entry":
        t = ent.table_entry
        if t.is_default_action:
            return ("table", t.table_id, "default")
        ms = tuple(sorted(_canonical(m) for m in t.match))
        return ("table", t.table_id, ms, t.priority)
    if kind in ("register_entry", "counter_entry"):  # (no index: every cell, as a wildcard)
        e = getattr(ent, kind)
        return (kind.split("_")[0], e.register_id if kind == "register_entry" else e.counter_id,
                e.index.index if e.HasField("index") else "*")
    return (kind, ent.SerializeToString(deterministic=True))


class _Client:
    """A primary P4Runtime client of the daemon: the arbitration stream held open, typed and raw calls."""

    def __init__(self, addr: str, corpus: Corpus, deadline: float):
        self.addr, self.corpus, self.deadline = addr, corpus, deadline
        self.ch = grpc.insecure_channel(addr)
        self.stub = p4r_grpc.P4RuntimeStub(self.ch)
        self.election = 10
        self._q: queue.Queue = queue.Queue()
        self._q.put(p4r.StreamMessageRequest(arbitration=p4r.MasterArbitrationUpdate(
            device_id=0, election_id=p4r.Uint128(high=0, low=self.election))))
        self._stream = self.stub.StreamChannel(iter(self._q.get, None))
        first = next(self._stream)
        if first.arbitration.status.code != 0:
            raise RuntimeError(f"not primary: {first}")
        self.raw = {m: _raw(self.ch, m) for m in ("Write", "Read", "SetForwardingPipelineConfig")}

    def snapshot(self, registers: set[int] | None = None) -> dict[tuple, bytes]:
        """Every table entry and the cells of every register (of ``registers`` when given), by identity
        (wildcard Reads)."""
        req = p4r.ReadRequest(device_id=0)
        req.entities.add().table_entry.table_id = 0
        for r in self.corpus.info.registers:
            if registers is None or r.preamble.id in registers:
                req.entities.add().register_entry.register_id = r.preamble.id
        out: dict[tuple, bytes] = {}
        for resp in self.stub.Read(req, timeout=self.deadline):
            for ent in resp.entities:
                out[_ekey(ent)] = ent.SerializeToString(deterministic=True)
        return out

    def close(self) -> None:
        self._q.put(None)
        self.ch.close()


def _failed_updates(err: grpc.RpcError, n: int) -> list[int] | None:
    """Per-update canonical codes of a failed Write (from the google.rpc.Status trailer), or None."""
    for k, v in (err.trailing_metadata() or ()):
        if k == "grpc-status-details-bin":
            st = rpc_status.Status.FromString(v)
            codes = []
            for a in st.details:
                e = p4r.Error()
                a.Unpack(e)
                codes.append(e.canonical_code)
            return codes if len(codes) == n else None
    return None


def _check_status(res: Result, where: str, err: grpc.RpcError | None) -> str:
    code = "OK" if err is None else err.code().name
    res.status_codes[code] = res.status_codes.get(code, 0) + 1
    if err is not None:
        details = err.details() or ""
        res.examples.setdefault(code, details[:200])
        if code == "DEADLINE_EXCEEDED":
            res.hangs += 1
            res.failures.append(f"{where}: no answer within the deadline")
        elif code == "UNKNOWN" and "Exception calling application" in details \
                or code == "INTERNAL" and "internal error" in details:
            res.crashes += 1
            res.failures.append(f"{where}: the servicer raised: {details[:300]}")
        elif code == "UNAVAILABLE":
            res.crashes += 1
            res.failures.append(f"{where}: the server is gone: {details[:200]}")
    return code


def _write_case(c: _Client, res: Result, rng: random.Random, where: str, known: list[p4r.TableEntry]) -> None:
    req = c.corpus.write(rng, c.election, known)
    bytewise = rng.random() < 0.3
    if bytewise:
        data = mutate_bytes(req.SerializeToString(), rng)
        what = "byte-wise"
        try:
            sent = p4r.WriteRequest.FromString(data)  # what the server will see, if it parses
        except DecodeError:
            sent = None
    else:
        sent, what = mutate_message(req, rng)
        data = sent.SerializeToString()
    where = f"{where} ({what})"
    res.by_kind["write/" + ("bytes" if bytewise else "field")] = \
        res.by_kind.get("write/" + ("bytes" if bytewise else "field"), 0) + 1
    # every register on one write in 8 (13,000 cells take a while to read), else those the request names
    regs = None if rng.random() < 0.125 or sent is None else \
        {u.entity.register_entry.register_id for u in sent.updates if u.entity.HasField("register_entry")}
    before = c.snapshot(regs)
    err = None
    try:
        c.raw["Write"](data, timeout=c.deadline)
    except grpc.RpcError as e:
        err = e
    code = _check_status(res, where, err)
    after = c.snapshot(regs)
    res.state_checks += 1
    if sent is None:
        ok = []
    elif err is None:
        ok = list(range(len(sent.updates)))
    else:
        codes = _failed_updates(err, len(sent.updates)) if code == "UNKNOWN" else None
        ok = [i for i, cd in enumerate(codes) if cd == 0] if codes else []
        for i, cd in enumerate(codes or ()):
            if cd == 13:  # INTERNAL: the servicer caught an exception of its own (a bug) for this update
                res.crashes += 1
                res.failures.append(f"{where}: update {i} failed with an internal error: {err.details()[:300]}")
    if sent is not None:
        res.updates_accepted += len(ok)
        res.updates_refused += len(sent.updates) - len(ok)
    # what may change: the entities the accepted updates name; nothing else
    named = {_ekey(sent.updates[i].entity) for i in ok} if sent is not None else set()
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    stray = {k for k in changed - named if (k[0], k[1], "*") not in named}
    if stray:
        res.partial_states += 1
        res.failures.append(f"{where}: entities changed that no accepted update names ({code}, "
                            f"{len(ok)} accepted): {sorted(map(str, stray))[:3]}")
    for i in ok:
        u = sent.updates[i]
        k = _ekey(u.entity)
        if u.entity.WhichOneof("entity") != "table_entry" or u.entity.table_entry.is_default_action:
            continue
        if u.type in (p4r.Update.INSERT, p4r.Update.MODIFY) and k not in after:
            res.partial_states += 1
            res.failures.append(f"{where}: update {i} ({p4r.Update.Type.Name(u.type)}) accepted but Read does not "
                                "show its entry")
        elif u.type == p4r.Update.DELETE and k in after:
            res.partial_states += 1
            res.failures.append(f"{where}: update {i} (DELETE) accepted but Read still shows its entry")
        elif u.type == p4r.Update.INSERT:
            known.append(u.entity.table_entry)
            del known[:-50]


def _read_case(c: _Client, res: Result, rng: random.Random, where: str) -> None:
    req = c.corpus.read(rng)
    bytewise = rng.random() < 0.3
    data = mutate_bytes(req.SerializeToString(), rng) if bytewise else mutate_message(req, rng)[0].SerializeToString()
    res.by_kind["read/" + ("bytes" if bytewise else "field")] = \
        res.by_kind.get("read/" + ("bytes" if bytewise else "field"), 0) + 1
    err = None
    try:
        for _ in c.raw["Read"](data, timeout=c.deadline):
            pass
    except grpc.RpcError as e:
        err = e
    _check_status(res, where, err)


def _pipeline_case(c: _Client, res: Result, rng: random.Random, where: str) -> bool:
    """A mutated SetForwardingPipelineConfig; True when it may have replaced the pipeline (the caller restores)."""
    req = c.corpus.set_pipeline(rng, c.election)
    bytewise = rng.random() < 0.3
    if bytewise:
        req.config.p4info.Clear()  # (a byte-wise mutant of the whole P4Info is mostly a P4Info decode error)
        data = mutate_bytes(req.SerializeToString(), rng)
    else:
        m, _ = mutate_message(req, rng)
        if rng.random() < 0.5:  # the program text itself, cut or altered
            src = bytearray(m.config.p4_device_config)
            if src:
                a = rng.randrange(len(src))
                src[a: a + rng.randint(1, 20)] = rng.choice((b"", b"{", b"}", b";", rng.randbytes(3)))
            m.config.p4_device_config = bytes(src)
        data = m.SerializeToString()
    res.by_kind["pipeline/" + ("bytes" if bytewise else "field")] = \
        res.by_kind.get("pipeline/" + ("bytes" if bytewise else "field"), 0) + 1
    err = None
    try:
        c.raw["SetForwardingPipelineConfig"](data, timeout=c.deadline)
    except grpc.RpcError as e:
        err = e
    _check_status(res, where, err)
    return err is None


def _stream_case(c: _Client, res: Result, rng: random.Random, where: str) -> None:
    """Mutated stream messages on a stream of their own (a backup: its election id is below the primary's, or
    its arbitration is mutated); the stream must end with a status once the client half-closes."""
    msgs = c.corpus.stream_messages(rng, c.election - 5)
    bytewise = rng.random() < 0.3
    if bytewise:
        datas = [mutate_bytes(m.SerializeToString(), rng) if rng.random() < 0.6 else m.SerializeToString()
                 for m in msgs]
    else:
        datas = [(mutate_message(m, rng)[0] if rng.random() < 0.6 else m).SerializeToString() for m in msgs]
    # never take over as primary: a mutant arbitration with a higher election id than ours would demote us
    safe = []
    for d in datas:
        try:
            m = p4r.StreamMessageRequest.FromString(d)
            if m.HasField("arbitration") and (m.arbitration.election_id.high
                                              or m.arbitration.election_id.low >= c.election):
                m.arbitration.election_id.high = 0
                m.arbitration.election_id.low = rng.randrange(1, c.election)
                d = m.SerializeToString()
        except DecodeError:
            pass
        safe.append(d)
    res.by_kind["stream/" + ("bytes" if bytewise else "field")] = \
        res.by_kind.get("stream/" + ("bytes" if bytewise else "field"), 0) + 1
    call = _raw(c.ch, "StreamChannel", stream=True)(iter(safe), timeout=c.deadline)
    err = None
    try:
        for _ in call:
            pass
    except grpc.RpcError as e:
        err = e
    _check_status(res, where, err if err is None or err.code() != grpc.StatusCode.CANCELLED else None)


def _install(c: _Client) -> None:
    """The genuine pipeline, committed (the start state, and the state restored after a mutant replaced it)."""
    req = c.corpus.set_pipeline(random.Random(0), c.election)
    req.action = _SET.VERIFY_AND_COMMIT
    c.stub.SetForwardingPipelineConfig(req, timeout=max(c.deadline, 60))


def campaign(seed: int, seconds: float, *, min_cases: int = 1, max_cases: int = 10**9,
             deadline: float = 30.0, addr: str | None = None) -> Result:
    """Cases ``0, 1, ...`` of ``seed`` for ``seconds`` (at least ``min_cases``) against a daemon started here
    (or the one at ``addr``)."""
    sys.path.insert(0, str(ROOT / "tests" / "switch"))
    from switchd import Daemon  # the switch tests' helper: a real `dlcp-switch` subprocess
    info = P4InfoBuilder(Switch(str(PROGRAM), include_dirs=[str(INCLUDE)]).ir).build()
    corpus = Corpus(info, PROGRAM.read_bytes())
    res = Result(seed=seed)
    daemon = None if addr else Daemon("-I", str(INCLUDE), "--log-level", "error")
    c = None
    try:
        c = _Client(addr or daemon.addr, corpus, deadline)
        _install(c)
        known: list[p4r.TableEntry] = []
        end = time.monotonic() + seconds
        i = 0
        while i < max_cases and (i < min_cases or time.monotonic() < end):
            rng = random.Random(f"{seed}:{i}")
            where = f"case {seed}:{i}"
            k = rng.random()
            try:
                if k < 0.5:
                    _write_case(c, res, rng, where, known)
                elif k < 0.75:
                    _read_case(c, res, rng, where)
                elif k < 0.82:
                    if _pipeline_case(c, res, rng, where):
                        _install(c)  # (a mutant that was still a valid program may have been committed)
                        known.clear()
                else:
                    _stream_case(c, res, rng, where)
            except grpc.RpcError as e:  # a snapshot Read or a restore failed: the state is not readable
                res.crashes += 1
                res.failures.append(f"{where}: the server's state is no longer readable: {e.code().name} "
                                    f"{e.details()}")
                break
            res.requests += 1
            i += 1
            if daemon is not None and daemon.proc.poll() is not None:
                res.crashes += 1
                res.failures.append(f"{where}: the daemon exited ({daemon.proc.returncode}):\n{daemon.log()[-2000:]}")
                break
        if not res.failures:
            c.snapshot()  # readable at the end
    finally:
        if c is not None:
            c.close()
        if daemon is not None:
            rc = daemon.stop()
            if rc != 0 and not res.failures:
                res.crashes += 1
                res.failures.append(f"the daemon exited {rc} on SIGTERM:\n{daemon.log()[-2000:]}")
            daemon.close()
    return res


def main() -> int:
    from tests.fuzz.run import campaign_main
    return campaign_main(__doc__, campaign, lambda r: not r.failures)


if __name__ == "__main__":
    sys.exit(main())

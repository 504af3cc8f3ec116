"""Primary election over the P4Runtime StreamChannel, per (device id, role name), as p4lang/PI does.

* The stream with the highest election id of a (device, role) is primary; a stream that sent no election id is
  a backup forever.  A second stream with an election id already held: INVALID_ARGUMENT "Election id already
  exists" (finsy matches the text and retries lower).
* Answers: the primary gets status OK, the others ALREADY_EXISTS, everyone NOT_FOUND while there is no primary;
  ``election_id`` is the primary's (or the highest seen while there is none).  When the primary changes, every
  stream of the role is told.
* A stream that closes (or whose client vanished) leaves; if it was primary, the next highest becomes primary.
"""
from __future__ import annotations

import itertools
import queue
import threading
from dataclasses import dataclass, field

from finsy.proto import U128, p4r, rpc_code

from ...errors import SwitchError

_ids = itertools.count(1)

#: Messages that may wait in one stream's outgoing queue for a client that reads slowly or not at all.  Beyond it
#: PacketIn and digest messages are dropped (and counted, as a switch's CPU queue drops); arbitration and error
#: messages get :data:`CONTROL_HEADROOM` more, and a stream that fills that too is ended (RESOURCE_EXHAUSTED):
#: memory per stream stays bounded whatever the client does.
STREAM_QUEUE_LIMIT = 1024
CONTROL_HEADROOM = 64


@dataclass(eq=False)
class Stream:
    """One open StreamChannel: its outgoing queue (``None`` ends it; bounded, see :data:`STREAM_QUEUE_LIMIT`)
    and its arbitration state."""

    peer: str = ""
    id: int = field(default_factory=lambda: next(_ids))
    out: queue.Queue = field(default_factory=queue.Queue)
    device_id: int | None = None
    role: str = ""
    role_msg: p4r.Role | None = None
    election_id: int | None = None
    closed: bool = False
    error: tuple[str, str] | None = None       # (status name, message) to end the stream with
    dropped: int = 0                           # PacketIn/digest messages dropped on a full queue

    def send(self, msg, droppable: bool = False) -> bool:
        """Queue ``msg`` for the client; False when it was not queued (stream closed, or queue full).
        ``droppable``: a PacketIn or digest, dropped when :data:`STREAM_QUEUE_LIMIT` messages wait."""
        if self.closed:
            return False
        n = self.out.qsize()
        if n >= STREAM_QUEUE_LIMIT:
            if droppable:
                self.dropped += 1
                return False
            if n >= STREAM_QUEUE_LIMIT + CONTROL_HEADROOM:
                self.closed = True
                self.error = ("RESOURCE_EXHAUSTED", f"the client has not read {n} stream messages: stream closed")
                self.out.put(None)                   # the sentinel always fits: the queue itself is unbounded
                return False
        self.out.put(msg)
        return True


def unknown_device_message(device_id: int, served: set[int] | list[int]) -> str:
    """NOT_FOUND's text for a request to another device id: which one this switch is, and both ways to agree
    (clients differ in their default: p4runtime-shell and finsy use 1, BMv2 and dlcp-switch 0)."""
    ids = ", ".join(map(str, sorted(served)))
    return (f"unknown device id {device_id} (this switch is device {ids}: use device id {ids} in the client, "
            f"or start dlcp-switch with --device-id {device_id})")


class Arbiter:
    """The election state of every stream of one server."""

    def __init__(self, device_ids: set[int]):
        self.device_ids = set(device_ids)
        self.lock = threading.Lock()
        self.streams: list[Stream] = []
        self.highest: dict[tuple[int, str], int] = {}
        #: (device, role) -> primary stream; read without the lock by the packet thread (PacketIn, digests)
        self.primary: dict[tuple[int, str], Stream] = {}

    def _members(self, key) -> list[Stream]:
        return [s for s in self.streams if (s.device_id, s.role) == key]

    def _elect(self, key) -> Stream | None:
        cands = [s for s in self._members(key) if s.election_id is not None]
        return max(cands, key=lambda s: s.election_id) if cands else None

    def _reply(self, s: Stream, primary: Stream | None) -> p4r.StreamMessageResponse:
        key = (s.device_id, s.role)
        m = p4r.MasterArbitrationUpdate(device_id=s.device_id)
        if s.role_msg is not None:
            m.role.CopyFrom(s.role_msg)
        eid = primary.election_id if primary is not None else self.highest.get(key)
        if eid is not None:
            m.election_id.CopyFrom(U128.encode(eid))
        if primary is None:
            m.status.code, m.status.message = rpc_code.NOT_FOUND, "No primary controller"
        elif primary is s:
            m.status.code, m.status.message = rpc_code.OK, "Is primary"
        else:
            m.status.code, m.status.message = rpc_code.ALREADY_EXISTS, "Not primary"
        return p4r.StreamMessageResponse(arbitration=m)

    def update(self, s: Stream, m: p4r.MasterArbitrationUpdate) -> None:
        """Handle a MasterArbitrationUpdate from stream ``s``; raises SwitchError to end the stream."""
        if m.device_id not in self.device_ids:
            raise SwitchError("NOT_FOUND", unknown_device_message(m.device_id, self.device_ids))
        role = m.role.name if m.HasField("role") else ""
        if m.HasField("role") and m.role.HasField("config"):
            raise SwitchError("UNIMPLEMENTED", "role configs are not supported (roles without config have full access)")
        eid = U128.decode(m.election_id) if m.HasField("election_id") else None
        with self.lock:
            if s.device_id is not None and (s.device_id, s.role) != (m.device_id, role):
                raise SwitchError("FAILED_PRECONDITION", "a stream cannot change its device id or role")
            key = (m.device_id, role)
            if eid is not None and any(o is not s and o.election_id == eid for o in self._members(key)):
                raise SwitchError("INVALID_ARGUMENT", "Election id already exists")
            before = self.primary.get(key)
            if s not in self.streams:
                self.streams.append(s)
            s.device_id, s.role, s.election_id = m.device_id, role, eid
            s.role_msg = p4r.Role(name=role) if m.HasField("role") else None
            if eid is not None and eid > self.highest.get(key, -1):
                self.highest[key] = eid
            after = self._elect(key)
            self._set_primary(key, after)
            targets = self._members(key) if after is not before else [s]
            for o in targets:
                o.send(self._reply(o, after))

    def _set_primary(self, key, p: Stream | None) -> None:
        if p is None:
            self.primary.pop(key, None)
        else:
            self.primary[key] = p

    def remove(self, s: Stream) -> None:
        """Stream ``s`` ended: it loses primacy; the others of its role hear of a new primary."""
        with self.lock:
            s.closed = True
            if s not in self.streams:
                return
            self.streams.remove(s)
            key = (s.device_id, s.role)
            if self.primary.get(key) is s:
                after = self._elect(key)
                self._set_primary(key, after)
                for o in self._members(key):
                    o.send(self._reply(o, after))

    def check_primary(self, device_id: int, role: str, election_id: int | None) -> None:
        """For Write and SetForwardingPipelineConfig: PERMISSION_DENIED unless this is the primary."""
        p = self.primary.get((device_id, role))
        if p is None or election_id is None or p.election_id != election_id:
            raise SwitchError("PERMISSION_DENIED", "Not primary: only the primary controller of this device and "
                                                   "role may write")

    def primaries(self, device_id: int) -> list[Stream]:
        """Primary streams of every role of a device (PacketIn and digests go to them)."""
        return [s for (d, _r), s in list(self.primary.items()) if d == device_id]

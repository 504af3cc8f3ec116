"""P4Runtime I/O with finsy: connect (with a deadline), push the pipeline when its cookie differs, read, write.

One :class:`SwitchClient` is one ``finsy.Switch`` session to one switch. Everything that can fail on the wire
becomes a :mod:`controller.errors` exception naming the switch and its address:

* no answer within ``timeout`` (or the channel drops): :class:`SwitchUnreachable` with the time waited;
* a Write with rejected updates: :class:`WriteRejected` listing each rejected entry and its P4Runtime status;
* another request failing (pipeline, read, not primary): :class:`SwitchRequestFailed`.

Only finsy's public API is used. The session (arbitration, Write, PacketIn, the P4Info) is a ``finsy.Switch``.
Reads, the pipeline's cookie and the SetForwardingPipelineConfig go over a ``finsy.P4Client`` of the client's own,
opened on first use. Reads come back as the switch sends them: the diff compares canonical forms itself
(``state.canonical``), so decoding each entity into a finsy object and encoding it again, which was 0.6 s of a 1 s
``apply`` against a switch with 16k register cells, bought nothing. The pipeline requests take that channel
because finsy 0.30's ``Switch``
pushes a pipeline only while it connects and does not say whether it did, which ``apply`` reports; the request
carries the session's election id, so the switch takes it from the primary. The one thing finsy lacks entirely, a gRPC subchannel pool per channel, is added by replacing the
channel options class that ``P4Client.open`` builds (:class:`_LocalPoolOptions`). finsy is pinned in
pyproject.toml.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator, Awaitable, Callable, Iterable

import finsy as fy
import finsy.p4client
from finsy.grpcutil import GRPCOptions
from finsy.p4client import P4ClientError
from finsy.proto import U128, p4i, p4r

from .errors import (ProgramError, RejectedUpdate, SwitchRequestFailed, SwitchUnreachable, UsageError,
                     WriteRejected)
from .netfile import SwitchSpec
from .state import describe_entity

__all__ = ["Program", "load_program", "load_p4info_program", "SwitchClient", "writer_election_id", "READER_ELECTION_ID", "WRITE_BATCH",
           "send_packets"]

#: Updates per WriteRequest (a failed batch reports every rejected update; the others in it are applied).
WRITE_BATCH = 512
#: Election id of read-only sessions (show, watch): low, so they never take the primary role from a writer.
READER_ELECTION_ID = 1
#: Seconds between connection attempts to a switch that refuses them (still starting) within connect_timeout.
CONNECT_RETRY_S = 0.1

_UPDATE_NAMES = {p4r.Update.INSERT: "INSERT", p4r.Update.MODIFY: "MODIFY", p4r.Update.DELETE: "DELETE"}
_UNREACHABLE_CODES = {"UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED"}


def writer_election_id() -> int:
    """Election id of sessions that write: milliseconds since the epoch, so the latest writer becomes primary."""
    return int(time.time() * 1000)


# ---- the P4 program ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Program:
    """What ``apply`` pushes: the P4Info (from this project's front end, p4c's id scheme) and the device config
    (self-contained P4 source for the embedded target, p4c-bm2-ss JSON for BMv2)."""

    path: Path
    p4info: p4i.P4Info
    device_config: bytes
    #: other device configs that are the same program (the source before its includes were inlined, as another
    #: client such as p4runtime-shell pushes the file itself)
    same_configs: tuple[bytes, ...] = ()
    #: the switch loads this pipeline itself (a Tofino's SDE, from the compiler's output) and dlcpctl has no device
    #: config to push: the program is the P4Info alone, and a switch that runs another cannot be fixed by a push
    loaded_by_switch: bool = False

    def is_config(self, config: p4r.ForwardingPipelineConfig) -> bool:
        """Whether a switch's pipeline config is this program by content: the same P4Info and a device config
        that is this program's (whoever pushed it, with whatever cookie); the P4Info alone for a program the switch
        loads itself."""
        if self.loaded_by_switch:
            return config.p4info == self.p4info
        return config.p4info == self.p4info and config.p4_device_config in (self.device_config, *self.same_configs)

    @property
    def schema(self) -> fy.P4Schema:
        return fy.P4Schema(self.p4info, self.device_config)

    @property
    def cookie(self) -> int:
        return self.schema.p4cookie


_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$')


def inline_includes(path: Path, include_dirs: Iterable[Path] = (), _stack: tuple[Path, ...] = ()) -> str:
    """The source of ``path`` with every ``#include "file"`` replaced by that file's (recursively inlined) text,
    so the device config compiles on a switch that has none of our include directories. ``<...>`` includes
    (core.p4, v1model.p4) stay: every target has its own."""
    if path in _stack:
        raise ProgramError(f"{path}: recursive #include")
    out = []
    for line_no, line in enumerate(path.read_text().splitlines(), 1):
        include = _INCLUDE.match(line)
        if not include:
            out.append(line)
            continue
        name = include.group(1)
        cands = [path.parent / name] + [Path(d) / name for d in include_dirs]
        found = next((c for c in cands if c.is_file()), None)
        if found is None:
            raise ProgramError(f"{path}:{line_no}: cannot find include file {name!r}")
        out.append(f"/* ---- {name} (inlined by dlcpctl) ---- */")
        out.append(inline_includes(found.resolve(), include_dirs, _stack + (path,)))
        out.append(f"/* ---- end of {name} ---- */")
    return "\n".join(out) + "\n"


def load_program(path: Path, include_dirs: Iterable[Path] = (), bmv2_json: Path | None = None) -> Program:
    """Compile ``path`` with the embedded front end for its P4Info; raise :class:`ProgramError` on any error."""
    from switch.frontend.check import load_ir
    from switch.errors import P4Error
    from switch.backend.p4info import P4InfoBuilder

    include_dirs = tuple(include_dirs)
    if not path.is_file():
        raise ProgramError(f"P4 program not found: {path}")
    try:
        info = P4InfoBuilder(load_ir(str(path), [str(d) for d in include_dirs], {})).build()
    except P4Error as e:
        raise ProgramError(f"the P4 program does not compile: {e}") from None
    if bmv2_json is not None:
        return Program(path, info, bmv2_json.read_bytes())
    return Program(path, info, inline_includes(path, include_dirs).encode(), (path.read_bytes(),))


def load_p4info_program(p4info: Path, device_config: Path | None) -> Program:
    """A program from p4c's output: its P4Info (text format, e.g. ``--p4runtime-files x.p4info.txt``; binary
    ``.bin``/``.pb``; or ``.json``) and the device config pushed as is (e.g. p4c-bm2-ss's BMv2 JSON). Without a
    device config the switch loads the pipeline itself (a Tofino): :attr:`Program.loaded_by_switch`."""
    from google.protobuf import json_format, text_format

    try:
        raw = p4info.read_bytes()
        config = device_config.read_bytes() if device_config is not None else b""
    except OSError as e:
        raise ProgramError(f"cannot read p4c's output: {e}") from None
    info = p4i.P4Info()
    name = p4info.name.lower()
    fmt = "JSON" if name.endswith(".json") else "binary" if name.endswith((".bin", ".pb")) else "text format"
    try:
        if name.endswith(".json"):
            json_format.Parse(raw.decode(), info)
        elif name.endswith((".bin", ".pb")):
            info.ParseFromString(raw)
        else:
            text_format.Parse(raw.decode(), info)
    except (text_format.ParseError, json_format.ParseError, UnicodeDecodeError, ValueError) as e:
        raise ProgramError(f"{p4info}: not a P4Info ({fmt}): {e}") from None
    if info.ByteSize() == 0:  # (an empty or blank file parses as an empty P4Info; a program without tables does not:
        # p4c always writes pkg_info, and its actions, counters or controller headers)
        raise ProgramError(f"{p4info}: an empty P4Info (is it p4c's P4Info?)")
    return Program(p4info, info, config, loaded_by_switch=device_config is None)


# ---- one switch session ------------------------------------------------------------------------------------------


async def wait_listening(address: str, deadline: float) -> bool:
    """Wait until ``address`` (``HOST:PORT``) accepts TCP connections, trying every :data:`CONNECT_RETRY_S`;
    False when ``deadline`` (monotonic) passes first.

    The retry after a refused connection waits here rather than in gRPC: gRPC shares a subchannel per address
    between channels, with exponential reconnect backoff (up to 15 s under finsy), so channels opened while a
    switch restarts would keep failing for seconds after it listens again. Probing with plain TCP keeps no
    channel open, so the next channel starts without backoff."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    while True:
        if time.monotonic() + CONNECT_RETRY_S >= deadline:
            return False
        await asyncio.sleep(CONNECT_RETRY_S)
        if not port.isdigit():
            return True  # not HOST:PORT (e.g. unix:PATH): let gRPC try again
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)),
                                               max(deadline - time.monotonic(), 0.001))
        except (OSError, asyncio.TimeoutError):
            continue
        writer.close()
        return True


def _code(ex: P4ClientError) -> str:
    return ex.code.name if hasattr(ex.code, "name") else str(ex.code)


class SwitchClient:
    """An open P4Runtime session to one switch (use ``async with``).

    ``election_id=None`` opens a read-only session: no StreamChannel and so no arbitration at all (P4Runtime
    serves Read and GetForwardingPipelineConfig to any client), so it can never take the primary role from a
    running controller, nor make the switch tell its primary about a new member of the election. ``diff``,
    ``apply --dry-run``, ``show`` and ``watch`` read this way; writes and packets need a stream
    (``election_id`` a number)."""

    def __init__(self, spec: SwitchSpec, *, p4info: p4i.P4Info | None = None, election_id: int | None = None,
                 timeout: float = 5.0, ready_handler: Callable[[fy.Switch], Awaitable[None]] | None = None):
        self.spec = spec
        self.timeout = timeout
        self.read_only = election_id is None
        #: read-only sessions: the P4Info given, else the switch's (fetched at connect; None: no pipeline)
        self._p4info: p4i.P4Info | None = p4info
        creds = None
        if spec.tls is not None:
            creds = fy.GRPCCredentialsTLS(cacert=spec.tls.ca, cert=spec.tls.cert, private_key=spec.tls.key,
                                          target_name_override=spec.tls.server_name)
        opts = fy.SwitchOptions(p4info=p4info, device_id=spec.device_id,
                                initial_election_id=election_id or READER_ELECTION_ID,
                                channel_credentials=creds, ready_handler=ready_handler)
        self.sw = fy.Switch(spec.name, spec.address, opts)
        self._creds = creds
        #: pipeline requests (finsy's Switch keeps its own private), on a channel opened on first use
        self._rpc: fy.P4Client | None = None
        self._schema: fy.P4Schema | None = None
        self._open = False

    # -- session -------------------------------------------------------------------------------------------------
    async def __aenter__(self) -> "SwitchClient":
        """Connect and arbitrate, waiting up to ``timeout`` seconds: a switch that refuses connections (still
        starting, restarting) is retried every :data:`CONNECT_RETRY_S` until then."""
        t0 = time.monotonic()
        deadline = t0 + self.timeout
        if self.read_only:
            await self._open_read_only(t0, deadline)
            self._open = True
            return self
        while True:
            try:
                await asyncio.wait_for(self.sw.__aenter__(), max(deadline - time.monotonic(), 0.001))
                break
            except asyncio.TimeoutError:
                raise SwitchUnreachable(self.spec.name, self.spec.address, time.monotonic() - t0,
                                        f"no P4Runtime answer within {self.timeout:g} s") from None
            except P4ClientError as ex:
                if _code(ex) not in _UNREACHABLE_CODES:
                    raise SwitchRequestFailed(self.spec.name, self.spec.address, "connect (arbitration)", _code(ex),
                                              ex.message) from None
                if not await wait_listening(self.spec.address, deadline):
                    # the time waited includes the retries: the whole connect_timeout, not the first attempt
                    raise SwitchUnreachable(self.spec.name, self.spec.address, time.monotonic() - t0,
                                            f"{_code(ex)}: {ex.message}") from None
            except (OSError, RuntimeError) as ex:
                if not await wait_listening(self.spec.address, deadline):
                    raise SwitchUnreachable(self.spec.name, self.spec.address, time.monotonic() - t0,
                                            str(ex)) from None
        self._open = True
        return self

    async def _open_read_only(self, t0: float, deadline: float) -> None:
        """Connect without a stream: ask for the switch's P4Info (which also proves it answers), retrying a
        refused connection until ``deadline`` as the stream session does."""
        while True:
            try:
                rpc = await self._pipeline_channel()
                reply = await asyncio.wait_for(rpc.request(p4r.GetForwardingPipelineConfigRequest(
                    device_id=self.spec.device_id,
                    response_type=p4r.GetForwardingPipelineConfigRequest.P4INFO_AND_COOKIE)),
                    max(deadline - time.monotonic(), 0.001))
                if self._p4info is None and reply.config.HasField("p4info"):
                    self._p4info = reply.config.p4info
                return
            except asyncio.TimeoutError:
                await self._close_rpc()
                raise SwitchUnreachable(self.spec.name, self.spec.address, time.monotonic() - t0,
                                        f"no P4Runtime answer within {self.timeout:g} s") from None
            except P4ClientError as ex:
                if ex.is_pipeline_missing:
                    return
                await self._close_rpc()
                if _code(ex) not in _UNREACHABLE_CODES:
                    raise SwitchRequestFailed(self.spec.name, self.spec.address, "connect (GetForwardingPipelineConfig)",
                                              _code(ex), ex.message) from None
                if not await wait_listening(self.spec.address, deadline):
                    raise SwitchUnreachable(self.spec.name, self.spec.address, time.monotonic() - t0,
                                            f"{_code(ex)}: {ex.message}") from None

    async def _close_rpc(self) -> None:
        if self._rpc is not None:
            await self._rpc.close()
            self._rpc = None

    async def __aexit__(self, *exc) -> None:
        if self._open:
            self._open = False
            await self._close_rpc()
            if not self.read_only:
                await self.sw.__aexit__(None, None, None)

    def _fail(self, ex: P4ClientError, operation: str) -> Exception:
        if _code(ex) in _UNREACHABLE_CODES:
            return SwitchUnreachable(self.spec.name, self.spec.address, None,
                                     f"connection lost during {operation}: {_code(ex)}: {ex.message}")
        return SwitchRequestFailed(self.spec.name, self.spec.address, operation, _code(ex), ex.message)

    @property
    def is_primary(self) -> bool:
        return not self.read_only and self.sw.is_primary

    @property
    def p4info(self) -> p4i.P4Info:
        """The P4Info of this session: the one given, or the switch's (fetched at connect)."""
        info = self._p4info if self.read_only else (self.sw.p4info.p4info if self.sw.p4info.exists else None)
        if info is None:
            raise SwitchRequestFailed(self.spec.name, self.spec.address, "read P4Info", "FAILED_PRECONDITION",
                                      "the switch has no forwarding pipeline yet (run `dlcpctl apply` first)")
        return info

    @property
    def schema(self) -> fy.P4Schema:
        info = self.p4info  # raises a clear error when there is none
        if self.read_only:
            if self._schema is None:
                self._schema = fy.P4Schema(info)
            return self._schema
        return self.sw.p4info

    def require_primary(self, what: str) -> None:
        if self.read_only:
            raise SwitchRequestFailed(self.spec.name, self.spec.address, what, "PERMISSION_DENIED",
                                      "a read-only session (no election) cannot do this")
        if not self.sw.is_primary:
            raise SwitchRequestFailed(self.spec.name, self.spec.address, what, "PERMISSION_DENIED",
                                      f"another controller is primary (election id {self.sw.primary_id}, ours "
                                      f"{self.sw.election_id})")

    # -- pipeline ------------------------------------------------------------------------------------------------
    async def _pipeline_channel(self) -> fy.P4Client:
        if self._rpc is None:
            self._rpc = fy.P4Client(self.spec.address, self._creds, wait_for_ready=False)
            await self._rpc.open()
        return self._rpc

    async def pipeline_cookie(self) -> int | None:
        """The cookie of the switch's pipeline; None when it has none."""
        try:
            reply = await (await self._pipeline_channel()).request(p4r.GetForwardingPipelineConfigRequest(
                device_id=self.spec.device_id, response_type=p4r.GetForwardingPipelineConfigRequest.COOKIE_ONLY))
        except P4ClientError as ex:
            if ex.is_pipeline_missing:
                return None
            raise self._fail(ex, "GetForwardingPipelineConfig") from None
        return reply.config.cookie.cookie if reply.config.HasField("cookie") else None

    async def pipeline_config(self) -> p4r.ForwardingPipelineConfig | None:
        """The switch's whole pipeline config (P4Info, device config, cookie); None when it has none."""
        try:
            reply = await (await self._pipeline_channel()).request(p4r.GetForwardingPipelineConfigRequest(
                device_id=self.spec.device_id, response_type=p4r.GetForwardingPipelineConfigRequest.ALL))
        except P4ClientError as ex:
            if ex.is_pipeline_missing:
                return None
            raise self._fail(ex, "GetForwardingPipelineConfig") from None
        return reply.config

    async def runs(self, program: Program) -> bool:
        """Whether the switch runs ``program``: the same cookie, or else the same program by content (pushed by
        another client, e.g. p4runtime-shell, with no cookie or its own), which must not be pushed again: a
        push clears every table."""
        if await self.pipeline_cookie() == program.cookie:
            return True
        config = await self.pipeline_config()
        return config is not None and program.is_config(config)

    async def entries_lost_by_push(self, program: Program) -> dict[str, int]:
        """What replacing the switch's pipeline with ``program`` would clear that ``apply`` does not write
        again: entries per table of the program running now (const entries excluded), except in the tables
        ``apply`` manages in ``program`` (same full name). Empty when the switch has no pipeline."""
        from .state import MANAGED_TABLES

        config = await self.pipeline_config()
        if config is None:
            return {}
        names = {t.preamble.id: t.preamble.name for t in config.p4info.tables}
        managed = {t.preamble.name for t in program.p4info.tables
                   if t.preamble.alias in MANAGED_TABLES or t.preamble.name in MANAGED_TABLES}
        out: dict[str, int] = {}
        try:
            async for reply in (await self._pipeline_channel()).request_iter(p4r.ReadRequest(
                    device_id=self.spec.device_id, entities=[p4r.Entity(table_entry=p4r.TableEntry())])):
                for ent in reply.entities:
                    name = names.get(ent.table_entry.table_id, str(ent.table_entry.table_id))
                    if not ent.table_entry.is_const and name not in managed:
                        out[name] = out.get(name, 0) + 1
        except P4ClientError as ex:
            raise self._fail(ex, "Read (tables a new pipeline would clear)") from None
        return dict(sorted(out.items()))

    async def ensure_pipeline(self, program: Program) -> bool:
        """Push ``program`` unless the switch already runs it (:meth:`runs`). True when it pushed."""
        if await self.runs(program):
            return False
        self.require_primary("SetForwardingPipelineConfig")
        try:
            await (await self._pipeline_channel()).request(p4r.SetForwardingPipelineConfigRequest(
                device_id=self.spec.device_id, role=self.sw.role_name, election_id=U128.encode(self.sw.election_id),
                action=p4r.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT,
                config=program.schema.get_pipeline_config()))
        except P4ClientError as ex:
            raise self._fail(ex, f"SetForwardingPipelineConfig ({program.path.name})") from None
        return True

    # -- read / write --------------------------------------------------------------------------------------------
    async def read(self, entities: Iterable[p4r.Entity | fy.P4Entity]) -> list[p4r.Entity]:
        """The entities matching the given filters (one ReadRequest), as P4Runtime messages. On BMv2, registers are
        read through its Thrift CLI instead (:meth:`_bmv2_registers`)."""
        ents = [e if isinstance(e, p4r.Entity) else e.encode(self.schema) for e in entities]
        if self.spec.target == "bmv2" and any(e.HasField("register_entry") for e in ents):
            regs = [e for e in ents if e.HasField("register_entry")]
            rest = await self.read([e for e in ents if not e.HasField("register_entry")])
            return rest + await asyncio.to_thread(self._bmv2_registers, regs)
        if not ents:
            return []
        out: list[p4r.Entity] = []
        try:  # as the switch sends them (the diff compares canonical forms)
            async for reply in (await self._pipeline_channel()).request_iter(
                    p4r.ReadRequest(device_id=self.spec.device_id, entities=ents)):
                out.extend(reply.entities)
        except P4ClientError as ex:
            raise self._fail(ex, "Read") from None
        return out

    async def write(self, updates: list[p4r.Update]) -> int:
        """Write updates in batches; raise :class:`WriteRejected` naming every rejected entry. Returns the count."""
        if not updates:
            return 0
        self.require_primary("Write")
        if self.spec.target == "bmv2" and any(u.entity.HasField("register_entry") for u in updates):
            regs = [u for u in updates if u.entity.HasField("register_entry")]
            applied = await self.write([u for u in updates if not u.entity.HasField("register_entry")])
            await asyncio.to_thread(self._bmv2_register_write, regs)
            return applied + len(regs)
        rejected: list[RejectedUpdate] = []
        applied = 0
        for i in range(0, len(updates), WRITE_BATCH):
            batch = updates[i:i + WRITE_BATCH]
            try:
                await self.sw.write(batch)
                applied += len(batch)
            except P4ClientError as ex:
                if not ex.details:
                    raise self._fail(ex, "Write") from None
                for j, err in sorted(ex.details.items()):
                    update = batch[j]
                    rejected.append(RejectedUpdate(_UPDATE_NAMES.get(update.type, str(update.type)),
                                                   describe_entity(update.entity, self.schema),
                                                   err.canonical_code.name, err.message))
                applied += len(batch) - len(ex.details)
        if rejected:
            raise WriteRejected(self.spec.name, self.spec.address, rejected, len(updates), applied)
        return applied

    # -- BMv2 registers -------------------------------------------------------------------------------------------
    # BMv2's P4Runtime server answers UNIMPLEMENTED to register Reads and Writes (controller/bmv2.py): the same
    # entities go through its Thrift CLI, by the register's name, so callers see P4Runtime messages either way.
    def _bmv2_registers(self, filters: list[p4r.Entity]) -> list[p4r.Entity]:
        from . import bmv2

        schema = self.schema
        out: list[p4r.Entity] = []
        cache: dict[int, list[int]] = {}
        for f in filters:
            rid = f.register_entry.register_id
            ids = [rid] if rid else [r.id for r in schema.registers]
            for i in ids:
                if i not in cache:
                    try:
                        cache[i] = bmv2.register_read(self.spec.thrift_port, schema.registers[i].name)
                    except bmv2.Bmv2CliError as e:
                        raise SwitchRequestFailed(self.spec.name, self.spec.address, "Read (register, Thrift CLI)",
                                                  "UNKNOWN", str(e)) from None
                cells = cache[i]
                idx = [f.register_entry.index.index] if f.register_entry.HasField("index") else range(len(cells))
                for k in idx:
                    v = cells[k]
                    out.append(p4r.Entity(register_entry=p4r.RegisterEntry(
                        register_id=i, index=p4r.Index(index=k),
                        data=fy.proto.p4d.P4Data(bitstring=v.to_bytes(max(1, (v.bit_length() + 7) // 8), "big")))))
        return out

    def _bmv2_register_write(self, updates: list[p4r.Update]) -> None:
        from . import bmv2

        cells = []
        for u in updates:
            r = u.entity.register_entry
            if u.type != p4r.Update.MODIFY or not r.HasField("index"):
                raise SwitchRequestFailed(self.spec.name, self.spec.address, "Write (register)", "INVALID_ARGUMENT",
                                          "registers take MODIFY of one index")
            cells.append((self.schema.registers[r.register_id].name, r.index.index,
                          int.from_bytes(r.data.bitstring, "big")))
        try:
            bmv2.register_write(self.spec.thrift_port, cells)
        except bmv2.Bmv2CliError as e:
            raise SwitchRequestFailed(self.spec.name, self.spec.address, "Write (register, Thrift CLI)", "UNKNOWN",
                                      str(e)) from None

    # -- packets -------------------------------------------------------------------------------------------------
    async def packet_in(self) -> AsyncIterator[fy.P4PacketIn]:
        """PacketIn messages as they arrive (only the primary receives them)."""
        self.require_primary("PacketIn")
        async for pkt in self.sw.read_packets():
            yield pkt


async def send_packets(spec: SwitchSpec, payloads: list[bytes], metadata: dict[str, int] | None = None, *,
                       timeout: float = 5.0) -> None:
    """Send PacketOut messages on a StreamChannel of their own and return once the switch has processed them.

    P4Runtime does not acknowledge PacketOut, and a stream closed right after a write may lose what the server
    had not read yet. So the session becomes primary (MasterArbitrationUpdate), sends the packets, then sends
    the same arbitration update again and waits for its answer: the server handles a stream's messages in
    order, so by then every PacketOut was taken (or refused with a StreamError, which is raised here)."""

    creds = None
    if spec.tls is not None:
        creds = fy.GRPCCredentialsTLS(cacert=spec.tls.ca, cert=spec.tls.cert, private_key=spec.tls.key,
                                      target_name_override=spec.tls.server_name)
    client = fy.P4Client(spec.address, creds, wait_for_ready=False)
    await client.open()
    arb = p4r.StreamMessageRequest(arbitration=p4r.MasterArbitrationUpdate(
        device_id=spec.device_id, election_id=U128.encode(writer_election_id())))
    t0 = time.monotonic()

    async def answer() -> p4r.MasterArbitrationUpdate:
        while True:
            msg = await client.receive()
            kind = msg.WhichOneof("update")
            if kind == "arbitration":
                return msg.arbitration
            if kind == "error":
                raise SwitchRequestFailed(spec.name, spec.address, "PacketOut",
                                          _code_name(msg.error.canonical_code), msg.error.message)

    try:
        try:
            await client.send(arb)
            first = await asyncio.wait_for(answer(), timeout)
        except asyncio.TimeoutError:
            raise SwitchUnreachable(spec.name, spec.address, time.monotonic() - t0,
                                    f"no P4Runtime answer within {timeout:g} s") from None
        except P4ClientError as ex:
            if _code(ex) in _UNREACHABLE_CODES:
                raise SwitchUnreachable(spec.name, spec.address, time.monotonic() - t0,
                                        f"{_code(ex)}: {ex.message}") from None
            raise SwitchRequestFailed(spec.name, spec.address, "arbitration", _code(ex), ex.message) from None
        if first.status.code != 0:
            raise SwitchRequestFailed(spec.name, spec.address, "PacketOut", "PERMISSION_DENIED",
                                      f"not primary: {first.status.message}")
        reply = await client.request(p4r.GetForwardingPipelineConfigRequest(
            device_id=spec.device_id, response_type=p4r.GetForwardingPipelineConfigRequest.P4INFO_AND_COOKIE))
        cpm = fy.P4Schema(reply.config.p4info).controller_packet_metadata.get("packet_out")
        metadata = packet_out_metadata(cpm, metadata)
        encoded: list[p4r.PacketMetadata] = []
        if metadata:
            if cpm is None:
                raise ProgramError("the program has no @controller_header(\"packet_out\"): PacketOut takes no "
                                   "metadata")
            encoded = list(cpm.encode(metadata))
        for payload in payloads:
            await client.send(p4r.StreamMessageRequest(packet=p4r.PacketOut(payload=payload, metadata=encoded)))
        await client.send(arb)
        try:
            await asyncio.wait_for(answer(), timeout)
        except asyncio.TimeoutError:
            raise SwitchUnreachable(spec.name, spec.address, timeout, "no answer after PacketOut") from None
    except P4ClientError as ex:
        raise SwitchRequestFailed(spec.name, spec.address, "PacketOut", _code(ex), ex.message) from None
    finally:
        await client.close()


def packet_out_metadata(header, metadata: dict[str, int] | None) -> dict[str, int] | None:
    """The PacketOut metadata to send: the caller's, plus ``do_forwarding=1`` when the program's packet_out
    header has that field (dlcp.p4) and the caller set neither it nor ``egress_port``, so that a plain
    ``packet-out`` is routed like a frame arriving on the CPU port. ``header`` is the program's packet_out
    controller header (finsy's), None when it has none."""
    if header is None:
        return metadata
    names = [field.name for field in header.metadata]
    given = dict(metadata or {})
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise UsageError(f"the program's packet_out header has no field {', '.join(unknown)} "
                         f"(its fields: {', '.join(names)})")
    if "do_forwarding" in names and not {"do_forwarding", "egress_port"} & set(given):
        given["do_forwarding"] = 1
    return {name: given.get(name, 0) for name in names}  # finsy encodes every field; unset ones are 0


def _code_name(code: int) -> str:
    from finsy.proto import rpc_code

    try:
        return rpc_code.Code.Name(code)
    except ValueError:
        return str(code)


class _LocalPoolOptions(GRPCOptions):
    """finsy's channel options plus a subchannel pool of the channel's own (what finsy lacks; see the module
    docstring).

    gRPC shares one subchannel per address between a process's channels, with its reconnect backoff (1 s
    growing to finsy's 15 s): after a switch restarts, a new session would keep failing on the old subchannel's
    backoff for seconds although the switch listens. With a pool per channel every new session connects at
    once. finsy 0.30 builds its options in ``P4Client.open`` from this module-level name (finsy is pinned)."""

    def to_native(self):
        return [*super().to_native(), ("grpc.use_local_subchannel_pool", 1)]


finsy.p4client.GRPCOptions = _LocalPoolOptions  # type: ignore[misc]
logging.getLogger("finsy").addHandler(logging.NullHandler())

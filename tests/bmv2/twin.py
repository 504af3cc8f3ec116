"""BMv2 and dlcp-switch side by side, for the differential tests of ``make test-bmv2`` (docs/switch-target.md,
"Against BMv2").

* :func:`controller.bmv2.compile_p4c` compiles a program with ``p4c-bm2-ss`` (BMv2 JSON, p4c's P4Info).
* :class:`Bmv2` is one ``simple_switch_grpc`` process (no program: the controller pushes it), on the command line
  convention the testbed's ``Bmv2Switch`` uses.
* :class:`Twin` is both switches, each on its own veth pairs in the root namespace (IPv6 off, offloads off), with
  the test's AF_PACKET :class:`~switch.daemon.portio.Port` on the far end of every pair, the same switch port numbers on
  both. :meth:`Twin.session` pushes one program to both (BMv2: p4c's JSON and P4Info; dlcp-switch: the source and
  its own P4Info) through ``dlcpctl``'s library (:class:`controller.client.SwitchClient`); :class:`Pair` then
  writes the same P4Runtime updates to both, sends the same frame into both and returns what each sent out, and
  reads every counter and register (on BMv2 the client reads and writes registers through the Thrift CLI, as its
  P4Runtime server implements no register access: :mod:`controller.bmv2`).
* A switch a test leaves dead or stuck fails that test and no other: when a session ends, the harness checks
  that both processes still run and that BMv2 can still load a pipeline (simple_switch swaps one only when no
  packet is inside it, so a packet the program recirculates for ever, or a BMv2 that stopped answering, makes
  every later push hang); if not, it restarts the switch on the same interfaces and raises
  :class:`SwitchFailure` in the test that was running, with BMv2's log.
* :class:`Tally` counts the cases compared and the differences found, for the results file.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import AsyncIterator

import finsy as fy
from finsy.proto import p4r
from google.protobuf import text_format

from controller import bmv2 as bmv2_cli
from controller.bmv2 import P4cOutput, compile_p4c as p4c
from controller.client import Program, SwitchClient, load_p4info_program, load_program, writer_election_id
from controller.errors import ControllerError, SwitchUnreachable
from controller.netfile_model import SwitchSpec
from controller.tm import open_tm
from switch.daemon.portio import Port

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "switch"))
from switchd import Daemon, sh, wait_up  # noqa: E402

#: what make test-bmv2 needs on PATH (the toolchain's p4tools.env puts them there)
BINARIES = ("p4c-bm2-ss", "simple_switch_grpc", bmv2_cli.BMV2_CLI)
SIDES = ("bmv2", "dlcp-switch")
#: seconds BMv2 gets to load a pipeline when a session ends before it counts as stuck (a load takes well under one;
#: a stuck one answers DEADLINE_EXCEEDED after about 10 s)
SETTLE_S = 20.0
#: BMv2's log level (its log goes to the test's failure message when it dies or sticks); "debug" logs each packet
LOG_LEVEL = os.environ.get("BMV2_LOG_LEVEL", "info")


class SwitchFailure(Exception):
    """A switch of the twin died, or BMv2 could no longer load a pipeline, during the test that ran on it (the
    harness restarted it, so later tests get a working one)."""


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if shutil.which(b) is None]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Bmv2:
    """A running ``simple_switch_grpc`` with no program, P4Runtime on ``addr``, Thrift on ``thrift_port``."""

    def __init__(self, ports: dict[int, str], *, cpu_port: int | None = None, priority_queues: int | None = None,
                 timeout: float = 30.0, log_level: str | None = LOG_LEVEL):
        self.grpc_port, self.thrift_port = free_port(), free_port()
        self.addr = f"127.0.0.1:{self.grpc_port}"
        self.log_file = tempfile.NamedTemporaryFile(prefix="bmv2-", suffix=".log", delete=False)
        cmd = ["simple_switch_grpc", "--device-id", "0", "--thrift-port", str(self.thrift_port)]
        for port, ifname in sorted(ports.items()):
            cmd += ["-i", f"{port}@{ifname}"]
        if log_level is not None:                     # None: no logger at all (speed measurements)
            cmd += ["--log-console", "-L", log_level]
        cmd += ["--no-p4", "--", "--grpc-server-addr", self.addr]
        if cpu_port is not None:
            cmd += ["--cpu-port", str(cpu_port)]
        if priority_queues is not None:
            cmd += ["--priority-queues", str(priority_queues)]
        self.proc = subprocess.Popen(cmd, stdout=self.log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"simple_switch_grpc exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with socket.create_connection(("127.0.0.1", self.grpc_port), timeout=0.2), \
                        socket.create_connection(("127.0.0.1", self.thrift_port), timeout=0.2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    self.close()
                    raise RuntimeError(f"simple_switch_grpc did not listen within {timeout} s:\n{self.log()}")
                time.sleep(0.05)

    def log(self) -> str:
        return Path(self.log_file.name).read_text(errors="replace")[-4000:]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        os.unlink(self.log_file.name)


Frames = list[tuple[int, bytes]]


@dataclass(frozen=True)
class Deviation:
    """A documented BMv2 deviation (docs/switch-target.md, "Against BMv2"): why BMv2 differs, and exactly what
    each side must give for it to count as that deviation rather than as a difference."""

    why: str
    bmv2: object
    ours: object


@dataclass
class Tally:
    """Cases compared, differences found (with what differed) and documented BMv2 deviations seen, per group of
    tests."""

    cases: int = 0
    differences: list[str] = field(default_factory=list)
    deviations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)      # what a reader of the results needs besides the counts

    def compare(self, what: str, bmv2, ours, deviation: Deviation | None = None) -> bool:
        """Count a case; False (and a difference) unless both sides gave the same, or ``deviation`` says what
        each gives instead and both gave exactly that."""
        self.cases += 1
        if bmv2 == ours:
            return True
        if deviation is not None and bmv2 == deviation.bmv2 and ours == deviation.ours:
            self.deviations.append(f"{what}: {deviation.why}: bmv2 {bmv2!r}, dlcp-switch {ours!r}"[:2000])
            return True
        self.differences.append(f"{what}: bmv2 {bmv2!r} != dlcp-switch {ours!r}"[:2000])
        return False


class Twin:
    """Both switches on veth pairs with the same port numbers (see the module docstring)."""

    def __init__(self, ports: tuple[int, ...], *, cpu_port: int | None = None, priority_queues: int | None = None,
                 include_dirs: tuple[Path, ...] = ()):
        self.tag = f"bt{os.getpid() % 100000}"
        self.ports = ports
        # side letter b / e; near end (switch) <tag><side>s<port>, far end (test) <tag><side>t<port>
        self.pairs = {(side, p): (f"{self.tag}{side[0]}s{p}", f"{self.tag}{side[0]}t{p}")
                      for side in SIDES for p in ports}
        self.taps: dict[str, dict[int, Port]] = {side: {} for side in SIDES}
        self.bmv2: Bmv2 | None = None
        self.daemon: Daemon | None = None
        self.sessions = 0
        self.bmv2_options = {"cpu_port": cpu_port, "priority_queues": priority_queues}
        #: why each switch was restarted, in order (the results file's notes)
        self.restarts: list[str] = []
        try:
            for near, far in self.pairs.values():
                sh("ip", "link", "del", near, check=False)
                sh("ip", "link", "add", near, "type", "veth", "peer", "name", far)
                for ifn in (near, far):
                    Path(f"/proc/sys/net/ipv6/conf/{ifn}/disable_ipv6").write_text("1")
                    sh("ethtool", "-K", ifn, "rx", "off", "tx", "off", "sg", "off", "tso", "off", "gso", "off",
                       "gro", "off", check=False)
                    sh("ip", "link", "set", ifn, "up")
            wait_up(*[ifn for pair in self.pairs.values() for ifn in pair])
            self.near = {side: {p: self.pairs[side, p][0] for p in ports} for side in SIDES}
            self.bmv2 = Bmv2(self.near["bmv2"], **self.bmv2_options)
            args = [a for p, ifn in self.near["dlcp-switch"].items() for a in ("-i", f"{p}@{ifn}")]
            if cpu_port is not None:
                args += ["--cpu-port", str(cpu_port)]
            if priority_queues is not None:
                args += ["--priority-queues", str(priority_queues)]
            for d in include_dirs:
                args += ["-I", str(d)]
            self.daemon_args = args
            self.daemon = Daemon(*args)
            for side in SIDES:
                self.taps[side] = {p: Port(p, self.pairs[side, p][1]) for p in ports}
        except BaseException:
            self.close()
            raise

    def spec(self, side: str) -> SwitchSpec:
        if side == "bmv2":
            assert self.bmv2 is not None
            return SwitchSpec("bmv2", self.bmv2.addr, target="bmv2", thrift_port=self.bmv2.thrift_port)
        assert self.daemon is not None
        return SwitchSpec("dlcp-switch", self.daemon.addr)

    def logs(self) -> str:
        return (f"--- bmv2 log:\n{self.bmv2.log() if self.bmv2 else ''}\n"
                f"--- dlcp-switch log:\n{self.daemon.log()[-4000:] if self.daemon else ''}")

    def restart(self, side: str, why: str) -> str:
        """Replace ``side``'s switch process by a fresh one on the same interfaces; its log before that."""
        self.restarts.append(f"{side} restarted: {why}"[:500])
        if side == "bmv2":
            old, log = self.bmv2, self.bmv2.log() if self.bmv2 else ""
            self.bmv2 = None
            if old is not None:
                old.close()
            self.bmv2 = Bmv2(self.near["bmv2"], **self.bmv2_options)
            return log
        old_d, log = self.daemon, self.daemon.log()[-4000:] if self.daemon else ""
        self.daemon = None
        if old_d is not None:
            old_d.close()
        self.daemon = Daemon(*self.daemon_args)
        return log

    def _exited(self) -> dict[str, int]:
        """The sides whose process has exited, with its status."""
        procs = {"bmv2": self.bmv2.proc if self.bmv2 else None,
                 "dlcp-switch": self.daemon.proc if self.daemon else None}
        return {side: (p.poll() if p is not None else -1) for side, p in procs.items()
                if p is None or p.poll() is not None}

    async def _settled(self, client: SwitchClient, program: Program) -> str | None:
        """None when both processes still run and BMv2 still loads a pipeline (``program`` again, which also
        clears what the test left); else what is wrong."""
        if exited := self._exited():
            return f"exited during the test: {exited}"
        again = replace(program, device_config=program.device_config + b"\n")
        try:
            await asyncio.wait_for(client.ensure_pipeline(again), SETTLE_S)
        except (ControllerError, asyncio.TimeoutError) as e:
            return (f"BMv2 could not load a pipeline after the test ({type(e).__name__}: {e}): a packet never left "
                    f"it (simple_switch swaps a pipeline only when no packet is inside it, bm_sim's "
                    f"SwitchWContexts::do_swap), e.g. one the program recirculates or resubmits for ever, or BMv2 "
                    f"stopped answering")
        return None

    def _kill(self, side: str) -> None:
        proc = (self.bmv2 if side == "bmv2" else self.daemon)
        if proc is not None and proc.proc.poll() is None:
            proc.proc.kill()

    def _fail(self, why: str, sides: tuple[str, ...]) -> SwitchFailure:
        """Restart ``sides``' switches; the error the test fails with (the switch's log in it)."""
        logs = "".join(f"\n--- {side} log before the restart:\n{self.restart(side, why)}" for side in sides)
        return SwitchFailure(f"{why}; restarted {', '.join(sides)}{logs}")

    @asynccontextmanager
    async def session(self, program: Path, tmp: Path, include_dirs: tuple[Path, ...] = ()) -> AsyncIterator["Pair"]:
        """Push ``program`` to both switches (p4c's output to BMv2, the source to dlcp-switch); a :class:`Pair`
        of primary sessions. When it ends, both switches must still run and BMv2 must still load a pipeline, or
        the session raises :class:`SwitchFailure` after restarting what failed (module docstring)."""
        out = p4c(program, tmp / "p4c", include_dirs)
        for side, status in self._exited().items():     # not caught when it happened (between sessions)
            self.restart(side, f"found exited (status {status}) before {program.name}")
        # every session starts from an empty pipeline: a config that differs from the running one by trailing
        # whitespace (harmless in P4 source and in JSON) makes ensure_pipeline push it again, which clears all state
        self.sessions += 1
        pad = b" " * self.sessions
        programs = {side: replace(prog, device_config=prog.device_config + pad) for side, prog in
                    (("bmv2", load_p4info_program(out.p4info, out.json)),
                     ("dlcp-switch", load_program(program, include_dirs)))}
        failure: tuple[str, tuple[str, ...]] | None = None
        try:
            async with AsyncExitStack() as stack:
                clients = {}
                for side in SIDES:
                    c = SwitchClient(self.spec(side), p4info=programs[side].p4info,
                                     election_id=writer_election_id(), timeout=30.0)
                    try:
                        clients[side] = await stack.enter_async_context(c)
                        await clients[side].ensure_pipeline(programs[side])
                    except SwitchUnreachable as e:             # not a refusal: no answer
                        failure = (f"{side} did not take the program: {e}", (side,))
                        self._kill(side)              # so that closing the sessions does not wait on it
                        raise
                try:
                    yield Pair(self, clients, programs, out)
                finally:
                    why = await self._settled(clients["bmv2"], programs["bmv2"])
                    if why is not None:
                        failure = (why, tuple(self._exited()) or ("bmv2",))
                        for side in failure[1]:
                            self._kill(side)
        finally:
            if failure is not None:
                raise self._fail(f"{program.name}: {failure[0]}", failure[1])

    def close(self) -> None:
        for taps in self.taps.values():
            for t in taps.values():
                t.close()
        for proc in (self.daemon, self.bmv2):
            if proc is not None:
                try:
                    proc.close()
                except Exception:  # noqa: BLE001  (the interfaces below must go whatever happened)
                    pass
        for near, _ in self.pairs.values():
            sh("ip", "link", "del", near, check=False)


class Pair:
    """Primary sessions to both switches of a :class:`Twin`, running the same program."""

    def __init__(self, twin: Twin, clients: dict[str, SwitchClient], programs: dict[str, Program],
                 p4c_output: P4cOutput):
        self.twin, self.clients, self.programs, self.p4c_output = twin, clients, programs, p4c_output

    # -- control plane ------------------------------------------------------------------------------------------
    async def insert(self, entities: list[fy.P4Entity]) -> None:
        await self._write(entities, p4r.Update.INSERT)

    async def modify(self, entities: list[fy.P4Entity]) -> None:
        await self._write(entities, p4r.Update.MODIFY)

    async def delete(self, entities: list[fy.P4Entity]) -> None:
        await self._write(entities, p4r.Update.DELETE)

    async def _write(self, entities: list[fy.P4Entity | p4r.Entity], kind) -> None:
        """The same updates to both (a ``p4r.Entity`` is sent as it is: the P4Info ids are the same on both)."""
        for side, c in self.clients.items():
            ups = [p4r.Update(type=kind, entity=e if isinstance(e, p4r.Entity) else e.encode(c.schema))
                   for e in entities]
            await c.write(ups)

    async def register_write(self, cells: list[tuple[str, int, int]]) -> None:
        """``(register, index, value)`` cells on both (on BMv2 the client goes through the Thrift CLI: its
        P4Runtime server implements no register access; :class:`controller.client.SwitchClient`)."""
        await self.modify([fy.P4RegisterEntry(name, index=index, data=value) for name, index, value in cells])

    async def apply(self, entities: list[fy.P4Entity]) -> None:
        """What ``dlcpctl apply`` writes to a fresh switch (:func:`controller.state.desired_entities`): table
        entries inserted, default actions modified, register cells written (:meth:`register_write`)."""
        await self.insert([e for e in entities if isinstance(e, fy.P4TableEntry) and not e.is_default_action])
        await self.modify([e for e in entities if isinstance(e, fy.P4TableEntry) and e.is_default_action])
        await self.register_write([(e.register_id, e.index, e.data) for e in entities
                                   if isinstance(e, fy.P4RegisterEntry)])

    def set_queue(self, port: int, priority: int | None = None, *, depth: int | None = None,
                  rate_pps: float | None = None) -> None:
        """A queue's depth and rate on both, through the controller's traffic-manager paths
        (:func:`controller.tm.open_tm`: the management service, BMv2's CLI)."""
        for side in SIDES:
            tm = open_tm(self.twin.spec(side))
            try:
                tm.set_queue(port, priority, depth=depth, rate_pps=rate_pps)
            finally:
                tm.close()

    # -- reading state ------------------------------------------------------------------------------------------
    async def counters(self) -> dict[str, dict[str, dict]]:
        """Every counter of the program on both switches: side -> name -> index -> (bytes, packets); a direct
        counter's cells are keyed by their table entry (match and priority, in text form)."""
        out: dict[str, dict[str, dict]] = {}
        for side, c in self.clients.items():
            per: dict[str, dict] = {x.name: {} for x in c.schema.counters}
            ids = {c.schema.counters[n].id: n for n in per}
            if ids:
                for e in await c.read([p4r.Entity(counter_entry=p4r.CounterEntry(counter_id=i)) for i in ids]):
                    ce = e.counter_entry
                    per[ids[ce.counter_id]][ce.index.index] = (ce.data.byte_count, ce.data.packet_count)
            for dc in c.schema.direct_counters:
                cells = per.setdefault(dc.name, {})
                table = c.schema.tables[dc.direct_table_id]
                got = await c.read([p4r.Entity(direct_counter_entry=p4r.DirectCounterEntry(
                    table_entry=p4r.TableEntry(table_id=table.id)))])
                for e in got:
                    d = e.direct_counter_entry
                    te = p4r.TableEntry(match=sorted(d.table_entry.match, key=lambda m: m.field_id),
                                        priority=d.table_entry.priority)
                    cells[text_format.MessageToString(te, as_one_line=True)] = (d.data.byte_count,
                                                                              d.data.packet_count)
            out[side] = per
        return out

    async def clear_tables(self) -> None:
        """Delete every table entry the control plane wrote, on each switch on its own (so that entries one side
        took and the other refused, or a write that failed half-way, leave nothing behind)."""
        for c in self.clients.values():
            got = await c.read([p4r.Entity(table_entry=p4r.TableEntry())])
            await c.write([p4r.Update(type=p4r.Update.DELETE, entity=p4r.Entity(table_entry=p4r.TableEntry(
                table_id=e.table_entry.table_id, match=e.table_entry.match, priority=e.table_entry.priority)))
                for e in got if not e.table_entry.is_const])

    async def table_entries(self) -> dict[str, list[str]]:
        """Every table entry the control plane wrote (const entries left out), on both switches: side -> the
        entries in text form, sorted."""
        out: dict[str, list[str]] = {}
        for side, c in self.clients.items():
            got = await c.read([p4r.Entity(table_entry=p4r.TableEntry())])
            out[side] = sorted(text_format.MessageToString(e.table_entry, as_one_line=True) for e in got
                               if not e.table_entry.is_const)
        return out

    async def registers(self) -> dict[str, dict[str, list[int]]]:
        """Every register of the program on both switches: side -> name -> its cells."""
        out: dict[str, dict[str, list[int]]] = {}
        for side, c in self.clients.items():
            regs: dict[str, list[int]] = {}
            for reg in c.schema.registers:
                cells = [0] * reg.size
                for e in await c.read([p4r.Entity(register_entry=p4r.RegisterEntry(register_id=reg.id))]):
                    r = e.register_entry
                    cells[r.index.index] = int.from_bytes(r.data.bitstring, "big")
                regs[reg.name] = cells
            out[side] = regs
        return out

    # -- packets ------------------------------------------------------------------------------------------------
    def exchange(self, port: int, frames: bytes | list[bytes], *, quiet: float = 0.3,
                 timeout: float = 5.0) -> dict[str, Frames]:
        """Send ``frames`` (one or several, at once) into switch port ``port`` of both switches; what each sent out
        of any port, sorted (the order frames of one batch leave in is not compared): both are polled until both
        have been silent for ``quiet`` seconds with as many frames each (or for a second when nothing came)."""
        batch = [frames] if isinstance(frames, bytes) else list(frames)
        got: dict[str, Frames] = {}
        for side in SIDES:
            for t in self.twin.taps[side].values():
                t.recv_into([])                       # nothing left over from an earlier frame
            assert self.twin.taps[side][port].send_batch(batch) == [], f"{side}: frame refused by the kernel"
            got[side] = []
        start = time.monotonic()
        last = {side: start for side in SIDES}
        while True:
            now = time.monotonic()
            for side in SIDES:
                for t in self.twin.taps[side].values():   # the input port too: a program may send a frame back
                    if t.recv_into(got[side]):
                        last[side] = time.monotonic()
            # done when both are quiet with as many frames each, or nothing came from either within a second;
            # a side that is behind the other (a busy machine delays a frame by more than `quiet`) gets until
            # `timeout`, so only a real difference costs the wait
            counts = {len(got[s]) for s in SIDES}
            done = (len(counts) == 1 and all(now - last[s] >= quiet for s in SIDES)
                    and (counts != {0} or now - start >= max(quiet, 1.0)))
            if done or now - start > timeout:
                break
            time.sleep(0.002)
        return {side: sorted(frames) for side, frames in got.items()}

    def burst(self, port: int, frames: list[bytes], *, quiet: float = 0.5, timeout: float = 20.0) -> dict[str, Frames]:
        """Send ``frames`` at once into port ``port`` of each switch in turn (so that neither competes with the
        other for the CPU while its queue drains); everything that came out, in order of arrival."""
        out: dict[str, Frames] = {}
        for side in SIDES:
            taps = self.twin.taps[side]
            for t in taps.values():
                t.recv_into([])
            assert taps[port].send_batch(frames) == []
            got: Frames = []
            start = last = time.monotonic()
            while time.monotonic() - last < quiet and time.monotonic() - start < timeout:
                for t in taps.values():
                    if t.recv_into(got):
                        last = time.monotonic()
                time.sleep(0.001)
            out[side] = got
        return out

"""The twin harness itself: a switch that a test leaves stuck or dead fails that test, is restarted, and the next
test gets a working one (twin.py, :meth:`Twin.session`).

A program that recirculates every packet keeps it inside BMv2 for ever (BMv2 has no recirculation limit; the
embedded target drops it after 16 passes, ``recirculate_limit``), and BMv2 then cannot swap pipelines: that is
how one conformance program once made every later test fail."""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from .test_dlcp import run
from .twin import SwitchFailure

pytestmark = pytest.mark.bmv2

PROGRAM = """#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> a; }
struct H { h_t h; }
struct M { }
parser P(packet_in pkt, out H hdr, inout M meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control Ing(inout H hdr, inout M meta, inout standard_metadata_t sm) { apply { sm.egress_spec = 1; } }
control Eg(inout H hdr, inout M meta, inout standard_metadata_t sm) {
    apply { if (RECIRCULATE) { recirculate_preserving_field_list(0); } }
}
control Vck(inout H hdr, inout M meta) { apply { } }
control Cck(inout H hdr, inout M meta) { apply { } }
control Dep(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), Vck(), Ing(), Eg(), Cck(), Dep()) main;
"""
FRAME = bytes([7]) + bytes(59)


def test_a_switch_left_stuck_is_restarted(twin, tmp_path: Path):
    forever = tmp_path / "recirculate_forever.p4"
    forever.write_text(PROGRAM.replace("RECIRCULATE", "hdr.h.a == 7"))
    forward = tmp_path / "forward.p4"
    forward.write_text(PROGRAM.replace("RECIRCULATE", "false"))
    pid = twin.bmv2.proc.pid

    async def stuck():
        async with twin.session(forever, tmp_path) as pair:
            got = await asyncio.to_thread(pair.exchange, 0, FRAME)
            assert got == {"bmv2": [], "dlcp-switch": []}       # each still recirculating / dropped at 16 passes

    with pytest.raises(SwitchFailure, match="BMv2 could not load a pipeline after the test"):
        run(stuck(), 120)
    assert twin.bmv2.proc.pid != pid and twin.bmv2.proc.poll() is None
    assert twin.restarts[-1].startswith("bmv2 restarted: recirculate_forever.p4: BMv2 could not load")

    async def works():
        async with twin.session(forward, tmp_path) as pair:
            return await asyncio.to_thread(pair.exchange, 0, FRAME)
    assert run(works(), 120) == {"bmv2": [(1, FRAME)], "dlcp-switch": [(1, FRAME)]}


def test_a_switch_that_died_is_restarted(twin, tmp_path: Path):
    forward = tmp_path / "forward.p4"
    forward.write_text(PROGRAM.replace("RECIRCULATE", "false"))

    async def dies():
        async with twin.session(forward, tmp_path):
            twin.bmv2.proc.kill()
            twin.bmv2.proc.wait(10)

    with pytest.raises(SwitchFailure, match="exited during the test"):
        run(dies(), 120)
    assert twin.bmv2.proc.poll() is None

    async def works():
        async with twin.session(forward, tmp_path) as pair:
            return await asyncio.to_thread(pair.exchange, 0, FRAME)
    assert run(works(), 120) == {"bmv2": [(1, FRAME)], "dlcp-switch": [(1, FRAME)]}

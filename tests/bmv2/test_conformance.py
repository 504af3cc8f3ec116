"""Every conformance program (tests/switch/conformance/) that p4c-bm2-ss compiles, on BMv2 and on dlcp-switch: its
control-plane state written over P4Runtime to both (table entries of the in-process suite, v1model_paths.p4's
clone session), its packets (the in-process suite's, with the filler tail that makes each a real frame) sent into
both, every output frame and port compared, then every counter and register.

The comparison is between the two switches, so packets whose expected outputs the wire changes (the
PacketTooShort cases of parser_features.p4 and error_key.p4, which the daemon suite leaves out) are compared
too: both switches get the same bytes.  crc_custom.p4 runs with BMv2's default CRC parameters (its custom
parameters are set through each switch's own management path, BMv2's Thrift CLI or dlcp-switch's management
service, tested in test_through_daemon.py).

Where BMv2 runs a program differently from P4-16 for a documented reason (:data:`DEVIATIONS`;
docs/switch-target.md, "Against BMv2"), the test requires exactly that: BMv2's frame as the reason predicts it,
and dlcp-switch's as the in-process suite expects it."""
from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from finsy import P4CloneSessionEntry, P4TableAction, P4TableEntry, P4TableMatch
from finsy.proto import p4r

from controller.bmv2 import run_cli

from .conftest import tally
from .test_dlcp import same_state
from .twin import ROOT, Deviation
from tests.switch.test_p4info_p4c import INDEX, cmp

CONFORMANCE = ROOT / "tests" / "switch" / "conformance"
sys.path.insert(0, str(CONFORMANCE))
from test_conformance import CASES, CHECK, ENTRIES, crc_packet, v1_paths  # noqa: E402
from test_through_daemon import padded  # noqa: E402

pytestmark = pytest.mark.bmv2

PACKETS = dict(CASES, **{"v1model_paths.p4": v1_paths(None), "crc_custom.p4": [(crc_packet(2, CHECK), [])]})
STATE = {"v1model_paths.p4": [P4CloneSessionEntry(5, replicas=[(7, 1)])]}
for _name, _rows in ENTRIES.items():
    STATE[_name] = [P4TableEntry(t, match=P4TableMatch(m), action=P4TableAction(a, **p)) for t, m, a, p in _rows]


def error_key_entries(schema) -> list[p4r.Entity]:
    """error_key.p4's entries as raw P4Runtime for dlcp-switch: p4c's P4Info gives an error-typed key no bitwidth
    (finsy cannot encode a value for it), so the error's number goes as 4 bytes, the width both targets keep
    errors in.  BMv2's P4Runtime server refuses them (PI takes the missing bitwidth as 0: "Bytestring provided
    does not fit within 0 bits"), so BMv2 gets the same entries through its Thrift CLI
    (:func:`error_key_cli`)."""
    t = schema.tables["Ing.by_error"]
    a = schema.actions["Ing.mark"]
    out = []
    for _table, match, _action, params in ENTRIES["error_key.p4"]:
        (value,) = match.values()
        out.append(p4r.Entity(table_entry=p4r.TableEntry(
            table_id=t.id, match=[p4r.FieldMatch(field_id=1, exact=p4r.FieldMatch.Exact(value=value.to_bytes(4, "big")))],
            action=p4r.TableAction(action=p4r.Action(action_id=a.id, params=[
                p4r.Action.Param(param_id=1, value=params["v"].to_bytes(1, "big"))])))))
    return out
LOOPS_DROPPED = ("p4c-bm2-ss 1.2.5.16 compiles a three-part for loop in a control's apply block (one inlined from a "
                 "function too) to its body alone, run once with the loop variables at 0")


def loops_dropped(program: str, frame: bytes) -> bytes:
    """What BMv2 sends for ``frame`` when p4c-bm2-ss has replaced each for loop of the program's apply block by
    one pass of its body with the loop variables at 0 (BMv2's initial value of every scalar; the init, condition
    and update are gone, ``break``, ``continue`` and ``return`` only skip the rest of that one pass); loops in an
    action body are compiled as loops."""
    a, b, c, d = frame[:4]
    if program == "for_nested_return.p4":       # find(a, b) tries k = 0 only
        c = 0 if b == 0 and a & 1 else 0xFF
    else:                                        # for_loops.p4
        b = sum(range(1, a + 1)) & 0xFF          # sum_to(a): an action, its loop runs
        c = 0                                    # j = 0: continue; k never set: odd + k = 0
        d = 0 if d & 1 else 8                    # lowest_set(d) tries i = 0 only
    return bytes([a, b, c, d]) + frame[4:]


#: documented BMv2 deviations: program -> (why, BMv2's output frame for an input frame)
DEVIATIONS = {p: (LOOPS_DROPPED, lambda frame, p=p: loops_dropped(p, frame))
              for p in ("for_loops.p4", "for_nested_return.p4")}
def error_key_cli() -> list[str]:
    """error_key.p4's entries as simple_switch_CLI commands (the error's number as the key)."""
    return [f"table_add {t} {a} {m['sm.parser_error']} => {p['v']}" for t, m, a, p in ENTRIES["error_key.p4"]]


# the programs with packets that p4c accepts (tests/switch/p4c_p4info/index.json; test_p4info.py checks it)
PROGRAMS = sorted(p for p in PACKETS if INDEX[cmp.reference_name(CONFORMANCE / p)] == "reference")
REFUSED = sorted(set(PACKETS) - set(PROGRAMS))


@pytest.mark.parametrize("program", PROGRAMS)
def test_conformance_program(twin, program: str, tmp_path: Path):
    async def go():
        t = tally("conformance")
        before = len(t.differences)
        async with twin.session(CONFORMANCE / program, tmp_path, (CONFORMANCE,)) as pair:
            if program == "error_key.p4":
                ours = pair.clients["dlcp-switch"]
                await ours.write([p4r.Update(type=p4r.Update.INSERT, entity=e)
                                  for e in error_key_entries(ours.schema)])
                await asyncio.to_thread(run_cli, twin.bmv2.thrift_port, error_key_cli())
            elif STATE.get(program):
                await pair.insert(STATE[program])
            for pkt, want in PACKETS[program]:
                frame, want = padded(pkt, want)
                got = await asyncio.to_thread(pair.exchange, 0, frame)
                deviation = None
                if program in DEVIATIONS:
                    why, bmv2_frame = DEVIATIONS[program]
                    deviation = Deviation(why, [(1, bmv2_frame(frame))], want)
                t.compare(f"{program}: in {frame.hex()}", got["bmv2"], got["dlcp-switch"], deviation)
            await same_state(pair, "conformance")
        return t.differences[before:]
    assert asyncio.run(asyncio.wait_for(go(), 240)) == []

"""Conformance suite (issue 36): one small program per P4-16 / v1model feature, each run with several packets in
every code-generation mode of the in-process target, and the sub-control program also through the real
P4Runtime server with a finsy controller.  Expected outputs are worked out by hand from the P4-16 specification
(sections cited in each program's header comment) and BMv2's documented v1model behaviour, never recorded from
this target's output."""
from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from finsy import P4CloneSessionEntry, P4TableAction, P4TableEntry, P4TableMatch, P4ValueSetEntry
from finsy.p4entity import P4ValueSetMember

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))

from p4rt_local import connect, local_server  # noqa: E402
from switch.errors import P4Error, SwitchError  # noqa: E402
from switch.backend.p4info import P4InfoBuilder  # noqa: E402
from switch.target import Switch  # noqa: E402

MODES = {"fused": dict(fuse=True, fast_paths=True), "fast": dict(fuse=False, fast_paths=True),
         "reference": dict(fuse=False, fast_paths=False)}


def h(*b: int) -> bytes:
    return bytes(b)


# program -> [(packet in on port 0, [(out port, packet out)])]
CASES: dict[str, list[tuple[bytes, list[tuple[int, bytes]]]]] = {
    # c = max8(a, b) + 1; swap(a, b); d = classify(c); port 2 when max3(a, b, c) == 255
    "functions.p4": [
        (h(3, 9, 0, 0), [(1, h(9, 3, 10, 1))]),
        (h(200, 5, 0, 0), [(1, h(5, 200, 201, 2))]),
        (h(255, 0, 0, 0), [(2, h(0, 255, 0, 0))]),          # 255 + 1 wraps to 0: classify's early return
        (h(7, 7, 0, 0) + b"tail", [(1, h(7, 7, 8, 1) + b"tail")]),
    ],
    # a == 1: initial entry add(10) with base 100; a == 0: the sub-control returns early; c = d + 1;
    # d = 0x77 + 1 (Bump applied by type name)
    "subcontrol.p4": [
        (h(1, 5, 0, 7), [(1, h(1, 115, 8, 0x78))]),
        (h(0, 5, 0, 7), [(1, h(0, 5, 0xEE, 0x78))]),
        (h(2, 5, 0, 7), [(1, h(2, 5, 8, 0x78))]),
        (h(1, 250, 0, 255), [(1, h(1, 104, 0, 0x78))]),     # 250 + 110 wraps; 255 + 1 wraps
    ],
    # inc.apply(b, a) then inc.apply(c, a + 1): one instance (by 1 -> +10, 2 -> +20, base 1); by 0 returns
    "subcontrol_shared.p4": [
        (h(1, 0, 0, 0), [(1, h(1, 11, 21, 0))]),
        (h(0, 0, 0, 0), [(1, h(0, 0, 11, 0))]),
        (h(5, 3, 4, 0), [(1, h(5, 3, 4, 0))]),
        (h(255, 7, 7, 0), [(1, h(255, 7, 7, 0))]),          # a + 1 wraps to 0: the second apply returns
    ],
    # the sub-parser sets second.c = first.a and verifies second.a == 0x42; third follows when second.b == 1
    "subparser.p4": [
        (h(1, 2, 3, 4, 0x42, 1, 0, 0, 9, 9, 9, 9) + b"xy",
         [(1, h(1, 2, 3, 0x99, 0x42, 1, 1, 0, 9, 9, 9, 9) + b"xy")]),
        (h(5, 2, 3, 4, 0x42, 0, 0, 0, 9, 9, 9, 9), [(1, h(5, 2, 3, 0x99, 0x42, 0, 5, 0, 9, 9, 9, 9))]),
        # verify fails in the sub-parser: parsing stops (meta.x stays 0, third not extracted), ingress sees
        # parser_error set; the headers extracted so far are emitted, the rest is payload
        (h(1, 2, 3, 4, 0x41, 1, 0, 0, 9, 9, 9, 9), [(2, h(1, 2, 3, 0xEE, 0x41, 1, 1, 0, 9, 9, 9, 9))]),
    ],
    # first = tp(0xA1 as d); a == 2: second = tp(first.b as d), the same instance in another state
    "subparser_twice.p4": [
        (h(1, 7, 0, 0, 9, 9, 9, 9), [(1, h(1, 7, 0, 0xA1, 9, 9, 9, 9))]),
        (h(2, 7, 0, 0, 9, 9, 9, 9, 5), [(1, h(2, 7, 0, 0xA1, 9, 9, 9, 7, 5))]),
    ],
    # c from switch(a) (1 falls through to 2's block), d from switch on an enum, port 2 from switch on an error
    "switch_values.p4": [
        (h(0, 1, 0, 0), [(2, h(0, 1, 10, 0x51))]),
        (h(1, 2, 0, 0), [(2, h(1, 2, 20, 0x52))]),
        (h(2, 3, 0, 0), [(2, h(2, 3, 20, 0))]),
        (h(4, 0, 0, 0), [(2, h(4, 0, 40, 0))]),
        (h(7, 1, 0, 0), [(2, h(7, 1, 99, 0x51))]),
    ],
    # table t binds set_b(hdr.h.b, 3): entry a == 1 gives v = 10; split(a) -> (c, d) copied out; bump(d, 1)
    "action_params.p4": [
        (h(1, 5, 0, 0), [(1, h(1, 18, 0x10, 2))]),          # 5 + 10 + 3; hi 0 + 0x10, lo 1 + 1
        (h(0x2A, 5, 0, 0), [(1, h(0x2A, 5, 0x12, 0x0B))]),  # table miss: b unchanged
        (h(0, 5, 9, 9), [(1, h(0, 5, 0, 1))]),              # early return: hi, lo already assigned 0
    ],
    # b = scale(add = 7, x = a) = 2a + 7 (mul defaults to 2); c = a - 1 (named); d = 0x33 + 0x40 (defaults);
    # a == 0: mark_to_drop(standard_metadata = sm)
    "arguments.p4": [
        (h(1, 0, 0, 0), [(1, h(1, 9, 0, 0x73))]),
        (h(200, 0, 0, 0), [(1, h(200, 151, 199, 0x73))]),   # 407 wraps to 151
        (h(0, 0, 0, 0), []),
    ],
    # peek = lookahead<h_t>() with d = lookahead<h_t>().b; s2 = s1 (then s1 invalidated); emitted peek, h, s2
    "parser_features.p4": [
        (h(1, 2, 3, 4, 5, 6, 7, 8), [(1, h(1, 2, 3, 2, 1, 2, 3, 4, 5, 6, 7, 8))]),
        (h(2, 3, 3, 4, 5, 6, 7, 8, 9, 9, 9, 9) + b"z", [(1, h(2, 3, 3, 3, 2, 3, 3, 4, 5, 6, 7, 8, 9, 9, 9, 9) + b"z")]),
        # shorter than the lookahead: PacketTooShort; v1model's ingress still runs (port 1), no header is
        # valid, so the unparsed bytes go out as they came
        (h(1, 2, 3), [(1, h(1, 2, 3))]),
    ],
    # d from table by_error keyed on parser_error, entries from the control plane (ENTRIES): NoError 0x11,
    # PacketTooShort 0x22, otherwise default 0xFF
    "error_key.p4": [
        (h(0, 2, 3, 4), [(1, h(0, 2, 3, 0x11))]),
        (h(1, 2, 3, 4, 5, 6), [(1, h(1, 2, 3, 0x22, 5, 6))]),
        (h(2, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9, 9), [(1, h(2, 2, 3, 0xFF, 5, 6, 7, 8, 9, 9, 9, 9))]),  # StackOutOfBounds
    ],
    # d = u.isValid(); b == 1 turns four into two (0xBEEF); b == 2 assigns h to four; c = 4 (four) + 2 (two)
    "header_union.p4": [
        (h(4, 0, 0, 0, 9, 8, 7, 6), [(1, h(4, 0, 4, 1, 9, 8, 7, 6))]),
        (h(4, 1, 0, 0, 9, 8, 7, 6), [(1, h(4, 1, 2, 1, 0xBE, 0xEF))]),
        (h(2, 0, 0, 0, 5, 5), [(1, h(2, 0, 2, 1, 5, 5))]),
        (h(2, 2, 0, 0, 5, 5, 1), [(1, h(2, 2, 4, 1, 2, 2, 0, 1, 1))]),     # four = h as it was (d already 1)
        (h(7, 0, 0, 0, 1), [(1, h(7, 0, 0, 0, 1))]),
    ],
    # no member written yet: the value set matches nothing, extra is never extracted (d = 0)
    "value_set.p4": [
        (h(5, 0, 0, 0, 9, 9, 9, 9), [(1, h(5, 0, 0, 0, 9, 9, 9, 9))]),
        (h(1, 0, 0, 0, 9, 9, 9, 9), [(1, h(1, 0, 0, 0, 9, 9, 9, 9))]),
    ],
    # b == 1: push_front(1) then st[0] = 0xAA; b == 2: pop_front(1); b == 3: h = {a=1, b=2, c=3, d=4}, d = a
    "struct_stack_ops.p4": [
        (h(9, 0, 0, 0, 0x11, 0x22, 0x33), [(1, h(9, 0, 0, 0, 0x11, 0x22, 0x33))]),
        (h(9, 1, 0, 0, 0x11, 0x22, 0x33), [(1, h(9, 1, 0, 0, 0xAA, 0x11, 0x22, 0x33))]),
        (h(9, 2, 0, 0, 0x11, 0x22, 0x33), [(1, h(9, 2, 0, 0, 0x22, 0x33))]),     # st[1], st[2] invalid
        (h(9, 3, 0, 0, 0x11, 0x22), [(1, h(1, 2, 3, 9, 0x11, 0x22))]),
    ],
    # b = 1 + ... + a (a loop bounded by an action parameter); c = odd j < min(a, 5) (continue, break) + the final k
    # (10 - iterations run); d = lowest_set(d) (return from inside a loop in a function)
    "for_loops.p4": [
        (h(0, 0, 0, 0), [(1, h(0, 0, 10, 8))]),
        (h(3, 0, 0, 8), [(1, h(3, 6, 1 + 7, 3))]),
        (h(10, 0, 0, 0x80), [(1, h(10, 55, 2 + 5, 7))]),
        (h(4, 0, 0, 3), [(1, h(4, 10, 2 + 6, 0))]),
    ],
    # myvar = TWICE(a); c = MAX(a, b); d = myvar + EMPTY() (7); log_msg(NAME(hello world))
    "macros.p4": [
        (h(3, 9, 0, 0), [(1, h(3, 9, 9, 13))]),
        (h(20, 5, 0, 0), [(1, h(20, 5, 20, 47))]),
        (h(200, 1, 0, 0), [(1, h(200, 1, 200, (400 + 7) % 256))]),
    ],
    # c = find(a, b): the lowest set bit index k >= b of a over two nested loops of 4, else 0xFF
    "for_nested_return.p4": [
        (h(0b100, 0, 0, 0), [(1, h(0b100, 0, 2, 0))]),
        (h(0b100, 3, 0, 0), [(1, h(0b100, 3, 0xFF, 0))]),
        (h(0b10010000, 0, 0, 0), [(1, h(0b10010000, 0, 4, 0))]),
        (h(0b10010000, 5, 0, 0), [(1, h(0b10010000, 5, 7, 0))]),
        (h(0, 0, 0, 0), [(1, h(0, 0, 0xFF, 0))]),
    ],
    # compound assignment, r_t's 13 results after h (a, b, c, d; d[3:0] += 1): add sub mul bits shl shr sadd ssub
    # ssig loop tbl divmod prs, as r_t's comments in the program say
    "compound_assign.p4": [
        (h(1, 2, 3, 0x0F) + bytes(13),      # 1 - 2 wraps to 255, |-| stops at 0; the slice 0xF + 1 wraps to 0
         [(1, h(1, 2, 3, 0x00, 3, 255, 2, 0x81, 8, 0, 3, 0, 256 - 97, 6, 1 + 5, 0, 0x1C))]),
        (h(200, 100, 9, 0x3A) + bytes(13),  # shifts by 9 >= 8 give 0; 300 saturates; -56 |-| 100 stops at -128
         [(1, h(200, 100, 9, 0x3B, 44, 100, 32, 0x41 ^ 0x80, 0, 0, 255, 100, 256 - 28, 45, 201, 4, 0x8E))]),
        (h(2, 255, 8, 0xF7) + bytes(13),    # a shift by exactly 8 gives 0; the second entry adds 7
         [(1, h(2, 255, 8, 0xF8, 1, 3, 254, 0x83, 0, 0, 255, 0, 256 - 99, 36, 9, 1, 0x1A))]),
        (h(0x7F, 0x80, 0, 0) + bytes(13),   # 127 + 128 = 255 exactly; a loop to 0 runs no pass; 127 % 16 / 2
         [(1, h(0x7F, 0x80, 0, 1, 255, 255, 128, 0x81, 0x7F, 0x7F, 255, 0, 256 - 101, 0, 128, 7, 0xE0))]),
    ],
    # top-level actions: Ing.t a == 1: d += 3, a == 2: c = b + 9; fwd: port b (1, 2) or 7; then b += 0x10 (a direct
    # call); Eg.e binds the same bump to a: a == 1: a += 100
    "top_level_actions.p4": [
        (h(1, 1, 0, 0), [(1, h(101, 0x11, 0, 3))]),
        (h(2, 2, 0, 0), [(2, h(2, 0x12, 11, 0))]),
        (h(4, 7, 0, 5), [(7, h(4, 0x17, 0, 5))]),
        (h(9, 1, 0, 0), [(1, h(9, 0x11, 0, 0))]),           # both tables miss: nop
    ],
    # entry priorities as BMv2 orders them: r = (t_tern, t_range, t_lpm) after h (a: ternary and lpm key, b: range)
    "entry_priority.p4": [
        (h(0x11, 10, 0, 0, 0, 0, 0), [(1, h(0x11, 10, 0, 0, 3, 1, 1))]),     # @priority(1) beats position 2, @3
        (h(0x12, 60, 0, 0, 0, 0, 0), [(1, h(0x12, 60, 0, 0, 1, 2, 1))]),     # @priority(0) beats position 1
        (h(0x22, 160, 0, 0, 0, 0, 0), [(1, h(0x22, 160, 0, 0, 4, 2, 3))]),   # @5 and position 5: the earlier
        (h(0x21, 220, 0, 0, 0, 0, 0), [(1, h(0x21, 220, 0, 0, 3, 3, 2))]),   # /4 beats /2 despite @priority
        (h(0x2F, 0, 0, 0, 0, 0, 0), [(1, h(0x2F, 0, 0, 0, 5, 1, 2))]),
        (h(0x31, 255, 0, 0, 0, 0, 0), [(1, h(0x31, 255, 0, 0, 3, 3, 1))]),
        (h(0x80, 100, 0, 0, 0, 0, 0), [(1, h(0x80, 100, 0, 0, 0, 2, 0))]),   # t_tern, t_lpm miss
    ],
    # t1 (largest wins): 100, 99 (inherited), 50, 200, 199 (inherited, wins the tie), 199, 198 (inherited);
    # t2 (smallest wins, delta 10): 5, 15, 1, 11, 300 with @priority(0); t3 in the order written
    "entry_priority_initial.p4": [
        (h(0x31, 60, 1, 0, 0, 0, 0), [(1, h(0x31, 60, 1, 0, 2, 1, 1))]),     # 99 beats 50; 5 beats 15
        (h(0x41, 105, 5, 0, 0, 0, 0), [(1, h(0x41, 105, 5, 0, 5, 4, 2))]),   # the earlier 199; 11 beats 15
        (h(0x43, 160, 0, 0, 0, 0, 0), [(1, h(0x43, 160, 0, 0, 6, 3, 2))]),   # 1 beats 15
        (h(0x15, 245, 1, 0, 0, 0, 0), [(1, h(0x15, 245, 1, 0, 7, 5, 1))]),   # 198 beats 100; @priority(0)
        (h(0xC1, 120, 2, 0, 0, 0, 0), [(1, h(0xC1, 120, 2, 0, 4, 2, 2))]),   # 200 first although written 4th
        (h(0x00, 95, 1, 0, 0, 0, 0), [(1, h(0x00, 95, 1, 0, 0, 1, 1))]),     # t1 misses; 5 beats 11 and 15
        (h(0x1F, 255, 3, 0, 0, 0, 0), [(1, h(0x1F, 255, 3, 0, 1, 3, 2))]),
    ],
    # add bound to b by t1 and t3, to c by t2; put to d by t4, to a by t5 (entries: ENTRIES and t5's 0x16)
    "action_bound_twice.p4": [
        (h(1, 1, 2, 0), [(1, h(0x99, 0x3B, 0x16, 7))]),     # b 1 + 10 = 0x0B, + 0x30; c 2 + 20; a by t5
        (h(2, 5, 0x14, 9), [(1, h(0x99, 6, 0x16, 0x42))]),  # defaults + 1, + 2; t4's entry
        (h(3, 10, 0, 0), [(1, h(3, 0x3B, 2, 7))]),          # b 10 + 1 = 0x0B: t3's entry
        (h(1, 0xFF, 0xF0, 0), [(1, h(1, 9, 4, 7))]),        # both wrap
    ],
    # actions = { }: none always misses (c = 2); keyless's action_run is NoAction (d = b + 1)
    "empty_actions.p4": [
        (h(1, 2, 0, 0), [(1, h(1, 2, 2, 3))]),
        (h(0, 255, 9, 9), [(1, h(0, 255, 2, 0))]),
    ],
    # b = the first byte's top 3 bits ++ its top 5 bits; first nibble 4: d = low nibble; second byte 0xFF: c = the
    # first byte + the byte after h; otherwise c = the fifth byte after h
    "lookahead_bits.p4": [
        (bytes.fromhex("450000001122334455"), [(1, bytes.fromhex("454800051122334455"))]),     # 2 ++ 8
        (bytes.fromhex("12ff00007f80030405"), [(1, bytes.fromhex("120291007f80030405"))]),     # 0x12 + 0x7F
        (bytes.fromhex("1234000001020304050607"), [(1, bytes.fromhex("1202050001020304050607"))]),
        (bytes.fromhex("4fff0000aabbccddee"), [(1, bytes.fromhex("4f49000faabbccddee"))]),     # (4, _) first
    ],
    # d bits: 1 first == second, 2 first != third, 4 {first, second} == {second, first}, 8 invalid == invalid
    "header_eq.p4": [
        (h(0, 1, 2, 3, 0, 1, 2, 3), [(1, h(0, 1, 2, 0x0F))]),
        (h(1, 1, 2, 3, 1, 1, 2, 3, 1, 1, 2, 3), [(1, h(1, 1, 2, 0x0D))]),
        (h(1, 1, 2, 3, 1, 1, 2, 4, 1, 1, 2, 3), [(1, h(1, 1, 2, 0x08))]),
        (h(0, 1, 2, 3, 0, 1, 2, 4), [(1, h(0, 1, 2, 0x0A))]),
    ],
}


@pytest.fixture(scope="module", params=list(MODES))
def mode(request):
    return request.param


# program -> table entries a controller writes before the cases run: (table, match, action, params)
ENTRIES: dict[str, list[tuple[str, dict, str, dict]]] = {
    # error numbers: NoError 0, PacketTooShort 1 (core.p4's order)
    "error_key.p4": [("Ing.by_error", {"sm.parser_error": 0}, "Ing.mark", {"v": 0x11}),
                     ("Ing.by_error", {"sm.parser_error": 1}, "Ing.mark", {"v": 0x22})],
    # one action (P4Info: Ing.add, put) written into tables that bind it to different arguments
    "action_bound_twice.p4": [("Ing.t1", {"hdr.h.a": 1}, "Ing.add", {"v": 10}),
                              ("Ing.t2", {"hdr.h.a": 1}, "Ing.add", {"v": 20}),
                              ("Ing.t3", {"hdr.h.b": 0x0B}, "Ing.add", {"v": 0x30}),
                              ("Ing.t4", {"hdr.h.a": 2}, "put", {"v": 0x42})],
}

_compiled: dict[tuple[str, str], Switch] = {}


def switch(program: str, mode: str) -> Switch:
    key = (program, mode)
    if key not in _compiled:
        sw = Switch(str(HERE / program), **MODES[mode])
        for table, match, action, params in ENTRIES.get(program, []):
            sw.insert_entry(table, match, action, params)
        _compiled[key] = sw
    return _compiled[key]


@pytest.mark.parametrize("program", sorted(CASES))
def test_program(program, mode):
    sw = switch(program, mode)
    for pkt, want in CASES[program]:
        got = [(o.port, o.data) for o in sw.send(0, pkt)]
        assert got == want, f"{program} [{mode}] in {pkt.hex()}"


def test_subcontrol_through_p4runtime(tmp_path):
    """A sub-control's table and action carry p4c's names (Ing.rw.t, key h.a, Ing.rw.add) in P4Info; its
    non-const entries = {...} are readable and a controller's entry takes effect."""
    prog = HERE / "subcontrol.p4"
    with local_server(include_dirs=[str(HERE)]) as (dev, addr, _svc):
        async def go():
            async with connect(addr, prog, tmp_path) as sw:
                assert sw.p4info.tables["Ing.rw.t"].alias == "t"          # p4c: the shortest unique suffix
                assert sw.p4info.actions["Ing.rw.add"].alias == "add"
                got = [e async for e in sw.read(P4TableEntry("Ing.rw.t"))]
                assert len(got) == 1 and got[0].action == P4TableAction("add", v=10)   # finsy names by alias
                await sw.insert([P4TableEntry("Ing.rw.t", match=P4TableMatch({"h.a": 2}),
                                              action=P4TableAction("Ing.rw.add", v=1))])
                with dev.lock:
                    out = dev.pipeline.switch.send(0, h(2, 5, 0, 7))
                assert [(o.port, o.data) for o in out] == [(1, h(2, 106, 8, 0x78))]     # 5 + 1 + base 100
        asyncio.run(go())


def test_shared_sub_control_has_one_action():
    """The instance applied twice exists once: P4Info lists its action once, under p4c's name."""
    sw = Switch(str(HERE / "subcontrol_shared.p4"))
    info = P4InfoBuilder(sw.ir).build()
    assert [a.preamble.name for a in info.actions if "inc" in a.preamble.name] == ["Ing.inc.add"]


def test_bound_action_parameters_are_not_in_p4info():
    """The control plane supplies only set_b's directionless parameter v (its directional ones are bound by
    the table), and the action works with a controller's entry."""
    sw = Switch(str(HERE / "action_params.p4"))
    info = P4InfoBuilder(sw.ir).build()
    (act,) = [a for a in info.actions if a.preamble.name == "Ing.set_b"]
    assert [p.name for p in act.params] == ["v"]
    # called directly (inlined by the midend): listed as p4c lists them, with no parameters (p4c binds them all);
    # the top-level bump ahead of Ing's own actions, as p4c copies it into Ing
    assert [a.preamble.name for a in info.actions] == ["NoAction", "bump", "Ing.set_b", "Ing.split"]
    assert [list(a.params) for a in info.actions if a.preamble.name in ("Ing.split", "bump")] == [[], []]
    sw.insert_entry("Ing.t", {"hdr.h.a": 0x2A}, "Ing.set_b", {"v": 100})
    assert [(o.port, o.data) for o in sw.send(0, h(0x2A, 5, 0, 0))] == [(1, h(0x2A, 108, 0x12, 0x0B))]


def test_top_level_actions_in_p4info():
    """Top-level actions are listed once, by their own names, in p4c's order (Ing's uses first, then Eg's), with
    only their directionless parameters (as p4c-bm2-ss lists them); the register one writes is the top-level one."""
    sw = Switch(str(HERE / "top_level_actions.p4"))
    info = P4InfoBuilder(sw.ir).build()
    assert [(a.preamble.name, [p.name for p in a.params]) for a in info.actions] == [
        ("bump", ["k"]), ("put", ["k"]), ("nop", []), ("to_port", ["p"])]
    sw.send(0, h(2, 40, 0, 0))
    assert sw.register_read("last_put", 0) == 49
    # one name, each table's own copy: bound to d in Ing.t, to a in Eg.e (as default actions: p4c-bm2-ss sizes a
    # table with initial entries to hold just those, so BMv2 takes no more)
    sw.set_default_action("Ing.t", "bump", {"k": 20})
    sw.set_default_action("Eg.e", "bump", {"k": 1})
    assert [(o.port, o.data) for o in sw.send(0, h(5, 2, 0, 5))] == [(2, h(6, 0x12, 0, 25))]


def test_const_entry_priorities_read_as_bmv2s():
    """Const entries read back with the P4Runtime priority BMv2's server reports for them (PI: 2**31 - 1 minus
    BMv2's priority, which is the entry's @priority or its position); LPM entries have none."""
    sw = Switch(str(HERE / "entry_priority.p4"))
    top = (1 << 31) - 1
    assert [e["priority"] for e in sw.entries("Ing.t_tern")] == [top - 3, top - 2, top - 1, top - 5, top - 5]
    assert [e["priority"] for e in sw.entries("Ing.t_range")] == [top - 1, top - 0, top - 3]
    assert [e["match"][1] for e in sw.entries("Ing.t_lpm")] == [("lpm", b"\x00", 2), ("lpm", b"\x20", 4),
                                                                ("lpm", b"\x22", 8)]


def test_initial_entry_priorities_read_as_bmv2s():
    """Initial entries with priority= are held, and read back, in the order p4c-bm2-ss writes them (sorted by
    priority, the winner first, the written order among equal ones) with the P4Runtime priority BMv2's server
    reports (2**31 - 1 minus the position, or minus the entry's @priority)."""
    sw = Switch(str(HERE / "entry_priority_initial.p4"))
    top = (1 << 31) - 1
    rows = lambda t: [(e["params"][1][0], e["priority"]) for e in sw.entries(t)]      # noqa: E731
    assert rows("Ing.t1") == [(4, top - 1), (5, top - 2), (6, top - 3), (7, top - 4), (1, top - 5), (2, top - 6),
                              (3, top - 7)]
    assert rows("Ing.t2") == [(3, top - 1), (1, top - 2), (4, top - 3), (2, top - 4), (5, top - 0)]
    assert rows("Ing.t3") == [(1, top - 1), (2, top - 2)]


def test_empty_action_list():
    """A table with 'actions = { }' lists NoAction as its default only (P4Info as p4c's); no entry can be written."""
    sw = Switch(str(HERE / "empty_actions.p4"))
    info = P4InfoBuilder(sw.ir).build()
    (t, _) = info.tables
    assert [(r.id, r.scope) for r in t.action_refs] == [(info.actions[0].preamble.id, 2)]     # DEFAULT_ONLY
    with pytest.raises(SwitchError, match="defaultonly"):
        sw.insert_entry("Ing.none", {"hdr.h.a": 1}, "NoAction")


def test_value_set_through_p4runtime(tmp_path):
    """Members written with MODIFY steer the select; a later MODIFY replaces them; Read returns them; the
    case listed before the value set (1) still wins; more members than the size is an error. The deparser
    emits only h, so a packet that matched the set loses the 4 bytes extracted into 'extra' and shows d = 1."""
    prog = HERE / "value_set.p4"
    pkt = lambda a: h(a, 0, 0, 0, 9, 8, 7, 6, 5)                           # noqa: E731
    with local_server(include_dirs=[str(HERE)]) as (dev, addr, _svc):
        async def go():
            async with connect(addr, prog, tmp_path) as sw:
                vs = sw.p4info.value_sets["P.special"]
                assert (vs.size, [(m.id, m.name, m.bitwidth) for m in vs.match]) == (4, [(1, "", 8)])

                def run(a):
                    with dev.lock:
                        return [(o.port, o.data) for o in dev.pipeline.switch.send(0, pkt(a))]
                await sw.modify([P4ValueSetEntry("P.special", members=[P4ValueSetMember(5), P4ValueSetMember(1)])])
                got = [e async for e in sw.read(P4ValueSetEntry("P.special", members=[]))]
                assert sorted(m.value for m in got[0].members) == [1, 5]
                assert run(5) == [(1, h(5, 0, 0, 1, 5))]           # extra (9 8 7 6) extracted, not emitted
                assert run(1) == [(1, h(1, 0, 0, 0, 9, 8, 7, 6, 5))]   # "1: accept" comes first
                assert run(6) == [(1, h(6, 0, 0, 0, 9, 8, 7, 6, 5))]
                await sw.modify([P4ValueSetEntry("P.special", members=[P4ValueSetMember(6)])])
                assert run(5) == [(1, h(5, 0, 0, 0, 9, 8, 7, 6, 5))]
                assert run(6) == [(1, h(6, 0, 0, 1, 5))]
                with pytest.raises(Exception, match="at most 4"):
                    await sw.modify([P4ValueSetEntry("P.special", members=[P4ValueSetMember(i) for i in range(5)])])
        asyncio.run(go())


def v1_paths(sw) -> list:
    """The v1model_paths.p4 packets (first byte: what the packet asks for) and what BMv2 sends for each with
    clone session 5 -> port 7 (simple_switch.cpp's ingress_thread/egress_thread order)."""
    return [
        (h(0, 0, 0, 0), [(1, h(0, 0, 0, 0))]),
        # resubmit: ingress again with instance_type 6, kept (field list 1) = 0x4B, lost reset to 0; egress then
        # sees instance_type 0 (b = 0xE0 | 0): BMv2 sets NORMAL when a unicast packet leaves ingress
        (h(1, 0, 0, 0), [(2, h(1, 0xE0, 6, 0x4B))]),
        # recirculate from egress: the deparsed packet through ingress again, instance_type 4; egress again 0
        (h(2, 0, 0, 0), [(2, h(2, 0xE0, 4, 0x4B))]),
        # I2E clone: the original (b = 0x33) to port 1, and the packet as received to session 5's port 7
        (h(3, 0, 0, 0), [(1, h(3, 0x33, 0, 0)), (7, h(3, 0, 1, 0))]),
        # E2E clone of a packet egress drops: the clone (with egress's d = 0x44) still leaves on port 7
        (h(4, 0, 0, 0), [(7, h(4, 0, 2, 0x44))]),
        (h(5, 0, 0, 0, 9), [(1, h(5, 0))]),                   # truncate(2)
    ]


def test_v1model_packet_paths(mode):
    sw = Switch(str(HERE / "v1model_paths.p4"), **MODES[mode])
    sw.set_clone_session(5, [7])
    for pkt, want in v1_paths(sw):
        assert sorted((o.port, o.data) for o in sw.send(0, pkt)) == sorted(want), pkt.hex()


def test_clone_session_through_p4runtime(tmp_path):
    """A CloneSessionEntry (P4Runtime PRE) configures where clones go, with packet_length_bytes truncation;
    without a session, clone() clones nothing (BMv2)."""
    prog = HERE / "v1model_paths.p4"
    with local_server(include_dirs=[str(HERE)]) as (dev, addr, _svc):
        async def go():
            async with connect(addr, prog, tmp_path) as sw:
                def run(pkt):
                    with dev.lock:
                        return sorted((o.port, o.data) for o in dev.pipeline.switch.send(0, pkt))
                assert run(h(3, 0, 0, 0)) == [(1, h(3, 0x33, 0, 0))]              # no session yet
                await sw.insert([P4CloneSessionEntry(5, replicas=[(6, 1)], packet_length_bytes=3)])
                got = [e async for e in sw.read(P4CloneSessionEntry())]
                assert [(e.session_id, e.packet_length_bytes) for e in got] == [(5, 3)]
                assert run(h(3, 0, 0, 0)) == [(1, h(3, 0x33, 0, 0)), (6, h(3, 0, 1))]   # truncated to 3
                await sw.delete([P4CloneSessionEntry(5)])
                assert run(h(3, 0, 0, 0)) == [(1, h(3, 0x33, 0, 0))]
        asyncio.run(go())


def test_resubmit_loop_is_bounded(tmp_path):
    """A program that resubmits every packet is stopped after MAX_EXTRA_PASSES passes (a counted drop)."""
    f = tmp_path / "loop.p4"
    f.write_text(ingress("        resubmit_preserving_field_list(0);\n        sm.egress_spec = 1;"))
    sw = Switch(str(f), include_dirs=[str(HERE)])
    assert sw.send(0, h(1, 2, 3, 4)) == []
    assert sw.drop_total("resubmit_limit") == 1


def test_error_key_from_the_control_plane():
    sw = Switch(str(HERE / "error_key.p4"))
    info = P4InfoBuilder(sw.ir).build()
    (mf,) = [m for t in info.tables for m in t.match_fields]
    # as p4c writes it: no bitwidth for an error key, the error's members (core.p4's order) in type_info
    assert (mf.name, mf.bitwidth) == ("sm.parser_error", 0)
    assert list(info.type_info.error.members)[:3] == ["NoError", "PacketTooShort", "NoMatch"]
    sw.insert_entry("Ing.by_error", {"sm.parser_error": 3}, "Ing.mark", {"v": 0x33})     # StackOutOfBounds
    pkt = h(2, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9, 9)
    assert [(o.port, o.data) for o in sw.send(0, pkt)] == [(1, h(2, 2, 3, 0x33, 5, 6, 7, 8, 9, 9, 9, 9))]


def test_log_msg_goes_to_the_log(caplog, mode):
    sw = switch("parser_features.p4", mode)
    with caplog.at_level("INFO", logger="switch.p4"):
        sw.send(0, h(7, 200, 3, 4, 5, 6, 7, 8))
    assert [r.getMessage() for r in caplog.records if r.name == "switch.p4"] == ["a=7 b=200"]


def test_compile_cli_checks_every_program(tmp_path, capsys):
    """``python -m switch.compile`` (what a user runs before pushing) accepts every conformance program, the
    ones the fused code generator cannot take included, and writes their P4Info."""
    from switch.compile import main
    progs = sorted(str(p) for p in HERE.glob("*.p4") if p.name != "common.p4")
    assert main(progs + ["--out-dir", str(tmp_path)]) == 0
    assert len(list(tmp_path.glob("*.p4info.txtpb"))) == len(progs)


# ---- what stays unsupported or wrong is a located error ---------------------------------------------------------
PROLOGUE = '#include "common.p4"\nstruct H { h_t h; }\n'
EPILOGUE = """
parser P(packet_in pkt, out H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control Eg(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control Vck(inout H hdr, inout meta_t meta) { apply { } }
control Cck(inout H hdr, inout meta_t meta) { apply { } }
control Dep(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), Vck(), Ing(), Eg(), Cck(), Dep()) main;
"""


def ingress(body: str, decls: str = "", locals_: str = "") -> str:
    return (PROLOGUE + decls + "\ncontrol Ing(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) {\n"
            + locals_ + "\n    apply {\n" + body + "\n    }\n}\n" + EPILOGUE)


ERRORS = {
    "conditional function call": (
        ingress("        if (hdr.h.a == 1 && f(hdr.h.b) == 2) { }", decls="bit<8> f(bit<8> x) { return x; }"),
        "unsupported: a call of function f that is evaluated only conditionally"),
    "function argument count": (
        ingress("        hdr.h.a = f(1, 2);", decls="bit<8> f(bit<8> x) { return x; }"),
        "function f expects 1 argument(s), got 2"),
    "void function as a value": (
        ingress("        hdr.h.a = f();", decls="void f() { }"), "function f returns void"),
    "sub-control apply argument count": (
        ingress("        c.apply(hdr.h);\n        c.apply();",
                decls="control S(inout h_t x) { apply { x.a = 1; } }", locals_="    S() c;"),
        "S.apply expects 1 argument(s)"),
    "missing constructor argument": (
        ingress("        c.apply(hdr.h);",
                decls="control S(inout h_t x)(bit<8> k) { apply { x.a = k; } }", locals_="    S() c;"),
        "S's constructor expects 1 argument(s): 'k' is missing"),
    "unbound directional action parameter": (
        ingress("        t.apply();", locals_="    action a(inout bit<8> x) { x = 1; }\n"
                "    table t { key = { hdr.h.a: exact; } actions = { a; } }"),
        "action a has directional parameters: bind them"),
    "unknown named argument": (
        ingress("        hdr.h.a = f(y = 1);", decls="bit<8> f(bit<8> x) { return x; }"),
        "function f has no parameter named 'y'"),
    "named and positional arguments mixed": (
        ingress("        mark_to_drop(sm, standard_metadata = sm);"), "either every argument is named or none is"),
    "missing argument without default": (
        ingress("        hdr.h.a = f(1);", decls="bit<8> f(bit<8> x, bit<8> y) { return x; }"),
        "'y' is missing"),
    "header union of a non-header": (
        ingress("", decls="header_union bad_t { bit<8> x; }"), "header_union member 'x' must be a header"),
    "resubmit with a data argument": (
        ingress("        resubmit({meta.x});"), "unsupported: resubmit with a data argument"),
    "structure expression missing a field": (
        ingress("        hdr.h = {a = 1, b = 2, c = 3};"), "lacks field(s) d of h_t"),
    "structure expression unknown field": (
        ingress("        hdr.h = {a = 1, b = 2, c = 3, e = 4};"), "h_t has no field 'e'"),
    "push_front with a run-time count": (
        ingress("        hdr.h.a = 1;", decls="struct S2 { h_t[2] s; }", locals_="    S2 v;\n    action x() { v.s.push_front(hdr.h.a); }"),
        "not a compile-time constant"),
    "break outside a loop": (ingress("        break;"), "'break' outside a for loop"),
    "function call in a for condition": (
        ingress("        for (bit<8> i = 0; i < f(i); i = i + 1) { }", decls="bit<8> f(bit<8> x) { return x; }"),
        "unsupported: a call of function f outside a statement"),
    "for loop condition type": (
        ingress("        for (bit<8> i = 0; i; i = i + 1) { }"), "for condition must be bool"),
    "macro argument count": (
        ingress("        hdr.h.a = F(1);", decls="#define F(a, b) a"), "macro F expects 2 argument(s), got 1"),
    "unterminated macro use": (
        ingress("        hdr.h.a = F(1;\n#define X 1\n        );", decls="#define F(a) a"),
        "unterminated use of macro F"),
    "variadic macro": (ingress("", decls="#define F(...) 1"), "unsupported: variadic macro"),
    "switch label type": (
        ingress("        switch (hdr.h.a) { 16w1: { } }"), "width mismatch"),
    "duplicate switch label": (
        ingress("        switch (hdr.h.a) { 1: { } 8w1: { } }"), "duplicate switch label"),
    "switch on a bool": (
        ingress("        switch (hdr.h.a == 1) { default: { } }"), "switch needs a bit<W>"),
    "compound assignment on a left-hand side with a call": (
        ingress("        meta.s[f(hdr.h.a)].a += 1;", decls="struct M2 { h_t[2] s; }\nbit<8> f(bit<8> x) { return x; }",
                locals_="    M2 meta2;").replace("meta.s", "meta2.s"),
        "unsupported: '+=' on a left-hand side that calls a function"),
    "compound assignment operand width": (
        ingress("        hdr.h.a += 16w1;"), "width mismatch"),
    "compound assignment to an in parameter": (
        ingress("        a(hdr.h.b);", locals_="    action a(in bit<8> x) { x |+|= 1; }"),
        "cannot assign to 'x', an 'in' parameter of action a"),
    "arguments bound to an unknown action": (
        ingress("        t.apply();", locals_="    table t { key = { hdr.h.a: exact; } actions = { nope(hdr.h.b); } }"),
        "unknown action nope"),
    "top-level action with directional parameters unbound": (
        ingress("        t.apply();", decls="action a(inout bit<8> x) { x = 1; }",
                locals_="    table t { key = { hdr.h.a: exact; } actions = { a; } }"),
        "action a has directional parameters: bind them"),
    "entry annotation before the key": (
        ingress("        t.apply();", locals_="    action s() { }\n    table t { key = { hdr.h.a: ternary; } "
                "actions = { s; } const entries = { @priority(1) 1 &&& 1 : s(); } }"),
        "an entry's annotations go after its action"),
    "@priority out of range": (
        ingress("        t.apply();", locals_="    action s() { }\n    table t { key = { hdr.h.a: ternary; } "
                "actions = { s; } const entries = { 1 &&& 1 : s() @priority(-1); } }"),
        "@priority must be an integer from 0 to 2147483647"),
    "@priority not a constant": (
        ingress("        t.apply();", locals_="    action s() { }\n    table t { key = { hdr.h.a: ternary; } "
                "actions = { s; } const entries = { 1 &&& 1 : s() @priority(hdr.h.b); } }"),
        "not a compile-time constant"),
    "priority= in const entries": (
        ingress("        t.apply();", locals_="    action s() { }\n    table t { key = { hdr.h.a: ternary; } "
                "actions = { s; } const entries = { priority=1: 1 &&& 1 : s(); } }"),
        "a table with const entries cannot have priorities"),
    "lpm entry mask not a prefix": (
        ingress("        t.apply();", locals_="    action s() { }\n    table t { key = { hdr.h.a: lpm; } "
                "actions = { s; } const entries = { 0xA0 &&& 0xA0 : s(); } }"),
        "invalid mask for an lpm key: 0xa0 is not a prefix of 8 bits"),
    "table without an actions property": (
        ingress("        t.apply();", locals_="    table t { key = { hdr.h.a: exact; } }"),
        "table t has no 'actions' property"),
    "comparing different header types": (
        ingress("        if (hdr.h == meta) { }"), "type mismatch"),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_located_errors(tmp_path, name):
    src, text = ERRORS[name]
    f = tmp_path / "prog.p4"
    f.write_text(src)
    with pytest.raises(P4Error) as ei:
        Switch(str(f), include_dirs=[str(HERE)])
    e = ei.value
    assert text in e.message
    assert e.loc.file.endswith("prog.p4") and e.loc.line > 2 and e.loc.col >= 1


# ---- crc16_custom / crc32_custom -----------------------------------------------------------------------------------
def crc_reference(data: bytes, width: int, poly: int, init: int, xorout: int, refin: bool, refout: bool) -> int:
    """The CRC from its definition, one message bit at a time (no table, no reflected shortcut): the register
    starts at ``init``; each message bit (bytes in order, each most significant bit first, or least significant
    first when ``refin``) is xored into the register's top bit, the register shifts left and, when the bit
    shifted out is 1, takes ``poly``; the result is the register, reflected when ``refout``, xored with
    ``xorout``."""
    top, mask = 1 << (width - 1), (1 << width) - 1
    reg = init
    for byte in data:
        for i in range(8):
            bit = (byte >> i) & 1 if refin else (byte >> (7 - i)) & 1
            out = bool(reg & top) ^ bit
            reg = (reg << 1) & mask
            if out:
                reg ^= poly
    if refout:
        reg = int(f"{reg:0{width}b}"[::-1], 2)
    return reg ^ xorout


CHECK = b"123456789"
# name: (width, poly, init, xorout, refin, refout, check value for "123456789" from the CRC catalogue
# (reveng.sourceforge.io/crc-catalogue): an expectation independent of both implementations)
CATALOGUE = {
    "CRC-32/ISO-HDLC": (32, 0x04C11DB7, 0xFFFFFFFF, 0xFFFFFFFF, True, True, 0xCBF43926),
    "CRC-32/ISCSI": (32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, True, True, 0xE3069283),
    "CRC-32/BZIP2": (32, 0x04C11DB7, 0xFFFFFFFF, 0xFFFFFFFF, False, False, 0xFC891918),
    "CRC-32/MPEG-2": (32, 0x04C11DB7, 0xFFFFFFFF, 0x00000000, False, False, 0x0376E6E7),
    "CRC-16/ARC": (16, 0x8005, 0x0000, 0x0000, True, True, 0xBB3D),
    "CRC-16/IBM-3740": (16, 0x1021, 0xFFFF, 0x0000, False, False, 0x29B1),
    "CRC-16/XMODEM": (16, 0x1021, 0x0000, 0x0000, False, False, 0x31C3),
    "CRC-16/KERMIT": (16, 0x1021, 0x0000, 0x0000, True, True, 0x2189),
}


def test_crc_reference_meets_the_catalogue():
    for name, (w, poly, init, xo, ri, ro, check) in CATALOGUE.items():
        assert crc_reference(CHECK, w, poly, init, xo, ri, ro) == check, name


def crc_packet(a: int, data: bytes, b: int = 0) -> bytes:
    return h(a, b, 0, 0) + data + bytes(12)


def crc_fields(out: bytes) -> tuple[int, int, int, int]:
    o = out[13:25]
    return (int.from_bytes(o[0:4], "big"), int.from_bytes(o[4:8], "big"), int.from_bytes(o[8:10], "big"),
            int.from_bytes(o[10:12], "big"))


def test_crc_custom_calculations_are_named_in_source_order():
    sw = Switch(str(HERE / "crc_custom.p4"))
    assert [(n, c.width, c.where.rsplit(":", 2)[1]) for n, c in sw.custom_crcs.items()] == [
        ("calc_0", 32, "24"), ("calc_1", 32, "34"), ("calc_2", 32, "35"), ("calc_3", 16, "36"), ("calc_4", 16, "43")]


def test_crc_custom_defaults_and_catalogue_parameters(mode):
    """Defaults are BMv2's crc32 / crc16; each calculation then follows its own parameters (catalogue check
    values), in hash() and in update_checksum alike."""
    sw = Switch(str(HERE / "crc_custom.p4"), **MODES[mode])
    (out,) = sw.send(0, crc_packet(2, CHECK))
    assert out.port == 1 and out.data[:13] == h(2, 0, 0, 0) + CHECK
    assert crc_fields(out.data) == (0xCBF43926, 0xCBF43926, 0xBB3D, 0xBB3D)
    for calc, name in (("calc_1", "CRC-32/ISCSI"), ("calc_2", "CRC-32/BZIP2"), ("calc_3", "CRC-16/IBM-3740"),
                       ("calc_4", "CRC-16/XMODEM")):
        w, poly, init, xo, ri, ro, _ = CATALOGUE[name]
        sw.set_crc_parameters(calc, w, poly, init, xo, ri, ro)
    (out,) = sw.send(0, crc_packet(2, CHECK))
    assert crc_fields(out.data) == (0xE3069283, 0xFC891918, 0x29B1, 0x31C3)
    (out,) = sw.send(0, crc_packet(1, CHECK))                       # update_checksum's condition false: kept
    assert crc_fields(out.data) == (0xE3069283, 0xFC891918, 0x29B1, 0)


def test_crc_custom_matches_the_definition_on_any_parameters(mode):
    """Random data and parameters (mixed reflections, odd initial remainders included) against the bit-serial
    reference."""
    import random
    rng = random.Random(36)
    sw = Switch(str(HERE / "crc_custom.p4"), **MODES[mode])
    for _ in range(12):
        p32 = (rng.getrandbits(32) | 1, rng.getrandbits(32), rng.getrandbits(32), rng.random() < 0.5,
               rng.random() < 0.5)
        p16 = (rng.getrandbits(16) | 1, rng.getrandbits(16), rng.getrandbits(16), rng.random() < 0.5,
               rng.random() < 0.5)
        sw.set_crc_parameters("calc_2", 32, *p32)
        sw.set_crc_parameters("calc_4", 16, *p16)
        data = rng.randbytes(9)
        (out,) = sw.send(0, crc_packet(2, data))
        c32a, c32b, c16a, c16b = crc_fields(out.data)
        assert (c32a, c16a) == (crc_reference(data, 32, *CATALOGUE["CRC-32/ISO-HDLC"][1:6]),
                                crc_reference(data, 16, *CATALOGUE["CRC-16/ARC"][1:6]))     # still the defaults
        assert (c32b, c16b) == (crc_reference(data, 32, *p32), crc_reference(data, 16, *p16)), (p32, p16)


def test_crc_custom_action_selector():
    """The selector's member is hash % group size (BMv2), with the hash its own crc32_custom calculation."""
    sw = Switch(str(HERE / "crc_custom.p4"))
    for m, port in ((1, 3), (2, 4), (3, 5)):
        sw.insert_member("Ing.sel", m, "Ing.set_port", {"port": port})
    sw.insert_group("Ing.sel", 1, [1, 2, 3])
    sw.insert_entry("Ing.pick", {"hdr.h.b": 7}, group=1)
    ports = (3, 4, 5)

    def port_for(data: bytes) -> int:
        (out,) = sw.send(0, crc_packet(1, data, b=7))
        return out.port
    assert port_for(CHECK) == ports[0xCBF43926 % 3]
    w, poly, init, xo, ri, ro, check = CATALOGUE["CRC-32/ISCSI"]
    sw.set_crc_parameters("calc_0", w, poly, init, xo, ri, ro)
    assert port_for(CHECK) == ports[check % 3]
    for data in (b"abcdefghi", bytes(9), b"\xff" * 9):
        assert port_for(data) == ports[crc_reference(data, w, poly, init, xo, ri, ro) % 3]


def test_crc_custom_parameter_errors():
    from switch.errors import SwitchError
    sw = Switch(str(HERE / "crc_custom.p4"))
    with pytest.raises(SwitchError, match=r"no custom CRC calculation 'calc_9'.*calc_0 \(32 bits, .*crc_custom.p4:24"):
        sw.set_crc_parameters("calc_9", 32, 1, 0, 0, True, True)
    with pytest.raises(SwitchError, match="calc_3 is crc16_custom, not crc32_custom") as e:
        sw.set_crc_parameters("calc_3", 32, 1, 0, 0, True, True)
    assert e.value.code == "INVALID_ARGUMENT"
    with pytest.raises(SwitchError, match="polynomial 0x18005 does not fit 16 bits"):
        sw.set_crc_parameters("calc_3", 16, 0x18005, 0, 0, True, True)

"""The short P4Runtime fuzz campaign of ``make test``: a fixed set of mutated requests of a fixed seed against a
real ``dlcp-switch``; ``make fuzz`` runs the long one (``tests/fuzz/run.py``)."""
from __future__ import annotations

import random

from finsy.proto import p4r

from tests.fuzz.p4rt_fuzz import _ekey, campaign, mutate_bytes, mutate_message


def test_mutated_requests_always_get_a_status_and_leave_no_partial_state():
    r = campaign(seed=20261125, seconds=0.0, min_cases=40, max_cases=40)
    assert r.failures == [], "\n".join(r.failures[:5])
    assert r.requests == 40 and r.crashes == r.hangs == r.partial_states == 0
    # every kind of request was mutated, accepted and refused updates both happened, states were compared
    assert {k.split("/")[0] for k in r.by_kind} == {"write", "read", "pipeline", "stream"}
    assert r.updates_accepted and r.updates_refused and r.state_checks
    assert "OK" in r.status_codes and len(r.status_codes) >= 4


def test_mutations_are_deterministic_and_change_the_request():
    req = p4r.WriteRequest(device_id=0, election_id=p4r.Uint128(low=10))
    u = req.updates.add(type=p4r.Update.INSERT)
    u.entity.table_entry.table_id = 7
    u.entity.table_entry.match.add(field_id=1).exact.value = b"\x01"
    a = [mutate_message(req, random.Random(f"s:{i}"))[0].SerializeToString() for i in range(50)]
    b = [mutate_message(req, random.Random(f"s:{i}"))[0].SerializeToString() for i in range(50)]
    assert a == b and sum(x != req.SerializeToString() for x in a) > 40
    assert mutate_bytes(b"abc" * 10, random.Random(1)) == mutate_bytes(b"abc" * 10, random.Random(1))


def test_a_register_write_without_index_names_every_cell():
    """(the oracle) a register update without an index writes every cell: its key is a wildcard."""
    e = p4r.Entity()
    e.register_entry.register_id = 5
    assert _ekey(e) == ("register", 5, "*")
    e.register_entry.index.index = 0
    assert _ekey(e) == ("register", 5, 0)


def test_an_entry_is_named_by_its_canonical_match():
    """(the oracle) a match value with leading zero bytes names the entry the server reads back canonical (found
    by the campaign: the server takes both forms, as P4Runtime asks)."""
    a, b = p4r.Entity(), p4r.Entity()
    for e, v in ((a, b"\x08"), (b, b"\x00\x08")):
        e.table_entry.table_id = 3
        e.table_entry.match.add(field_id=1).ternary.value = v
        e.table_entry.match[0].ternary.mask = v
    assert _ekey(a) == _ekey(b)

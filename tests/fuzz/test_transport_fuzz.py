"""The short transport fuzz campaign of ``make test``: a fixed set of rounds of a fixed seed (the same inputs on
every run) per tag mode; ``make fuzz`` runs the long one (``tests/fuzz/run.py``)."""
from __future__ import annotations

import pytest

from tests.fuzz.transport_fuzz import MODES, campaign
from host import wire

#: the keyed modes need the per-packet tag of the wire format
_MODES = MODES if any(f.name == "tag" for f in wire.FIELDS) else ("off",)


@pytest.mark.parametrize("mode", _MODES)
def test_mutated_datagrams_never_crash_hang_or_corrupt(mode):
    r = campaign(seed=20261125, seconds=0.0, mode=mode, min_rounds=40, max_rounds=40)
    assert r.failures == [], "\n".join(r.failures[:5])
    assert r.rounds == 40 and r.crashes == r.hangs == r.corrupted == 0
    assert r.datagrams_sent > 1000 and sum(r.drops.values()) > 0
    # every kind of mutation was tried, and the receiver named the fields it refused
    assert {"bitflip", "field", "truncate", "extend", "overwrite", "splice", "replay"} <= set(r.operators)
    assert r.malformed_by_field

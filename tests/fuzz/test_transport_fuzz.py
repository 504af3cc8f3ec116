"""The short transport fuzz campaign of ``make test``: a fixed set of rounds of a fixed seed (the same inputs on
every run) per tag mode; ``make fuzz`` runs the long one (``tests/fuzz/run.py``)."""
from __future__ import annotations

import pytest

from tests.fuzz.transport_fuzz import MODES, campaign
from host import wire

#: the keyed modes need the per-packet tag of the wire format
_MODES = MODES if any(f.name == "tag" for f in wire.FIELDS) else ("off",)


@pytest.mark.parametrize("mode,native", [(m, True) for m in _MODES] + [("off", False)])
def test_mutated_datagrams_never_crash_hang_or_corrupt(mode, native):
    """Each tag mode against the C fast lanes (as in production), and once against the Python paths alone."""
    r = campaign(seed=20261125, seconds=0.0, mode=mode, native=native, min_rounds=100, max_rounds=100)
    assert r.failures == [], "\n".join(r.failures[:5])
    assert r.rounds == 100 and r.crashes == r.hangs == r.corrupted == 0
    assert r.datagrams_sent > 1000 and sum(r.drops.values()) > 0
    # every kind of mutation was tried, and the receiver named the fields it refused
    assert {"bitflip", "field", "truncate", "extend", "overwrite", "splice", "replay"} <= set(r.operators)
    assert r.malformed_by_field
    if mode == "outsider":  # without the key nothing gets past the tag check: no deeper check ever refuses
        assert set(r.rejected_by_field) == {"tag"} and r.rejected_by_field["tag"] > 100
        assert r.drops["inconsistent"] == 0 and r.filtered == 0
    else:  # with the key (or none), mutants reach the receive checks behind it
        assert r.filtered and set(r.rejected_by_field) - {"tag"} and "tag" not in r.rejected_by_field


def test_the_forgery_filter_reads_claims_leniently():
    """(the oracle's own rule) a datagram that claims the genuine transfer is held back in the modes without
    authentication even when the wire format calls its header inconsistent, since the receiver's cheap checks
    may still take it; an exact genuine datagram and claims on other transfers pass."""
    import numpy as np

    from tests.fuzz.mutate import set_field
    from tests.fuzz.transport_fuzz import LEGIT_BASE, DECOY_BASE, _Forgery, genuine_data

    f = _Forgery()
    legit = genuine_data(np.arange(1000, dtype=np.float32), tid=LEGIT_BASE + 3, rank=0)
    f.genuine.update(legit)
    assert not f.forges(legit[0], None)
    bad = bytearray(legit[0])
    bad[-1] ^= 1  # another payload
    set_field(bad, "flags", 0x01)  # and DROP_ELIGIBLE on a seq not below eligible: wire.parse_datagram refuses it
    with pytest.raises(wire.WireError, match="DROP_ELIGIBLE"):
        wire.parse_datagram(bytes(bad))
    assert f.forges(bytes(bad), None)
    other = bytearray(bad)
    set_field(other, "transfer_id", DECOY_BASE)
    assert not f.forges(bytes(other), None)

"""The short switch fuzz campaign of ``make test``: a fixed set of batches of a fixed seed, mutated DLCP frames
into a live ``dlcp-switch`` between two namespaces; ``make fuzz`` runs the long one (``tests/fuzz/run.py``)."""
from __future__ import annotations

import random
import struct

import pytest

from host import wire
from tests.fuzz.switch_fuzz import _csum, campaign, frame, genuine_dlcp


@pytest.mark.netns
def test_mutated_frames_never_crash_the_switch_and_it_keeps_forwarding(root_required):
    r = campaign(seed=20261125, seconds=0.0, min_batches=25, max_batches=25)
    assert r.failures == [], "\n".join(r.failures[:5])
    assert r.batches == 25 and r.crashes == r.hangs == r.counter_errors == 0
    assert r.genuine_delivered == r.genuine_sent == 250
    assert r.frames_sent > 3000 and r.unaccounted == 0
    # the frames reached every kind of drop the program counts for hostile input, and some were forwarded
    assert {"parser_error", "bad_checksum", "ttl_expired", "no_route", "early_eligible"} <= set(r.ingress_drops)
    assert r.forwarded > r.genuine_sent and r.eligible_drops > 0


def test_frames_are_well_formed_before_mutation():
    """(the fuzzer's own base) lengths and checksums of a built frame are right, so a mutation is the only fault."""
    d = genuine_dlcp(random.Random(3), tid=1, seq=0, total=1)
    wire.parse_datagram(d)
    f = frame("02:00:00:00:00:01", "10.77.1.1", "10.77.2.1", d)
    ip, udp = f[14:34], f[34:42]
    assert _csum(bytes(ip)) == 0 and struct.unpack("!H", ip[2:4])[0] == 20 + 8 + len(d)
    assert struct.unpack("!H", udp[4:6])[0] == 8 + len(d) and udp[2:4] == struct.pack("!H", wire.UDP_PORT)

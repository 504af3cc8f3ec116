"""Id spaces that do not wrap in a job's life (issue 35): 64-bit transfer ids on the wire, a million group tags,
34-bit point-to-point message numbers; and the per-job tag key agreed at the backend's rendezvous."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from host.collectives import Collectives, EndpointLink
from host.transport import Options
from tests.host.dist_run import check, launch


@pytest.mark.parametrize("native", [True, False], ids=["c-lane", "python-path"])
def test_transfer_ids_are_64_bits_end_to_end(make_endpoints, native):
    """Three transfers whose ids share their low 32 bits are three transfers (data, ACKs and DONE go to the right
    one), on the C lane and on the Python path."""
    a, b = make_endpoints(2, Options(native=native))
    ids = [7, (1 << 32) | 7, (1 << 63) | 7]
    xs = [np.random.default_rng(i).standard_normal(20_000).astype(np.float32) for i in range(3)]
    hs = [b.post_recv(0, t, np.zeros(20_000, np.float32), timeout=10) for t in ids]
    sends = [a.send(1, x, transfer_id=t) for x, t in zip(xs, ids)]
    for h, x in zip(hs, xs):
        assert np.array_equal(h.wait().data, x)
    for s in sends:
        s.wait(10)
    with pytest.raises(ValueError, match="64 bits"):
        a.send(1, xs[0], transfer_id=1 << 64)


def test_point_to_point_ids_do_not_meet_their_tombstones(make_endpoints):
    """Messages of one (peer, tag) past 2^16 and 2^32 (the message counter set there rather than sending them all)
    through the real path, Collectives over EndpointLink over endpoints: each is a new transfer. A 16-bit counter
    gave message 2^16 the id of message 0, whose tombstone made its recv fail as already received."""
    a, b = make_endpoints(2)
    ca, cb = (Collectives(EndpointLink(ep), [0, 1], r, timeout=10) for r, ep in enumerate((a, b)))
    got: list[float] = []

    def receive(n: int) -> None:
        for _ in range(n):
            y = torch.empty(4)
            cb.recv(y, 0, tag=3)
            got.append(float(y[0]))

    sent = 0
    for start in (0, 1 << 16, 1 << 32):
        for c, d in ((ca, "send"), (cb, "recv")):
            c._p2p_counts[(1 if d == "send" else 0, 3, d)] = start  # as if that many messages had gone before
        t = threading.Thread(target=receive, args=(3,))
        t.start()
        for _ in range(3):
            ca.send(torch.full((4,), float(sent)), 1, tag=3)
            sent += 1
        t.join(20)
    assert got == [float(i) for i in range(sent)]
    assert b.stats()["transfers_received"] == sent


def test_group_ids_are_distinct_and_collective_ids_name_only_their_group():
    ids = {}
    for g in (0, 1, 63, 64, 1000, Collectives.MAX_GROUPS - 1):
        c = Collectives(None, [0, 1], 0, group_tag=g)
        mask, value = c.collective_ids()
        coll, p2p = c._tid(5, 3), c._p2p_tid(1, 0, "send")
        assert coll & mask == value and p2p & mask != value
        assert coll >= 1 << 32 and p2p >= 1 << 32  # never an id a Link user picks below 2^32 (ACiD's gossip)
        assert coll < 1 << 64 and p2p < 1 << 64
        ids[g] = (coll, p2p)
    assert len({i for pair in ids.values() for i in pair}) == 2 * len(ids)
    with pytest.raises(ValueError, match="group_tag"):
        Collectives(None, [0, 1], 0, group_tag=Collectives.MAX_GROUPS)


@pytest.mark.slow
def test_seventy_subgroups_and_an_agreed_key():
    """70 dlcp subgroups (the old tags wrapped after 63) are created and used twice over, with collectives and
    point-to-point; every rank agreed the same tag key at rendezvous."""
    out = check(launch("tests.host.id_space_worker", "groups", 2, timeout=240, args=["70"]))
    keys = {line for o in out for line in o.splitlines() if line.startswith("key ")}
    assert len(keys) == 1 and keys != {"key none"}, out
    assert all(f"ok {r}" in o for r, o in enumerate(out))


@pytest.mark.slow
def test_dlcp_tag_off_makes_an_unkeyed_job():
    out = check(launch("tests.host.id_space_worker", "groups", 2, timeout=240, env={"DLCP_TAG": "0"}, args=["1"]))
    assert {line for o in out for line in o.splitlines() if line.startswith("key ")} == {"key none"}, out

"""The pairing service over real TCP with scripted workers (threads using the real client): neighbour pairing,
stop on the step budget, survivors, dead and silent workers dropped with a warning, bad input."""

from __future__ import annotations

import logging
import socket
import threading
import time

import numpy as np
import pytest

from host.acid.config import RunConfig
from host.acid.constants import neighbors
from host.acid.pairing import CoordinatorClient, PairingService, recv_msg, send_msg


class Scripted:
    """A worker that asks for partners, 'exchanges' by sleeping, and counts steps; rank ``die_after`` pairs
    before closing its connection abruptly (when set)."""

    def __init__(self, svc: PairingService, rank: int, die_after: int | None = None, step_every: int = 1,
                 hang_after: int | None = None):
        self.rank, self.svc, self.die_after, self.hang_after = rank, svc, die_after, hang_after
        self.pairs: list[tuple[int, int, float]] = []
        self.survivors: list[int] | None = None
        self.error: BaseException | None = None
        self.step_every = step_every
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        try:
            c = CoordinatorClient(self.svc.address, self.rank, ("127.0.0.1", 19400 + self.rank))
            start = c.wait_start(10)
            assert start["neighbors"][self.rank] == neighbors(self.svc.config.topology, self.svc.config.world)[
                self.rank]
            c.start_heartbeat(0.05)
            steps = 0
            while True:
                steps += self.step_every
                p = c.request_pair(steps)
                if p is None:
                    break
                self.pairs.append((p[0], p[1], time.monotonic()))
                if self.die_after is not None and len(self.pairs) >= self.die_after:
                    c.sock.shutdown(socket.SHUT_RDWR)  # abrupt: like a killed process (the kernel closes it)
                    return
                if self.hang_after is not None and len(self.pairs) >= self.hang_after:
                    self.svc.wait(30)  # alive and heartbeating, but never asks again nor answers stop
                    c.close()
                    return
                time.sleep(0.002)
            assert not c._pairs, "the service paired a worker that had not asked"
            c.send({"op": "final_ready", "steps": steps})
            self.survivors = c.wait_survivors(10)
            c.send({"op": "done", "report": {"steps": steps}}, np.arange(4, dtype=np.float32).tobytes())
            c.close()
        except BaseException as e:  # noqa: BLE001
            self.error = e


def _cfg(**kw) -> RunConfig:
    base = dict(world=6, topology="ring", steps=40, dead_after=2.0, join_timeout=10.0, seed=1)
    base.update(kw)
    return RunConfig(**base)


def _check_pairs(workers: list[Scripted], topology: str, world: int) -> dict[int, set[int]]:
    neigh = neighbors(topology, world)
    by_id: dict[int, set[int]] = {}
    for w in workers:
        for peer, pid, _ in w.pairs:
            assert peer in neigh[w.rank], f"rank {w.rank} paired with non-neighbour {peer}"
            by_id.setdefault(pid, set()).add(w.rank)
            assert w.rank in [p for p, i, _ in workers[peer].pairs if i == pid] or workers[peer].die_after, \
                f"pair {pid}: {w.rank}->{peer} not mirrored"
    return by_id


@pytest.mark.parametrize("topology", ["ring", "exponential", "complete"])
def test_pairs_are_neighbours_and_the_run_stops_on_the_budget(topology):
    cfg = _cfg(topology=topology, world=8 if topology == "exponential" else 6)
    svc = PairingService(cfg)
    try:
        ws = [Scripted(svc, r) for r in range(cfg.world)]
        assert svc.wait(30)
        for w in ws:
            w.thread.join(10)
            assert w.error is None, w.error
        res = svc.result()
        assert res["error"] is None and res["phase"] == "done"
        assert "step budget" in res["stop_reason"]
        assert res["survivors"] == list(range(cfg.world)) and all(w.survivors == res["survivors"] for w in ws)
        by_id = _check_pairs(ws, topology, cfg.world)
        assert all(len(v) == 2 for v in by_id.values()) and len(by_id) == res["pairs"] > 0
        assert sum(res["edge_pairs"].values()) == res["pairs"]
        assert res["final_identical"] and set(res["reports"]) == set(range(cfg.world))
    finally:
        svc.close()


def test_dead_worker_is_dropped_with_a_warning_and_the_rest_finish(caplog):
    caplog.set_level(logging.WARNING, logger="host.acid.pairing")
    cfg = _cfg(world=6, steps=60)
    svc = PairingService(cfg)
    try:
        ws = [Scripted(svc, r, die_after=3 if r == 2 else None) for r in range(cfg.world)]
        assert svc.wait(30)
        res = svc.result()
        assert res["error"] is None, res["error"]
        assert list(res["dropped"]) == [2] and "connection" in res["dropped"][2]
        assert res["survivors"] == [0, 1, 3, 4, 5]
        msgs = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any("rank 2 dropped from the pairing" in m and "5 of 6 workers left" in m for m in msgs), msgs
        t_dead = ws[2].pairs[-1][2]
        for w in ws:
            if w.rank != 2:
                w.thread.join(10)
                assert w.error is None, w.error
                late = [p for p, _, t in w.pairs if p == 2 and t > t_dead + 0.5]
                assert not late, f"rank {w.rank} paired with the dead rank 2 after it died"
        assert set(res["reports"]) == {0, 1, 3, 4, 5}
    finally:
        svc.close()


def test_hung_worker_is_dropped_at_the_end(caplog):
    """Heartbeating but never answering stop: dropped after exchange_timeout + collective_timeout."""
    caplog.set_level(logging.WARNING, logger="host.acid.pairing")
    svc = PairingService(_cfg(world=4, steps=30, exchange_timeout=0.2, collective_timeout=0.3))
    try:
        ws = [Scripted(svc, r, hang_after=2 if r == 1 else None) for r in range(4)]
        assert svc.wait(30)
        res = svc.result()
        assert res["error"] is None, res["error"]
        assert "did not finish the stopping phase" in res["dropped"][1]
        assert res["survivors"] == [0, 2, 3]
        for w in ws:
            w.thread.join(10)
            assert w.error is None, w.error
    finally:
        svc.close()


def test_silent_worker_is_dropped(caplog):
    caplog.set_level(logging.WARNING, logger="host.acid.pairing")
    cfg = _cfg(world=3, steps=30, dead_after=0.5)
    svc = PairingService(cfg)
    try:
        silent = socket.create_connection(svc.address)
        send_msg(silent, {"op": "hello", "rank": 1, "addr": ["127.0.0.1", 19401]})
        ws = [Scripted(svc, r) for r in (0, 2)]
        assert svc.wait(30)
        res = svc.result()
        assert res["error"] is None, res["error"]
        assert 1 in res["dropped"] and "silent" in res["dropped"][1]
        assert res["survivors"] == [0, 2]
        assert any("rank 1 dropped" in r.getMessage() for r in caplog.records)
        for w in ws:
            w.thread.join(10)
            assert w.error is None, w.error
        silent.close()
    finally:
        svc.close()


def test_bad_hello_is_refused_with_a_reason():
    svc = PairingService(_cfg(world=2))
    try:
        for hello, why in (({"op": "hello", "rank": 7, "addr": ["127.0.0.1", 1]}, "rank 7 is not in 0..1"),
                           ({"op": "free"}, "first message must be 'hello'"),
                           ({"op": "hello", "rank": 0, "addr": "x"}, "addr must be [host, port]")):
            s = socket.create_connection(svc.address)
            send_msg(s, hello)
            msg = recv_msg(s.makefile("rb"))
            assert msg is not None and msg[0]["op"] == "error" and why in msg[0]["message"], msg
            s.close()
        s = socket.create_connection(svc.address)
        s.sendall(b"\xff\xff\xff\xff\x00\x00\x00\x00")  # absurd frame length
        msg = recv_msg(s.makefile("rb"))
        assert msg is not None and "too large" in msg[0]["message"]
        s.close()
    finally:
        svc.close()


def test_join_timeout_names_the_missing_ranks():
    svc = PairingService(_cfg(world=3, join_timeout=0.5))
    try:
        c = CoordinatorClient(svc.address, 0, ("127.0.0.1", 19400))
        with pytest.raises(ConnectionError, match=r"ranks \[1, 2\] never joined"):
            c.wait_start(10)
        assert svc.wait(5)
        assert "missing ranks [1, 2]" in svc.result()["error"]
        c.close()
    finally:
        svc.close()


def test_unreachable_service_is_a_clear_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConnectionError, match="cannot reach the pairing service"):
        CoordinatorClient(("127.0.0.1", port), 0, ("127.0.0.1", 1), timeout=2)

"""Fixtures for the host transport tests: endpoints on private loopback addresses, closed after each test."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from typing import Any, Mapping, Sequence

import pytest

from host.transport import Endpoint, Options


def loopback_map(n: int, rng: random.Random | None = None) -> dict[int, str]:
    """n addresses in a random 127.a.b.0/24 (the whole of 127/8 is local), so tests running at the same time (or a
    switch test using UDP_PORT on 127.0.0.1) never collide on the well-known port."""
    rng = rng or random.Random()
    a, b = rng.randrange(1, 255), rng.randrange(1, 255)
    return {r: f"127.{a}.{b}.{r + 1}" for r in range(n)}


def wait_for(pred, timeout: float = 5.0) -> bool:
    """Poll ``pred()`` every 10 ms until it is true (True) or ``timeout`` seconds passed (False)."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def run_on_hosts(net, code: str, args: Mapping[int, Sequence[str]], timeout: float = 90) -> dict[int, Any]:
    """Run ``python -c code *args[i]`` in host i of ``net`` (a ``testbed.netns.Star``) for each i in ``args``. Each
    script prints "ready" once its endpoint is bound and then waits for a line on stdin, so nothing is sent before
    every socket exists. Returns each host's last line of output, parsed as JSON, once every script exited 0."""
    procs = {i: net.popen(i, [sys.executable, "-c", code, *a], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True) for i, a in args.items()}
    try:
        for p in procs.values():
            assert p.stdout.readline().strip() == "ready"
        for p in procs.values():
            p.stdin.write("go\n")
            p.stdin.flush()
        outs = {i: p.communicate(timeout=timeout)[0] for i, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
    assert all(p.returncode == 0 for p in procs.values()), outs
    return {i: json.loads(o.strip().splitlines()[-1]) for i, o in outs.items()}


_NEW_KEY = object()


@pytest.fixture
def make_endpoints():
    """make_endpoints(n, options=None, per_rank={rank: Options}, key=...) -> list of Endpoints, closed at teardown.
    The endpoints of one call share a fresh random tag key, as a job's ranks do after rendezvous (so every
    transport test runs the keyed paths); ``key=None`` makes an unkeyed job (for tests that inject raw packets)."""
    made: list[Endpoint] = []

    def make(n: int = 2, options: Options | None = None, per_rank: dict[int, Options] | None = None,
             job_id: int = 77, nonce: int = 0xBEEF, addr_map: dict | None = None,
             key: bytes | None | object = _NEW_KEY) -> list[Endpoint]:
        amap = addr_map or loopback_map(n)
        key = os.urandom(16) if key is _NEW_KEY else key
        eps = []
        for r in range(n):
            opts = (per_rank or {}).get(r, options)
            ep = Endpoint(r, amap, job_id, nonce, opts, key=key)
            made.append(ep)
            eps.append(ep)
        return eps

    yield make
    for ep in made:
        ep.close()


@pytest.fixture
def single_torch_thread():
    """One torch thread for the test: the machine is shared, and small tensors gain nothing from more."""
    import torch
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)

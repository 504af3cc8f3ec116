"""Loss on real links: a ``testbed.netns.Star`` whose switch namespace drops, blacks out and duplicates DLCP
datagrams with nftables, for the loss scenarios (tests/host/test_loss_scenarios.py, tests/host/loss_soak.py).

Every host's link ``p<i>`` ends on the switch namespace's bridge; the rules sit in a ``bridge`` table there (hook
``forward``), so they see each datagram once on its way between two hosts and the hosts' own stacks stay
untouched. A rule matches DLCP datagrams by their UDP destination port (``wire.UDP_PORT``: in a namespace the
backend binds the well-known port, so data, ACKs, NACKs and control all go to it), optionally a class read from
the DLCP header behind the UDP header (``@th,64,8``: version and message type; ``@th,72,8``: the flags), one link
and one direction ("in": the host's datagrams towards the switch, ``iifname p<i>``; "out": towards the host,
``oifname p<i>``), and drops a random share of them with ``numgen random``. Each rule counts what it dropped
(:meth:`LossyStar.counters`), so a test can assert the loss happened.

Blackouts (every DLCP datagram dropped for a while, at intervals) are a rule the test switches on and off from a
thread (:meth:`LossyStar.blackouts`): nftables has no periodic time window. Duplication is a ``netdev`` ingress
rule on each switch port that copies a random share of the datagrams for one host straight out of its port
(``dup to``), so the host receives the original (through the bridge) and the copy.

Offloads are off on both ends of every link, so the rules see datagrams as they leave the sender (with GSO on a
veth a UDP GSO batch crosses the bridge as one buffer, and one drop would lose the whole batch).
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from contextlib import contextmanager
from typing import Iterator, Sequence

from host.wire import UDP_PORT
from testbed.netns import Star, disable_offloads, in_namespace, run
from tests.host.dist_run import spawn

TABLE = "dlcploss"
#: DLCP header matches by class, on the bytes after the UDP header: the low nibble of byte 0 is the message type
#: (DATA = 0), bit 0 of byte 1 the DROP_ELIGIBLE flag.
_DATA = ["@th,64,8", "&", "0x0f", "==", "0"]
CLASSES: dict[str, list[str]] = {
    "all": [],
    "data": _DATA,
    "eligible": [*_DATA, "@th,72,8", "&", "0x01", "==", "0x01"],
    "protected": [*_DATA, "@th,72,8", "&", "0x01", "==", "0"],
    "control": ["@th,64,8", "&", "0x0f", "!=", "0"],  # ACK, NACK, CONTROL
}
DIRECTIONS = {"in": ("iifname",), "out": ("oifname",), "both": ("iifname", "oifname")}


class LossyStar:
    """``n`` hosts on one bridge (``testbed.netns.Star``, unshaped unless ``rate``) with an nftables table in the
    switch namespace. Use as a context manager; the namespaces (and with them the rules) go on exit."""

    def __init__(self, n: int, *, rate: str | None = None, prefix: str | None = None):
        self.net = Star(n, rate=rate, prefix=prefix or f"dl{os.getpid() % 100000}")
        try:
            for h in self.net.hosts:
                disable_offloads("eth0", h.ns)
                disable_offloads(f"p{h.index}", self.net.sw)
            self.nft("add", "table", "bridge", TABLE)
            self.nft("add", "chain", "bridge", TABLE, "fw", "{ type filter hook forward priority 0; }")
            self.nft("add", "chain", "bridge", TABLE, "blackout")
            self.nft("add", "counter", "bridge", TABLE, "blackout")  # (named: it outlives the rules that count)
            self.nft("add", "rule", "bridge", TABLE, "fw", "jump", "blackout")
        except BaseException:
            self.net.close()
            raise

    def nft(self, *args: str) -> str:
        """Run ``nft args`` in the switch namespace (a NetnsError names the command and nft's message)."""
        return run(*in_namespace(self.net.sw, "nft", *args)).stdout

    def drop(self, percent: float, *, cls: str = "all", links: Sequence[int] | None = None,
             direction: str = "both", name: str = "drop") -> None:
        """Drop ``percent`` % of the DLCP datagrams of class ``cls`` (:data:`CLASSES`) on ``links`` (default:
        every host's) in ``direction`` ("in": from the host, "out": to it, "both": each way, drawn independently
        at each end: a datagram between two lossy links crosses two draws). Counted under ``name``."""
        if not 0 < percent <= 100:
            raise ValueError(f"drop: percent must be in (0, 100], got {percent}")
        if cls not in CLASSES or direction not in DIRECTIONS:
            raise ValueError(f"drop: cls {cls!r} (known: {sorted(CLASSES)}), direction {direction!r} "
                             f"(known: {sorted(DIRECTIONS)})")
        for i in links if links is not None else range(len(self.net.hosts)):
            for key in DIRECTIONS[direction]:
                self.nft("add", "rule", "bridge", TABLE, "fw", key, f"p{i}", "udp", "dport", str(UDP_PORT),
                         *CLASSES[cls], "numgen", "random", "mod", "10000", "<", str(round(percent * 100)),
                         "counter", "drop", "comment", f'"{name}"')

    def duplicate(self, percent: float, *, name: str = "dup") -> None:
        """Copy ``percent`` % of the DLCP datagrams for each host straight out of its switch port (the original
        goes on through the bridge): the host receives both."""
        if not 0 < percent <= 100:
            raise ValueError(f"duplicate: percent must be in (0, 100], got {percent}")
        for h in self.net.hosts:
            table = f"{TABLE}dup{h.index}"
            self.nft("add", "table", "netdev", table)
            self.nft("add", "chain", "netdev", table, "in",
                     f"{{ type filter hook ingress device p{h.index} priority 0; }}")
            for g in self.net.hosts:
                if g.index != h.index:
                    self.nft("add", "rule", "netdev", table, "in", "ip", "daddr", g.ip, "udp", "dport",
                             str(UDP_PORT), "numgen", "random", "mod", "10000", "<", str(round(percent * 100)),
                             "counter", "dup", "to", f"p{g.index}", "comment", f'"{name}"')

    def blackout(self, on: bool) -> None:
        """Every DLCP datagram dropped (``on``) or the blackout lifted."""
        if on:
            self.nft("add", "rule", "bridge", TABLE, "blackout", "udp", "dport", str(UDP_PORT), "counter", "name",
                     '"blackout"', "drop")
        else:
            self.nft("flush", "chain", "bridge", TABLE, "blackout")

    @contextmanager
    def blackouts(self, length: float, every: float, *, seed: int = 0) -> Iterator[list[float]]:
        """While the block runs, black out every DLCP datagram for ``length`` seconds at intervals drawn
        uniformly from [every/2, 3*every/2] (so they fall anywhere in a job's phases). Yields the list of the
        blackouts' start times (``time.monotonic``), filled as they happen."""
        rng, stop, starts = random.Random(seed), threading.Event(), []

        def loop() -> None:
            while not stop.wait(every * (0.5 + rng.random())):
                starts.append(time.monotonic())
                self.blackout(True)
                stop.wait(length)
                self.blackout(False)

        th = threading.Thread(target=loop, name="blackouts", daemon=True)
        th.start()
        try:
            yield starts
        finally:
            stop.set()
            th.join()
            self.blackout(False)

    def counters(self) -> dict[str, int]:
        """Datagrams matched by the counted rules, summed by the rule's name (drop, dup, ...), and by the named
        counters (blackout)."""
        out: dict[str, int] = {}
        for item in json.loads(self.nft("-j", "list", "ruleset"))["nftables"]:
            if "counter" in item:
                out[item["counter"]["name"]] = out.get(item["counter"]["name"], 0) + item["counter"]["packets"]
            rule = item.get("rule")
            if not rule or "comment" not in rule:
                continue
            for e in rule.get("expr", []):
                if "counter" in e:
                    out[rule["comment"]] = out.get(rule["comment"], 0) + e["counter"]["packets"]
        return out

    def spawn(self, module: str, scenario: str, *, env: dict | None = None):
        """Start ``python -m module scenario`` as one rank per host (rank i in host i), rendezvous at host 0:
        ``tests.host.dist_run.spawn`` in the namespaces."""
        return spawn(module, scenario, len(self.net.hosts), env=env, net=self.net)

    def close(self) -> None:
        self.net.close()

    def __enter__(self) -> "LossyStar":
        return self

    def __exit__(self, *exc) -> None:
        self.close()



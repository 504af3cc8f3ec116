"""The changes of defaults that change what a benchmark measures, and which results predate them.

What: :data:`DEFAULT_CHANGES` (when, what changed, the result names it concerns) and :func:`predates`, the changes
that came after a result was made. Why a module of its own: both the report (``testbed.report``, every table's
provenance) and the evaluation page (``testbed.evaluation``, the pressure sweeps) ask it, and the report renders
the evaluation page, so neither may import the other for it (tests/test_import_cycles.py).
"""

from __future__ import annotations

from typing import Any

__all__ = ["DEFAULT_CHANGES", "predates"]

#: Changes of the defaults that change what a benchmark measures: (time, what changed, the result names it
#: concerns). A result made before a change that concerns it says so wherever it is quoted, until its command is
#: run again on the new defaults (docs/development.md, "Results and generated tables").
DEFAULT_CHANGES: list[tuple[str, str, frozenset[str]]] = [
    ("2026-11-27T22:00:00+0000", "the keyed tag, on by default, became NH + SipHash-2-4 (host/transport/_tag.h)",
     frozenset({"collectives", "keyed_tag", "bounded_loss"})),
    ("2026-11-27T23:00:00+0000", "a synchronous collective runs on its caller's thread (host/backend.py, _Runner)",
     frozenset({"collectives", "cpu_profile", "bounded_loss"})),
    ("2026-11-28T01:35:00+0000", "drop-eligible packets no longer hold the sender's window "
     "(host/transport/sender.py, OutTransfer.n_elig)", frozenset({"bounded_loss"})),
    # (bench/bounded_loss.py pins one torch thread, so its reductions ran on the calling thread before and after)
    ("2026-11-28T04:10:00+0000", "the collectives' reductions and copies run outside torch's OpenMP pool "
     "(host/elementwise.py)", frozenset({"collectives", "cpu_profile"})),
    # (both concern every benchmark whose dlcp runs cross a tbf-shaped link or keep transfers in progress)
    ("2026-11-28T07:00:00+0000", "a drop in a host queue (ENOBUFS) no longer turns GSO off "
     "(host/transport/transmit.py)", frozenset({"collectives", "cpu_profile", "transport", "bounded_loss",
                                                 "keyed_tag"})),
    ("2026-11-28T07:08:00+0000", "the transport's I/O thread wakes for its timers when one is due, not every 1 ms "
     "(host/transport/endpoint.py)", frozenset({"collectives", "cpu_profile", "transport", "bounded_loss",
                                                "keyed_tag"})),
    # ("pressure": the testbed's pressure-regime sweeps, docs/evaluation.md, whose lossy calls' loss reports go to
    # peers the exact calls never send to; testbed.evaluation asks with each sweep's earliest start)
    ("2026-11-28T07:08:00+0000", "a peer's first retransmission timeout is taken from the peers already measured, "
     "and a DONE counts as progress (host/transport/cc.py, seed_rto; sender.py)", frozenset({"pressure"})),
    # (only where a queue on the sending host drops: the benchmarks whose dlcp runs cross a tbf-shaped link)
    ("2026-11-28T10:05:00+0000", "a drop in a queue of the sending host caps the send buffer below that queue's depth "
     "(host/transport/packetio.py, learn_queue_drop)", frozenset({"collectives", "cpu_profile", "transport",
                                                                  "bounded_loss"})),
    ("2026-11-28T10:23:00+0000", "a send its caller transmitted whole arms a wake-up timer instead of waking the "
     "sleeping I/O thread (host/transport/endpoint.py)", frozenset({"collectives", "cpu_profile", "transport",
                                                                    "keyed_tag", "bounded_loss", "pressure"})),
    # (not "pressure": the testbed's links carry both directions of a ring at once, so the wait is mostly cut short
    # by the ACKs of a rank's own sends; in the demo it handled about one socket wake-up in eight and the CPU per
    # iteration stayed where it was, and the protocol -- what is sent, and when -- is the Python loop's)
    ("2026-11-28T17:17:00+0000", "the I/O thread sleeps in the C receive lane while one transfer arrives in order, "
     "taking and ACKing its packets without Python (host/transport/_rxlane.c, rx_wait)",
     frozenset({"collectives", "cpu_profile", "transport", "keyed_tag", "bounded_loss"})),
    # (the same packets for the same ACKs as the Python loop, tests/host/test_txstep.py, but less CPU per wake-up
    # and quicker answers: on the testbed's rings, where the ACKs of a rank's own sends had cut the receiver's
    # native wait short, the wait now takes them too, so "pressure" (its CPU-use column) is concerned as well)
    ("2026-11-28T21:19:00+0000", "the I/O thread's native wait also takes the ACKs of a lone send and sends its "
     "next bursts in C (host/transport/_txstep.h, _sendrun.h), and goes on past holes (ACKs with bitmaps); the "
     "Python loop's cumulative ACKs use the same C code",
     frozenset({"collectives", "cpu_profile", "transport", "keyed_tag", "bounded_loss", "pressure"})),
    # (only links slower than the gap: of the benchmarks, cpu_profile's 20 Mb/s cases; and the testbed's links)
    ("2026-11-29T00:25:00+0000", "the ACK hold (3 ms, 4 packets) and the receive hold (1.5 ms) are on by default "
     "for a transfer whose packets come at least 200 us apart (host/transport/api.py, hold_gap), and the native "
     "wait sends a held ACK itself instead of returning to Python at the hold's end",
     frozenset({"cpu_profile", "pressure"})),
    # (wherever a rank keeps several sends to one peer in progress -- every pipelined ring -- or datagrams come
    # back to back: every benchmark with dlcp runs, and the testbed's rings)
    ("2026-11-29T03:55:00+0000", "the I/O thread's native wait takes every send to the one peer with sends in "
     "progress (not only a lone send) and that peer's DONEs, and the loop enters the wait after a receive pass "
     "(host/transport/_txstep.h, _rxlane.c, endpoint.py)",
     frozenset({"collectives", "cpu_profile", "transport", "keyed_tag", "bounded_loss", "pressure"})),
    # (again wherever a rank sends to one peer while datagrams come -- every ring, the testbed's included -- and on
    # every link where deadlines move while the wait runs: an RTO with each ACK, a NACK's wait with each arrival)
    ("2026-11-29T06:56:00+0000", "after any return of the native wait the I/O loop leaves the one peer's bursts to "
     "the wait (it picks only when the wait hands the pick back), and the wait sleeps on past a planned deadline "
     "that moved meanwhile (Endpoint._redue) instead of returning to the Python loop",
     frozenset({"collectives", "cpu_profile", "transport", "keyed_tag", "bounded_loss", "pressure"})),
    # (only where a rank sends to several peers at once on a paced link while a receive is in progress: the
    # bounded-loss collectives' loss-report round on the testbed; the benchmarks' rings send to one peer)
    ("2026-11-29T08:13:00+0000", "the native wait no longer sleeps past a pacing deadline of sends the Python loop "
     "picks (sends to several peers): it asks for a moved deadline only when its timeout is the timers' plan",
     frozenset({"pressure"})),
    # (slow links, where the holds act: cpu_profile's 20 Mb/s cases and the testbed's links; ACKs with bitmaps come
    # where packets are dropped or reordered: bounded_loss's drops and the testbed's sprayed, lossy paths)
    ("2026-11-29T10:20:00+0000", "a transfer's first run of packets is held as its peer's last judged run came "
     "(Receiver.slow_peers), and the native wait takes ACKs with bitmaps in C (_txstep.h's bitmap_ack)",
     frozenset({"cpu_profile", "bounded_loss", "pressure"})),
    # (the copies: every lossy collective's loss reports, and the testbed's lossy paths; the C classification: every
    # send's set-up CPU)
    ("2026-11-29T12:55:00+0000", "a send's classification and plan are two C calls (_txlane.c's classify_packets "
     "and classified_plan), and a one-packet transfer of at most 1 KiB and its DONE go out in two copies "
     "(Options.small_copies)", frozenset({"cpu_profile", "bounded_loss", "pressure"})),
]


def predates(result: dict[str, Any]) -> list[str]:
    """The changes of defaults (:data:`DEFAULT_CHANGES`) that concern ``result`` and came after it was made."""
    from datetime import datetime

    when = (result.get("machine") or {}).get("time")
    if not when:
        return []
    made = datetime.strptime(when, "%Y-%m-%dT%H:%M:%S%z")
    return [f"{what} ({at[:10]})" for at, what, names in DEFAULT_CHANGES
            if result.get("name") in names and made < datetime.strptime(at, "%Y-%m-%dT%H:%M:%S%z")]

"""The endpoint's counters: one dict of totals that every stage adds to, and the drops counted by header field.

What: :class:`Counters` holds the totals ``Endpoint.stats()`` reports (datagrams, packets and bytes each way,
ACK/NACK/DONE traffic, drops by reason, timeouts, failures), ``malformed_by_field`` (datagrams ``wire`` rejects,
by the field it names) and ``rejected_by_field`` (well-formed packets a receive does not allow, by field). Why one
object: the sender, the receiver, the liveness checks and the datagram intake all count into the same totals, and a
test or a benchmark reads them in one snapshot. The stages bind ``Counters.c`` (a plain dict) once and add to it
on their hot paths.

Promises: every name in :data:`NAMES` is present from the start (0); a snapshot is taken under the endpoint's lock
(the caller's), so it never shows a half-counted event.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Counters", "NAMES"]

NAMES = (
    "tx_datagrams", "tx_data_packets", "tx_bytes", "retransmissions", "rx_datagrams", "rx_data_packets",
    "rx_bytes", "duplicates", "late", "foreign", "stray", "malformed", "inconsistent", "unclaimed_dropped",
    "acks_sent", "nacks_sent", "dones_sent", "acks_rx", "nacks_rx", "dones_rx", "stale_feedback",
    "ecn_ce_rx", "ecn_echo_rx", "zero_filled_elements", "transfers_sent", "transfers_received",
    "send_errors", "recv_timeouts", "peer_timeouts", "rto_timeouts", "internal_errors", "tx_gso_sends",
    "rx_gro_buffers", "rx_fast_datagrams", "premature_nacks", "tx_buffer_full", "staged_transfers",
    "rejected", "expired_unposted", "peers_dead", "dead_notices_sent", "dead_notices_rx", "probes_sent",
    "probes_rx", "refused", "tail_probes", "byes_sent", "byes_rx", "tx_local_drops", "io_wakes_socket",
    "io_wakes_caller", "io_wakes_timer", "io_wakes_writable", "io_wakes_timeout", "io_rx_holds",
    "io_native_wakes", "tx_copies")


class Counters:
    """The totals (``c``) and the per-field drop counts of one endpoint."""

    def __init__(self) -> None:
        self.c: dict[str, int] = dict.fromkeys(NAMES, 0)
        self.malformed_by_field: dict[str, int] = {}
        self.rejected_by_field: dict[str, int] = {}

    def malformed(self, fld: str) -> None:
        """A datagram dropped because its header field ``fld`` is malformed."""
        self.c["malformed"] += 1
        self.malformed_by_field[fld] = self.malformed_by_field.get(fld, 0) + 1

    def rejected(self, fld: str, n: int = 1) -> None:
        """``n`` well-formed packets dropped because their field ``fld`` is not one their receive allows (or, for
        ``"tag"``, their keyed tag is wrong)."""
        self.c["rejected"] += n
        self.rejected_by_field[fld] = self.rejected_by_field.get(fld, 0) + n

    def snapshot(self) -> dict[str, Any]:
        """The totals and the per-field counts, copied (call under the endpoint's lock)."""
        d: dict[str, Any] = dict(self.c)
        d["malformed_by_field"] = dict(self.malformed_by_field)
        d["rejected_by_field"] = dict(self.rejected_by_field)
        return d

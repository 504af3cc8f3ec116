"""Terminal rendering for ``dlcpctl`` (rich): pure functions from plain data to rich renderables.

Kept apart from the I/O so a frame of ``watch`` or a ``show`` table can be built and checked from recorded
data, and so ``--json`` and the tables show the same numbers.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from .api import ApplyResult, SwitchStats

__all__ = ["apply_table", "tables_view", "counters_view", "queues_view", "drops_view", "rates", "watch_frame"]


def apply_table(result: ApplyResult, verbose: bool = False) -> Group:
    table = Table(title="apply" + (" (dry run)" if any(r.dry_run for r in result.switches.values()) else ""))
    for c in ("switch", "pipeline", "insert", "modify", "delete", "traffic manager", "status"):
        table.add_column(c, justify="right" if c in ("insert", "modify", "delete") else "left")
    for name, r in result.switches.items():
        table.add_row(name, "pushed" if r.pipeline_pushed else "unchanged", str(r.inserts), str(r.modifies),
                      str(r.deletes), f"{len(r.tm_changes)} settings" if r.tm_changes else "-", "ok")
    for name, e in result.errors.items():
        table.add_row(name, "", "", "", "", "", Text(type(e).__name__, style="red"))
    parts: list[Any] = [table]
    for name, r in result.switches.items():  # always shown: a pipeline push clears tables apply does not own
        if r.pipeline_clears:
            parts.append(Text(f"{name}: {r.pipeline_line()}", style="yellow"))
    if verbose:
        for name, r in result.switches.items():
            for u in r.updates:
                parts.append(Text(f"{name}: {u}"))
            for c in r.tm_changes:
                parts.append(Text(f"{name}: tm {c}"))
    return Group(*parts)


def tables_view(data: dict[str, dict]) -> Group:
    """``show tables``: one table per (switch, P4 table), then the non-zero registers."""
    parts: list[Any] = []
    for sw, d in data.items():
        for tname, rows in d["tables"].items():
            table = Table(title=f"{sw}: {tname} ({len(rows)} entries)", title_justify="left")
            table.add_column("match")
            table.add_column("entry priority", justify="right")
            table.add_column("action")
            for r in rows:
                match = " ".join(f"{k}={v}" for k, v in r["match"].items()) or "*"
                action = f"{r.get('action', '')}(" + ", ".join(f"{k}={v}" for k, v in r.get("params", {}).items()) + ")"
                table.add_row(match, str(r.get("priority", "")), action)
            parts.append(table)
        for reg, vals in d["registers"].items():
            table = Table(title=f"{sw}: register {reg} (non-zero)", title_justify="left")
            table.add_column("index", justify="right")
            table.add_column("port/prio" if reg != "lb_mode" else "", justify="right")
            table.add_column("value", justify="right")
            for idx, v in sorted(vals.items(), key=lambda kv: int(kv[0])):
                slot = int(idx)
                table.add_row(idx, f"{slot // 8}/{slot % 8}" if reg != "lb_mode" else "", str(v))
            parts.append(table)
    return Group(*parts)


def counters_view(stats: dict[str, SwitchStats]) -> Group:
    """``show counters``: per (port, priority) P4 counters, next-hop packets, ingress drops by reason."""
    parts: list[Any] = []
    for sw, st in stats.items():
        table = Table(title=f"{sw}: per port and priority", title_justify="left")
        for c in ("port", "prio", "forwarded pkts", "forwarded bytes", "eligible drops", "ECN marks"):
            table.add_column(c, justify="right")
        for port, prios in sorted(st.ports.items()):
            for prio, c in sorted(prios.items()):
                if c.forwarded_packets or c.eligible_drops or c.ecn_marks:
                    table.add_row(str(port), str(prio), str(c.forwarded_packets), str(c.forwarded_bytes),
                                  str(c.eligible_drops), str(c.ecn_marks))
        if not table.rows:
            table.add_row("-", "-", "0", "0", "0", "0")
        parts.append(table)
        table = Table(title=f"{sw}: next hops and ingress drops", title_justify="left")
        table.add_column("what")
        table.add_column("packets", justify="right")
        table.add_column("bytes", justify="right")
        for port, (p, b) in sorted(st.nhop_packets.items()):
            table.add_row(f"next hop port {port}", str(p), str(b))
        for reason, n in st.ingress_drops.items():
            table.add_row(f"ingress drop: {reason}", str(n), "")
        parts.append(table)
    return Group(*parts)


def queues_view(stats: dict[str, SwitchStats]) -> Group:
    parts: list[Any] = []
    for sw, st in stats.items():
        table = Table(title=f"{sw}: queues", title_justify="left")
        for c in ("port", "prio", "depth", "peak", "capacity", "rate pps", "enqueued", "dequeued"):
            table.add_column(c, justify="right")
        if st.tm is None:
            parts.append(Text(f"{sw}: no queue statistics (only the embedded switch reports them; BMv2 does not)"))
            continue
        for port, ps in sorted(st.tm.ports.items()):
            for prio, q in sorted(ps.queues.items()):
                table.add_row(str(port), str(prio), str(q.depth), str(q.peak_depth), str(q.capacity),
                              f"{q.rate_pps:g}" if q.rate_pps else "unlimited", str(q.enq_packets), str(q.deq_packets))
        parts.append(table)
    return Group(*parts)


def drops_view(stats: dict[str, SwitchStats]) -> Group:
    """``show drops``: every drop with its reason: P4 eligible drops, ingress drops, traffic-manager drops."""
    parts: list[Any] = []
    for sw, st in stats.items():
        table = Table(title=f"{sw}: drops", title_justify="left")
        for c in ("where", "port", "prio", "reason", "packets"):
            table.add_column(c, justify="right" if c in ("port", "prio", "packets") else "left")
        for port, prios in sorted(st.ports.items()):
            for prio, c in sorted(prios.items()):
                if c.eligible_drops:
                    table.add_row("P4 (bounded loss)", str(port), str(prio), "eligible", str(c.eligible_drops))
        for reason, n in st.ingress_drops.items():
            if n:
                table.add_row("P4 ingress", "", "", reason, str(n))
        if st.tm is not None:
            for (port, prio, reason), n in sorted(st.tm.drops.items()):
                table.add_row("traffic manager", str(port), str(prio), reason, str(n))
        if not table.rows:
            table.add_row("-", "", "", "none", "0")
        parts.append(table)
    return Group(*parts)


def rates(prev: SwitchStats, cur: SwitchStats) -> dict[tuple[int, int], dict[str, float]]:
    """Per (port, priority) rates between two samples: packets/s and bits/s forwarded, drops/s, marks/s."""
    interval = max(cur.time - prev.time, 1e-9)
    out: dict[tuple[int, int], dict[str, float]] = {}
    for port, prios in cur.ports.items():
        for prio, c in prios.items():
            before = prev.ports.get(port, {}).get(prio)
            if before is None:
                continue
            out[(port, prio)] = {
                "pps": (c.forwarded_packets - before.forwarded_packets) / interval,
                "bps": 8 * (c.forwarded_bytes - before.forwarded_bytes) / interval,
                "drops_ps": (c.eligible_drops - before.eligible_drops) / interval,
                "marks_ps": (c.ecn_marks - before.ecn_marks) / interval,
            }
    return out


def watch_frame(prev: dict[str, SwitchStats], cur: dict[str, SwitchStats], frame: int = 1) -> Group:
    """One ``watch`` frame: live per-port, per-priority rates, drops and marks (and queue depth when known)."""
    parts: list[Any] = []
    for sw, st in cur.items():
        switch_rates = rates(prev[sw], st) if sw in prev else {}
        interval = st.time - prev[sw].time if sw in prev else 0.0
        table = Table(title=f"{sw}  (frame {frame}, over {interval:.2f} s)", title_justify="left")
        for c in ("port", "prio", "pkts/s", "Mbit/s", "drops/s", "marks/s", "total drops", "total marks", "queue"):
            table.add_column(c, justify="right")
        for port, prios in sorted(st.ports.items()):
            for prio, c in sorted(prios.items()):
                slot = switch_rates.get((port, prio), {"pps": 0.0, "bps": 0.0, "drops_ps": 0.0, "marks_ps": 0.0})
                queue = ""
                if st.tm is not None and port in st.tm.ports and prio in st.tm.ports[port].queues:
                    queue_stats = st.tm.ports[port].queues[prio]
                    queue = f"{queue_stats.depth}/{queue_stats.capacity}"
                if c.forwarded_packets or c.eligible_drops or c.ecn_marks or any(slot.values()):
                    table.add_row(str(port), str(prio), f"{slot['pps']:.0f}", f"{slot['bps'] / 1e6:.2f}",
                                  f"{slot['drops_ps']:.0f}", f"{slot['marks_ps']:.0f}", str(c.eligible_drops),
                                  str(c.ecn_marks), queue)
        if not table.rows:
            table.add_row("-", "-", "0", "0.00", "0", "0", "0", "0", "")
        parts.append(table)
    return Group(*parts)

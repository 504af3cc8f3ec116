"""Network files, the data model: what a validated network file describes, and what a file that says nothing gets.

One of the four modules of network-file loading (see :mod:`controller.netfile_yaml`): :func:`controller.netfile.load`
returns a :class:`Network` of the frozen records below; the controller's desired state (``controller/state.py``,
``controller/topology.py``, ``controller/tm.py``) is computed from them.
"""

from __future__ import annotations

import hashlib
import ipaddress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "Network", "SwitchSpec", "HostSpec", "LinkSpec", "LinkProps", "TLSSpec", "DlcpRule", "ThresholdRule", "ClassThresholdRule",
    "QueueRule", "QueueSelector", "StaticRoute", "NextHopSpec", "DEFAULT_PROGRAM", "MSG_TYPES", "LB_MODES", "TARGETS",
    "PRIORITY_ORDERS", "TOFINO_P4INFO", "TOFINO_CELLS_PER_PACKET", "default_dlcp_rules", "default_dscp_map",
    "default_mac_base",
]

#: The P4 program a network file gets when it names none: this checkout's ``p4src/dlcp.p4``.
DEFAULT_PROGRAM = Path(__file__).resolve().parent.parent / "p4src" / "dlcp.p4"
#: DLCP ``msg_type`` names (host.wire.MsgType) accepted in priority rules.
MSG_TYPES = {"data": 0, "ack": 1, "nack": 2, "control": 3}
#: Load-balancing modes and the value the controller writes into the ``lb_mode`` register.
LB_MODES = {"spray": 0, "per-flow": 1}
#: The switch kinds a network file may name (``target``): the embedded switch, BMv2 simple_switch_grpc, or a Tofino
#: running the twin p4src/tofino/dlcp_tna.p4 (docs/p4-tofino.md).
TARGETS = ("embedded", "bmv2", "tofino")
#: The P4Info a ``target: tofino`` switch gets when it names none: the twin's, as p4c's Tofino back end writes it
#: for standard P4Runtime clients (scripts/tofino_resources.py).
TOFINO_P4INFO = DEFAULT_PROGRAM.parent / "tofino" / "dlcp_tna.p4info.txt"
#: Tofino queue depths count 80-byte cells (Tofino 1), not packets: the controller writes a threshold of N packets
#: as N * cells_per_packet cells; 19 cells hold a 1518-byte frame. Jumbo frames or Tofino 2's 176-byte cells need
#: the switch's own ``cells_per_packet``.
TOFINO_CELLS_PER_PACKET = 19
#: Which end of the queue numbers a target serves first (``priority_order``). The file always means "higher
#: queue = more urgent" (dlcp.p4: 0 lowest); on a low-first target the controller writes queue N-1-q for q.
PRIORITY_ORDERS = ("high-first", "low-first")


@dataclass(frozen=True)
class TLSSpec:
    """TLS for a switch's gRPC channel: CA bundle, optional client certificate and key, optional name override."""

    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    server_name: str = ""


@dataclass(frozen=True)
class LinkProps:
    """Traffic-manager settings of one link direction (applied to the switch egress port(s) on it).

    ``None``: not set by the file, so the controller wants the switch's default there."""

    rate_bps: float | None = None
    delay_us: int | None = None
    loss: float | None = None
    queue_depth: int | None = None

    def is_empty(self) -> bool:
        return self.rate_bps is None and self.delay_us is None and self.loss is None and self.queue_depth is None


@dataclass(frozen=True)
class SwitchSpec:
    name: str
    address: str
    device_id: int = 0
    target: str = "embedded"
    tls: TLSSpec | None = None
    mgmt_address: str = ""  # embedded: management service address (default: the P4Runtime address)
    thrift_port: int = 9090  # bmv2: simple_switch_CLI --thrift-port
    bmv2_json: Path | None = None  # bmv2: p4c-bm2-ss output pushed as the device config
    p4info: Path | None = None  # p4c's P4Info for this switch (with device_config; overrides the top level)
    device_config: Path | None = None  # pushed as is (e.g. BMv2 JSON from p4c-bm2-ss)
    priority_order: str = "high-first"  # high-first: the target serves queue N-1 first; low-first: queue 0
    cpu_port: int | None = None
    priority_queues: int = 8
    lb_mode: str = "spray"
    mac_base: int = 0  # router MACs are mac_base | port
    cells_per_packet: int = 1  # tofino: queue-depth cells per packet of the file's thresholds (registers hold cells)


@dataclass(frozen=True)
class HostSpec:
    name: str
    ip: ipaddress.IPv4Address
    mac: int
    switch: str
    port: int
    link: LinkProps = LinkProps()


@dataclass(frozen=True)
class LinkSpec:
    """A switch-to-switch link; ``a`` and ``b`` are (switch, port)."""

    a: tuple[str, int]
    b: tuple[str, int]
    props: LinkProps = LinkProps()
    cost: int = 1


@dataclass(frozen=True)
class DlcpRule:
    """One row of the DLCP priority map: DLCP header fields (None = any) -> queue, or trust the sender's priority."""

    msg_type: int | None
    priority: int | None
    mag_class: int | None
    layer: tuple[int, int] | None
    queue: int | None  # None: trust_dlcp_priority
    rank: int  # position in the file, 0 first (= highest entry priority)


@dataclass(frozen=True)
class QueueSelector:
    """The (switch, port, priority) queues a rule applies to: those in every given tuple (``None``: any)."""

    switches: tuple[str, ...] | None
    ports: tuple[int, ...] | None
    priorities: tuple[int, ...] | None


@dataclass(frozen=True)
class ThresholdRule(QueueSelector):
    """Thresholds in packets for the matching (switch, port, priority) slots; later rules override earlier ones."""

    drop: int | None
    mark: int | None


@dataclass(frozen=True)
class ClassThresholdRule:
    """Drop thresholds in packets per magnitude class (``class_drop_threshold`` of dlcp.p4) on the selected
    switches (``None``: all); later rules override earlier ones. An eligible packet of a class is dropped at the
    smaller of its queue's drop threshold and its class's, so lower thresholds for lower classes drop the smallest
    gradients first."""

    switches: tuple[str, ...] | None
    classes: tuple[int, ...]
    drop: int


@dataclass(frozen=True)
class QueueRule(QueueSelector):
    """Queue capacity (packets) and rate (packets/s, 0 = unlimited) for matching (switch, port, priority) queues."""

    depth: int | None
    rate_pps: float | None


@dataclass(frozen=True)
class NextHopSpec:
    port: int
    mac: int | None = None  # None: the MAC of whatever the topology puts on that port


@dataclass(frozen=True)
class StaticRoute:
    switch: str
    prefix: ipaddress.IPv4Network
    nexthops: tuple[NextHopSpec, ...]


@dataclass
class Network:
    """A validated network file."""

    source: Path | None
    program: Path
    include_dirs: tuple[Path, ...]
    switches: dict[str, SwitchSpec]
    hosts: dict[str, HostSpec]
    links: list[LinkSpec]
    dlcp_rules: list[DlcpRule]
    dscp_map: dict[int, int]
    thresholds: list[ThresholdRule]
    queues: list[QueueRule]
    routes: list[StaticRoute]
    lb_mode: str = "spray"
    connect_timeout: float = 5.0
    lines: dict[tuple, int] = field(default_factory=dict, repr=False)
    p4info: Path | None = None  # p4c's P4Info (with device_config), instead of compiling ``program``
    device_config: Path | None = None
    class_thresholds: list[ClassThresholdRule] = field(default_factory=list)

    def artifacts(self, switch: str) -> tuple[Path | None, Path | None]:
        """The (P4Info, device config) files a switch gets: its own pair, else the file's, else (None, None)
        (compile ``program`` with the embedded front end). A Tofino switch always has its own (the twin's P4Info,
        and a device config only when the file gives one)."""
        spec = self.switches[switch]
        if spec.p4info is not None or spec.target == "tofino":
            return spec.p4info, spec.device_config
        return self.p4info, self.device_config

    def ports_of(self, switch: str) -> dict[int, tuple[str, Any]]:
        """Connected ports of a switch: port -> ("host", HostSpec) or ("link", (LinkSpec, peer (switch, port)))."""
        out: dict[int, tuple[str, Any]] = {}
        for host in self.hosts.values():
            if host.switch == switch:
                out[host.port] = ("host", host)
        for link in self.links:
            if link.a[0] == switch:
                out[link.a[1]] = ("link", (link, link.b))
            if link.b[0] == switch:
                out[link.b[1]] = ("link", (link, link.a))
        return dict(sorted(out.items()))


def default_dlcp_rules(top: int) -> list[dict]:
    """Without ``priorities.dlcp``: ACK/NACK/control messages to the top queue, data at the sender's priority."""
    return [{"msg_type": ["ack", "nack", "control"], "queue": top}, {"trust": True}]


def default_dscp_map(top: int) -> dict[int, int]:
    """Without ``priorities.dscp``: class selector CSp (DSCP p << 3, what host.wire.dscp_for_priority writes) to
    queue p, capped at the top queue."""
    return {p << 3: min(p, top) for p in range(8)}


def default_mac_base(name: str) -> int:
    """Locally administered ``02:dc:XX:XX:00:00`` with XX:XX from a hash of the switch name (stable across edits)."""
    digest = int.from_bytes(hashlib.sha256(name.encode()).digest()[:2], "big")
    return (0x02DC << 32) | (digest << 16)

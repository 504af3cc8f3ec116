"""Network files: the YAML description of a DLCP network that ``dlcpctl`` turns into switch state.

The schema is documented in ``docs/controller.md``. Loading validates everything up front and raises
:class:`NetFileError` naming the file, the offending key (as a dotted path such as ``hosts.h1.mac``) and its line,
so a typo never reaches a switch. The YAML is read with a loader that (a) keeps every node's line (PyYAML compose
nodes carry ``start_mark``), (b) rejects duplicate keys, which PyYAML would otherwise silently merge, and (c) does
not turn ``10:00:00:00:00:01`` or ``1:30`` into base-60 integers (a YAML 1.1 quirk that would corrupt unquoted MAC
addresses and ``switch:port`` references).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import yaml

__all__ = [
    "NetFileError", "Network", "SwitchSpec", "HostSpec", "LinkSpec", "LinkProps", "TLSSpec", "DlcpRule",
    "ThresholdRule", "QueueRule", "StaticRoute", "NextHopSpec", "load", "loads", "DEFAULT_PROGRAM",
    "MSG_TYPES", "LB_MODES", "parse_rate", "parse_delay", "parse_loss", "parse_mac", "parse_port_ref",
]

#: The P4 program a network file gets when it names none: this checkout's ``p4src/dlcp.p4``.
DEFAULT_PROGRAM = Path(__file__).resolve().parent.parent / "p4src" / "dlcp.p4"
#: DLCP ``msg_type`` names (host.wire.MsgType) accepted in priority rules.
MSG_TYPES = {"data": 0, "ack": 1, "nack": 2, "control": 3}
#: Load-balancing modes and the value the controller writes into the ``lb_mode`` register.
LB_MODES = {"spray": 0, "per-flow": 1}
TARGETS = ("embedded", "bmv2")
#: Which end of the queue numbers a target serves first (``priority_order``). The file always means "higher
#: queue = more urgent" (dlcp.p4: 0 lowest); on a low-first target the controller writes queue N-1-q for q.
PRIORITY_ORDERS = ("high-first", "low-first")
MAX_PORT = 510  # 9-bit ports; 511 is the v1model drop port
THRESHOLD_MAX = (1 << 19) - 1  # registers are bit<19>
LAYER_MAX = 0xFFFF


class NetFileError(ValueError):
    """An invalid network file. ``key`` is the dotted path of the offending key, ``line`` its 1-based line."""

    def __init__(self, path: str | Path | None, key: str, line: int | None, message: str):
        self.path = str(path) if path is not None else "<string>"
        self.key = key
        self.line = line
        self.message = message
        where = f"{self.path}:{line}" if line else self.path
        super().__init__(f"{where}: {key or '(top level)'}: {message}")


# ---- YAML with line numbers --------------------------------------------------------------------------------------


class _Loader(yaml.SafeLoader):
    """SafeLoader without YAML 1.1 base-60 numbers (``10:00:00:00:00:01`` stays a string)."""


_Loader.yaml_implicit_resolvers = {k: list(v) for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
for _ch, _resolvers in _Loader.yaml_implicit_resolvers.items():
    _resolvers[:] = [(tag, rx) for tag, rx in _resolvers
                     if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")]
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:int",
    re.compile(r"""^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$""", re.X),
    list("-+0123456789"))
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?|[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                |\.[0-9_]+(?:[eE][-+][0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."))


class _Doc:
    """Plain Python values of a YAML document plus the line of every key path."""

    def __init__(self, path: str | Path | None):
        self.path = path
        self.lines: dict[tuple, int] = {}

    def error(self, key: tuple, message: str) -> NetFileError:
        line = None
        k = key
        while k and line is None:  # nearest enclosing node that has a line
            line = self.lines.get(k)
            k = k[:-1]
        if line is None:
            line = self.lines.get(())
        return NetFileError(self.path, _dotted(key), line, message)


class _MapKey(int):
    """An integer *mapping key* in a key path (``priorities.dscp.46``), as opposed to a list index (``[3]``)."""


def _dotted(key: tuple) -> str:
    out = ""
    for k in key:
        out += f"[{k}]" if isinstance(k, int) and not isinstance(k, _MapKey) else (f".{k}" if out else str(k))
    return out


def _to_python(node: yaml.Node, loader: _Loader, doc: _Doc, key: tuple) -> Any:
    doc.lines[key] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for knode, vnode in node.value:
            if not isinstance(knode, yaml.ScalarNode):
                raise NetFileError(doc.path, _dotted(key), knode.start_mark.line + 1, "keys must be plain scalars")
            k = loader.construct_object(knode, deep=True)
            if isinstance(k, (list, dict)) or k is None:
                raise NetFileError(doc.path, _dotted(key), knode.start_mark.line + 1, f"invalid key {knode.value!r}")
            if k in out:
                first = doc.lines.get(key + (k,))
                raise NetFileError(doc.path, _dotted(key + (k,)), knode.start_mark.line + 1,
                                   f"duplicate key (first defined on line {first})")
            out[k] = _to_python(vnode, loader, doc, key + (k,))
            doc.lines[key + (k,)] = knode.start_mark.line + 1
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_to_python(v, loader, doc, key + (i,)) for i, v in enumerate(node.value)]
    return loader.construct_object(node, deep=True)


def _compose(text: str, path: str | Path | None) -> tuple[Any, _Doc]:
    doc = _Doc(path)
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise NetFileError(path, "", 1, "the file is empty")
        return _to_python(node, loader, doc, ()), doc
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        raise NetFileError(path, "", mark.line + 1 if mark else None,
                           f"not valid YAML: {e.problem or e.context}") from None
    finally:
        loader.dispose()


# ---- the model ---------------------------------------------------------------------------------------------------


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
class ThresholdRule:
    """Thresholds in packets for the matching (switch, port, priority) slots; later rules override earlier ones."""

    switches: tuple[str, ...] | None
    ports: tuple[int, ...] | None
    priorities: tuple[int, ...] | None
    drop: int | None
    mark: int | None


@dataclass(frozen=True)
class QueueRule:
    """Queue capacity (packets) and rate (packets/s, 0 = unlimited) for matching (switch, port, priority) queues."""

    switches: tuple[str, ...] | None
    ports: tuple[int, ...] | None
    priorities: tuple[int, ...] | None
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

    def artifacts(self, switch: str) -> tuple[Path | None, Path | None]:
        """The (P4Info, device config) files a switch gets: its own pair, else the file's, else (None, None)
        (compile ``program`` with the embedded front end)."""
        spec = self.switches[switch]
        if spec.p4info is not None:
            return spec.p4info, spec.device_config
        return self.p4info, self.device_config

    def ports_of(self, switch: str) -> dict[int, tuple[str, Any]]:
        """Connected ports of a switch: port -> ("host", HostSpec) or ("link", (LinkSpec, peer (switch, port)))."""
        out: dict[int, tuple[str, Any]] = {}
        for h in self.hosts.values():
            if h.switch == switch:
                out[h.port] = ("host", h)
        for ln in self.links:
            if ln.a[0] == switch:
                out[ln.a[1]] = ("link", (ln, ln.b))
            if ln.b[0] == switch:
                out[ln.b[1]] = ("link", (ln, ln.a))
        return dict(sorted(out.items()))


# ---- value parsers (also used by the CLI) -----------------------------------------------------------------------

_RATE_UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


def parse_rate(v: Any) -> float:
    """Bits per second from a number or a string like ``100Mbit``, ``1Gbps``, ``10M``, ``2.5g``."""
    if isinstance(v, bool):
        raise ValueError("expected a rate, got a boolean")
    if isinstance(v, (int, float)):
        r = float(v)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([kKmMgGtT]?)(?:bit|bps|b/s)?\s*", str(v))
        if not m:
            raise ValueError(f"invalid rate {v!r} (examples: 100Mbit, 1Gbps, 5e8)")
        r = float(m.group(1)) * _RATE_UNITS[m.group(2).lower()]
    if r <= 0:
        raise ValueError(f"rate must be positive, got {v!r}")
    return r


_DELAY_UNITS = {"us": 1, "µs": 1, "ms": 1000, "s": 1_000_000}


def parse_delay(v: Any) -> int:
    """Microseconds from a number (microseconds) or a string like ``250us``, ``1.5ms``, ``0.1s``."""
    if isinstance(v, bool):
        raise ValueError("expected a delay, got a boolean")
    if isinstance(v, (int, float)):
        d = float(v)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(us|µs|ms|s)\s*", str(v))
        if not m:
            raise ValueError(f"invalid delay {v!r} (examples: 250us, 1.5ms, 0)")
        d = float(m.group(1)) * _DELAY_UNITS[m.group(2)]
    if d < 0:
        raise ValueError(f"delay must not be negative, got {v!r}")
    return int(round(d))


def parse_loss(v: Any) -> float:
    """Loss probability from a fraction (``0.01``) or a percentage string (``1%``)."""
    if isinstance(v, bool):
        raise ValueError("expected a loss probability, got a boolean")
    if isinstance(v, str) and v.strip().endswith("%"):
        try:
            p = float(v.strip()[:-1]) / 100
        except ValueError:
            raise ValueError(f"invalid loss {v!r}") from None
    elif isinstance(v, (int, float)):
        p = float(v)
    else:
        raise ValueError(f"invalid loss {v!r} (examples: 0.01, 1%)")
    if not 0 <= p <= 1:
        raise ValueError(f"loss must be within 0..1 (or 0%..100%), got {v!r}")
    return p


def parse_mac(v: Any) -> int:
    """A MAC address ``aa:bb:cc:dd:ee:ff`` (or with dashes) as an integer."""
    if not isinstance(v, str):
        raise ValueError(f"expected a MAC address like '00:00:0a:00:00:01' (quoted), got {v!r}")
    m = re.fullmatch(r"([0-9a-fA-F]{1,2})([:-][0-9a-fA-F]{1,2}){5}", v.strip())
    if not m:
        raise ValueError(f"invalid MAC address {v!r}")
    return int("".join(p.zfill(2) for p in re.split(r"[:-]", v.strip())), 16)


def format_mac(v: int) -> str:
    return ":".join(f"{b:02x}" for b in v.to_bytes(6, "big"))


def parse_port_ref(v: Any) -> tuple[str, int]:
    """``SWITCH:PORT`` as (switch, port)."""
    if not isinstance(v, str) or ":" not in v:
        raise ValueError(f"expected SWITCH:PORT (e.g. s1:3), got {v!r}")
    name, _, port = v.rpartition(":")
    if not name or not port.strip().isdigit():
        raise ValueError(f"expected SWITCH:PORT (e.g. s1:3), got {v!r}")
    return name.strip(), _port(int(port))


def _port(p: Any) -> int:
    if isinstance(p, bool) or not isinstance(p, int):
        raise ValueError(f"expected a port number, got {p!r}")
    if not 0 <= p <= MAX_PORT:
        raise ValueError(f"port {p} out of range 0..{MAX_PORT}")
    return p


# ---- validation ---------------------------------------------------------------------------------------------------


class _Checker:
    """Turns the plain document into the model, raising :class:`NetFileError` at the first problem."""

    def __init__(self, data: Any, doc: _Doc, base: Path):
        self.data = data
        self.doc = doc
        self.base = base

    def err(self, key: tuple, msg: str) -> NetFileError:
        return self.doc.error(key, msg)

    def mapping(self, v: Any, key: tuple, allowed: Iterable[str], required: Iterable[str] = ()) -> dict:
        if not isinstance(v, dict):
            raise self.err(key, f"expected a mapping, got {_kind(v)}")
        allowed = tuple(allowed)
        for k in v:
            if k not in allowed:
                hint = _close(str(k), allowed)
                raise self.err(key + (k,), f"unknown key {k!r}" + (f" (did you mean {hint!r}?)" if hint else "")
                               + f"; allowed: {', '.join(allowed)}")
        for r in required:
            if r not in v:
                raise self.err(key, f"missing required key {r!r}")
        return v

    def conv(self, v: Any, key: tuple, fn: Callable[[Any], Any]) -> Any:
        try:
            return fn(v)
        except (ValueError, TypeError) as e:
            raise self.err(key, str(e)) from None

    def int_(self, v: Any, key: tuple, lo: int, hi: int) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.err(key, f"expected an integer, got {_kind(v)} {v!r}")
        if not lo <= v <= hi:
            raise self.err(key, f"{v} out of range {lo}..{hi}")
        return v

    def str_(self, v: Any, key: tuple) -> str:
        if not isinstance(v, str) or not v:
            raise self.err(key, f"expected a non-empty string, got {_kind(v)} {v!r}")
        return v

    def ints(self, v: Any, key: tuple, lo: int, hi: int, names: dict[str, int] | None = None) -> tuple[int, ...]:
        """One value or a list of values (integers, or names from ``names``)."""
        items = v if isinstance(v, list) else [v]
        if not items:
            raise self.err(key, "empty list")
        out = []
        for i, x in enumerate(items):
            k = key + (i,) if isinstance(v, list) else key
            if names is not None and isinstance(x, str):
                if x.lower() not in names:
                    raise self.err(k, f"unknown name {x!r}; expected one of {', '.join(names)} or {lo}..{hi}")
                out.append(names[x.lower()])
            else:
                out.append(self.int_(x, k, lo, hi))
        return tuple(dict.fromkeys(out))

    def path(self, v: Any, key: tuple, must_exist: bool = True) -> Path:
        p = Path(self.str_(v, key))
        p = p if p.is_absolute() else self.base / p
        if must_exist and not p.exists():
            raise self.err(key, f"file not found: {p}")
        return p

    # -- sections -------------------------------------------------------------------------------------------------

    def network(self, source: Path | None) -> Network:
        top = self.mapping(self.data, (), ("program", "include", "load_balancing", "connect_timeout", "switches",
                                             "hosts", "links", "priorities", "thresholds", "queues", "routes",
                                             "p4info", "device_config"),
                           required=("switches",))
        program = self.path(top["program"], ("program",)) if "program" in top else DEFAULT_PROGRAM
        p4info, device_config = self.artifact_pair(top, ())
        if p4info is not None and "program" in top:
            raise self.err(("p4info",), "give either program (compiled here) or p4info + device_config (p4c's "
                                        "output), not both")
        incs = top.get("include", [])
        if not isinstance(incs, list):
            raise self.err(("include",), "expected a list of directories")
        include_dirs = tuple(self.path(d, ("include", i)) for i, d in enumerate(incs))
        lb = top.get("load_balancing", "spray")
        if lb not in LB_MODES:
            raise self.err(("load_balancing",), f"expected one of {', '.join(LB_MODES)}, got {lb!r}")
        timeout = top.get("connect_timeout", 5.0)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise self.err(("connect_timeout",), f"expected a positive number of seconds, got {timeout!r}")

        switches = self.switches(top["switches"], lb)
        hosts = self.hosts(top.get("hosts", {}), switches)
        links = self.links(top.get("links", []), switches)
        self.check_ports(switches, hosts, links)
        prios = self.mapping(top.get("priorities", {}), ("priorities",), ("dlcp", "dscp"))
        top_q = min(s.priority_queues for s in switches.values()) - 1
        dlcp_rules = self.dlcp_rules(prios.get("dlcp", default_dlcp_rules(top_q)), switches)
        dscp_map = self.dscp_map(prios.get("dscp", default_dscp_map(top_q)), switches)
        thresholds = self.thresholds(top.get("thresholds", []), switches)
        queues = self.queue_rules(top.get("queues", []), switches)
        net = Network(source=source, program=program, include_dirs=include_dirs, switches=switches, hosts=hosts,
                      links=links, dlcp_rules=dlcp_rules, dscp_map=dscp_map, thresholds=thresholds, queues=queues,
                      routes=[], lb_mode=lb, connect_timeout=float(timeout), lines=self.doc.lines, p4info=p4info,
                      device_config=device_config)
        net.routes = self.routes(top.get("routes", []), net)
        return net

    def switches(self, v: Any, lb_default: str) -> dict[str, SwitchSpec]:
        key = ("switches",)
        if not isinstance(v, dict) or not v:
            raise self.err(key, "expected a non-empty mapping of switch name -> settings")
        out: dict[str, SwitchSpec] = {}
        macs: dict[int, str] = {}
        for name, s in v.items():
            k = key + (name,)
            if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", name):
                raise self.err(k, f"invalid switch name {name!r} (letters, digits, _ . -; not starting with a digit)")
            s = self.mapping(s, k, ("address", "device_id", "target", "tls", "mgmt_address", "thrift_port",
                                    "bmv2_json", "cpu_port", "priority_queues", "load_balancing", "mac_base",
                                    "p4info", "device_config", "priority_order"),
                             required=("address",))
            addr = self.str_(s["address"], k + ("address",))
            if not re.fullmatch(r"(\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.-]+):[0-9]{1,5}", addr):
                raise self.err(k + ("address",), f"expected HOST:PORT, got {addr!r}")
            target = s.get("target", "embedded")
            if target not in TARGETS:
                raise self.err(k + ("target",), f"expected one of {', '.join(TARGETS)}, got {target!r}")
            tls = self.tls(s["tls"], k + ("tls",)) if "tls" in s else None
            lb = s.get("load_balancing", lb_default)
            if lb not in LB_MODES:
                raise self.err(k + ("load_balancing",), f"expected one of {', '.join(LB_MODES)}, got {lb!r}")
            if "mac_base" in s:
                mac_base = self.conv(s["mac_base"], k + ("mac_base",), parse_mac)
                if mac_base & 0xFFFF:
                    raise self.err(k + ("mac_base",), "the last two bytes must be 00:00 (they hold the port)")
            else:
                mac_base = default_mac_base(name)
            if mac_base in macs:
                raise self.err(k + ("mac_base",), f"router MAC base {format_mac(mac_base)} is also used by switch "
                                                  f"{macs[mac_base]!r}; set mac_base on one of them")
            macs[mac_base] = name
            mgmt = s.get("mgmt_address", "")
            if mgmt:
                self.str_(mgmt, k + ("mgmt_address",))
            bmv2_json = self.path(s["bmv2_json"], k + ("bmv2_json",)) if "bmv2_json" in s else None
            p4info, device_config = self.artifact_pair(s, k)
            if p4info is not None and bmv2_json is not None:
                raise self.err(k + ("bmv2_json",), "give either bmv2_json (with the program's P4Info) or p4info + "
                                                   "device_config, not both")
            order = s.get("priority_order", "high-first")
            if order not in PRIORITY_ORDERS:
                raise self.err(k + ("priority_order",), f"expected one of {', '.join(PRIORITY_ORDERS)}, got "
                                                        f"{order!r}")
            out[name] = SwitchSpec(
                name=name, address=addr,
                device_id=self.int_(s.get("device_id", 0), k + ("device_id",), 0, 2**64 - 1),
                target=target, tls=tls, mgmt_address=mgmt,
                thrift_port=self.int_(s.get("thrift_port", 9090), k + ("thrift_port",), 1, 65535),
                bmv2_json=bmv2_json, p4info=p4info, device_config=device_config, priority_order=order,
                cpu_port=self.int_(s["cpu_port"], k + ("cpu_port",), 0, MAX_PORT) if "cpu_port" in s else None,
                priority_queues=self.int_(s.get("priority_queues", 8), k + ("priority_queues",), 1, 8),
                lb_mode=lb, mac_base=mac_base)
        return out

    def artifact_pair(self, m: dict, key: tuple) -> tuple[Path | None, Path | None]:
        """``p4info`` and ``device_config`` of a mapping: both or neither."""
        if ("p4info" in m) != ("device_config" in m):
            missing = "device_config" if "p4info" in m else "p4info"
            raise self.err(key + (("p4info",) if "p4info" in m else ("device_config",)),
                           f"p4info and device_config go together (p4c writes both); {missing} is missing")
        if "p4info" not in m:
            return None, None
        return self.path(m["p4info"], key + ("p4info",)), self.path(m["device_config"], key + ("device_config",))

    def tls(self, v: Any, key: tuple) -> TLSSpec:
        t = self.mapping(v, key, ("ca", "cert", "key", "server_name"), required=("ca",))
        if ("cert" in t) != ("key" in t):
            raise self.err(key, "cert and key go together (a client certificate needs its key)")
        return TLSSpec(ca=self.path(t["ca"], key + ("ca",)),
                       cert=self.path(t["cert"], key + ("cert",)) if "cert" in t else None,
                       key=self.path(t["key"], key + ("key",)) if "key" in t else None,
                       server_name=self.str_(t["server_name"], key + ("server_name",)) if "server_name" in t else "")

    def link_props(self, v: dict, key: tuple) -> LinkProps:
        return LinkProps(
            rate_bps=self.conv(v["rate"], key + ("rate",), parse_rate) if "rate" in v else None,
            delay_us=self.conv(v["delay"], key + ("delay",), parse_delay) if "delay" in v else None,
            loss=self.conv(v["loss"], key + ("loss",), parse_loss) if "loss" in v else None,
            queue_depth=self.int_(v["queue_depth"], key + ("queue_depth",), 1, 1 << 20) if "queue_depth" in v
            else None)

    def hosts(self, v: Any, switches: dict[str, SwitchSpec]) -> dict[str, HostSpec]:
        key = ("hosts",)
        if not isinstance(v, dict):
            raise self.err(key, f"expected a mapping of host name -> settings, got {_kind(v)}")
        out: dict[str, HostSpec] = {}
        ips: dict[ipaddress.IPv4Address, str] = {}
        macs: dict[int, str] = {}
        for name, h in v.items():
            k = key + (name,)
            if not isinstance(name, str) or not name:
                raise self.err(k, f"invalid host name {name!r}")
            if name in switches:
                raise self.err(k, f"{name!r} is already a switch name")
            h = self.mapping(h, k, ("ip", "mac", "attach", "rate", "delay", "loss", "queue_depth"),
                             required=("ip", "mac", "attach"))
            ip = self.conv(h["ip"], k + ("ip",), _ipv4)
            if ip in ips:
                raise self.err(k + ("ip",), f"{ip} is also the address of host {ips[ip]!r}")
            ips[ip] = name
            mac = self.conv(h["mac"], k + ("mac",), parse_mac)
            if mac in macs:
                raise self.err(k + ("mac",), f"{format_mac(mac)} is also the MAC of host {macs[mac]!r}")
            macs[mac] = name
            sw, port = self.conv(h["attach"], k + ("attach",), parse_port_ref)
            if sw not in switches:
                raise self.err(k + ("attach",), f"unknown switch {sw!r}; switches: {', '.join(switches)}")
            out[name] = HostSpec(name=name, ip=ip, mac=mac, switch=sw, port=port, link=self.link_props(h, k))
        return out

    def links(self, v: Any, switches: dict[str, SwitchSpec]) -> list[LinkSpec]:
        key = ("links",)
        if not isinstance(v, list):
            raise self.err(key, f"expected a list of links, got {_kind(v)}")
        out = []
        for i, ln in enumerate(v):
            k = key + (i,)
            ln = self.mapping(ln, k, ("between", "rate", "delay", "loss", "queue_depth", "cost"),
                              required=("between",))
            ends = ln["between"]
            if not isinstance(ends, list) or len(ends) != 2:
                raise self.err(k + ("between",), "expected two endpoints [SWITCH:PORT, SWITCH:PORT]")
            a = self.conv(ends[0], k + ("between", 0), parse_port_ref)
            b = self.conv(ends[1], k + ("between", 1), parse_port_ref)
            for j, (sw, _) in enumerate((a, b)):
                if sw not in switches:
                    raise self.err(k + ("between", j), f"unknown switch {sw!r}; switches: {', '.join(switches)}")
            if a[0] == b[0]:
                raise self.err(k + ("between",), "a link must join two different switches")
            out.append(LinkSpec(a=a, b=b, props=self.link_props(ln, k),
                                cost=self.int_(ln.get("cost", 1), k + ("cost",), 1, 1 << 16)))
        return out

    def check_ports(self, switches: dict[str, SwitchSpec], hosts: dict[str, HostSpec], links: list[LinkSpec]) -> None:
        used: dict[tuple[str, int], str] = {}
        for sw in switches.values():
            if sw.cpu_port is not None:
                used[(sw.name, sw.cpu_port)] = "the CPU port"

        def claim(ref: tuple[str, int], what: str, key: tuple) -> None:
            if ref in used:
                raise self.err(key, f"port {ref[0]}:{ref[1]} is already used by {used[ref]}")
            used[ref] = what

        for h in hosts.values():
            claim((h.switch, h.port), f"host {h.name}", ("hosts", h.name, "attach"))
        for i, ln in enumerate(links):
            claim(ln.a, f"links[{i}]", ("links", i, "between", 0))
            claim(ln.b, f"links[{i}]", ("links", i, "between", 1))

    def dlcp_rules(self, v: Any, switches: dict[str, SwitchSpec]) -> list[DlcpRule]:
        key = ("priorities", "dlcp")
        if not isinstance(v, list):
            raise self.err(key, f"expected a list of rules, got {_kind(v)}")
        maxq = min(s.priority_queues for s in switches.values())
        out = []
        for i, r in enumerate(v):
            k = key + (i,)
            r = self.mapping(r, k, ("msg_type", "priority", "mag_class", "layer", "queue", "trust"))
            trust = r.get("trust", False)
            if not isinstance(trust, bool):
                raise self.err(k + ("trust",), f"expected true or false, got {trust!r}")
            if trust == ("queue" in r):
                raise self.err(k, "a rule needs exactly one of 'queue: N' or 'trust: true'")
            queue = None if trust else self.int_(r["queue"], k + ("queue",), 0, maxq - 1)
            msg_types = self.ints(r["msg_type"], k + ("msg_type",), 0, 15, MSG_TYPES) if "msg_type" in r else (None,)
            prios = self.ints(r["priority"], k + ("priority",), 0, 7) if "priority" in r else (None,)
            mags = self.ints(r["mag_class"], k + ("mag_class",), 0, 7) if "mag_class" in r else (None,)
            layer = self.conv(r["layer"], k + ("layer",), _layer_range) if "layer" in r else None
            for mt in msg_types:
                for p in prios:
                    for m in mags:
                        out.append(DlcpRule(msg_type=mt, priority=p, mag_class=m, layer=layer, queue=queue, rank=i))
        if len(out) > 256:
            raise self.err(key, f"{len(out)} entries after expanding lists; dlcp_priority holds 256")
        return out

    def dscp_map(self, v: Any, switches: dict[str, SwitchSpec]) -> dict[int, int]:
        key = ("priorities", "dscp")
        if not isinstance(v, dict):
            raise self.err(key, f"expected a mapping DSCP -> queue, got {_kind(v)}")
        maxq = min(s.priority_queues for s in switches.values())
        return {self.int_(d, key + (_mk(d),), 0, 63): self.int_(q, key + (_mk(d),), 0, maxq - 1)
                for d, q in v.items()}

    def selectors(self, r: dict, k: tuple, switches: dict[str, SwitchSpec]):
        sws = None
        if "switch" in r:
            items = r["switch"] if isinstance(r["switch"], list) else [r["switch"]]
            for i, s in enumerate(items):
                if s not in switches:
                    raise self.err(k + ("switch",), f"unknown switch {s!r}; switches: {', '.join(switches)}")
            sws = tuple(items)
        ports = self.ints(r["port"], k + ("port",), 0, MAX_PORT) if "port" in r else None
        prios = self.ints(r["priority"], k + ("priority",), 0, 7) if "priority" in r else None
        return sws, ports, prios

    def thresholds(self, v: Any, switches: dict[str, SwitchSpec]) -> list[ThresholdRule]:
        key = ("thresholds",)
        if not isinstance(v, list):
            raise self.err(key, f"expected a list of rules, got {_kind(v)}")
        out = []
        for i, r in enumerate(v):
            k = key + (i,)
            r = self.mapping(r, k, ("switch", "port", "priority", "drop", "mark"))
            if "drop" not in r and "mark" not in r:
                raise self.err(k, "a threshold rule sets 'drop', 'mark' or both")
            sws, ports, prios = self.selectors(r, k, switches)
            out.append(ThresholdRule(
                sws, ports, prios,
                drop=self.int_(r["drop"], k + ("drop",), 0, THRESHOLD_MAX) if "drop" in r else None,
                mark=self.int_(r["mark"], k + ("mark",), 0, THRESHOLD_MAX) if "mark" in r else None))
        return out

    def queue_rules(self, v: Any, switches: dict[str, SwitchSpec]) -> list[QueueRule]:
        key = ("queues",)
        if not isinstance(v, list):
            raise self.err(key, f"expected a list of rules, got {_kind(v)}")
        out = []
        for i, r in enumerate(v):
            k = key + (i,)
            r = self.mapping(r, k, ("switch", "port", "priority", "depth", "rate_pps"))
            if "depth" not in r and "rate_pps" not in r:
                raise self.err(k, "a queue rule sets 'depth', 'rate_pps' or both")
            sws, ports, prios = self.selectors(r, k, switches)
            rate = r.get("rate_pps")
            if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float)) or rate < 0):
                raise self.err(k + ("rate_pps",), f"expected packets per second >= 0 (0 = unlimited), got {rate!r}")
            out.append(QueueRule(sws, ports, prios,
                                 depth=self.int_(r["depth"], k + ("depth",), 1, 1 << 20) if "depth" in r else None,
                                 rate_pps=float(rate) if rate is not None else None))
        return out

    def routes(self, v: Any, net: Network) -> list[StaticRoute]:
        key = ("routes",)
        if not isinstance(v, list):
            raise self.err(key, f"expected a list of routes, got {_kind(v)}")
        out = []
        seen: dict[tuple[str, ipaddress.IPv4Network], int] = {}
        host_prefixes = {(h.ip, 32) for h in net.hosts.values()}
        for i, r in enumerate(v):
            k = key + (i,)
            r = self.mapping(r, k, ("switch", "prefix", "via"), required=("switch", "prefix", "via"))
            sw = r["switch"]
            if sw not in net.switches:
                raise self.err(k + ("switch",), f"unknown switch {sw!r}; switches: {', '.join(net.switches)}")
            prefix = self.conv(r["prefix"], k + ("prefix",), _prefix)
            if (prefix.network_address, prefix.prefixlen) in host_prefixes:
                raise self.err(k + ("prefix",), f"{prefix} is a host route the controller computes itself")
            if (sw, prefix) in seen:
                raise self.err(k + ("prefix",), f"{prefix} on {sw} is also routes[{seen[(sw, prefix)]}]")
            seen[(sw, prefix)] = i
            vias = r["via"] if isinstance(r["via"], list) else [r["via"]]
            if not vias:
                raise self.err(k + ("via",), "needs at least one next hop")
            connected = net.ports_of(sw)
            nhs = []
            for j, nh in enumerate(vias):
                kk = k + ("via", j) if isinstance(r["via"], list) else k + ("via",)
                if isinstance(nh, dict):
                    nh = self.mapping(nh, kk, ("port", "mac"), required=("port",))
                    port = self.conv(nh["port"], kk + ("port",), _port)
                    mac = self.conv(nh["mac"], kk + ("mac",), parse_mac) if "mac" in nh else None
                else:
                    port, mac = self.conv(nh, kk, _port), None
                if mac is None and port not in connected:
                    raise self.err(kk, f"port {port} of {sw} connects to no host or link; give its next-hop MAC "
                                       f"as {{port: {port}, mac: ...}}")
                nhs.append(NextHopSpec(port, mac))
            out.append(StaticRoute(sw, prefix, tuple(nhs)))
        return out


def _mk(k: Any) -> Any:
    return _MapKey(k) if isinstance(k, int) and not isinstance(k, bool) else k


def default_dlcp_rules(top: int) -> list[dict]:
    """Without ``priorities.dlcp``: ACK/NACK/control messages to the top queue, data at the sender's priority."""
    return [{"msg_type": ["ack", "nack", "control"], "queue": top}, {"trust": True}]


def default_dscp_map(top: int) -> dict[int, int]:
    """Without ``priorities.dscp``: class selector CSp (DSCP p << 3, what host.wire.dscp_for_priority writes) to
    queue p, capped at the top queue."""
    return {p << 3: min(p, top) for p in range(8)}


def default_mac_base(name: str) -> int:
    """Locally administered ``02:dc:XX:XX:00:00`` with XX:XX from a hash of the switch name (stable across edits)."""
    import hashlib

    h = int.from_bytes(hashlib.sha256(name.encode()).digest()[:2], "big")
    return (0x02DC << 32) | (h << 16)


def _ipv4(v: Any) -> ipaddress.IPv4Address:
    if not isinstance(v, str):
        raise ValueError(f"expected an IPv4 address, got {v!r}")
    try:
        return ipaddress.IPv4Address(v)
    except ValueError:
        raise ValueError(f"invalid IPv4 address {v!r}") from None


def _prefix(v: Any) -> ipaddress.IPv4Network:
    if not isinstance(v, str):
        raise ValueError(f"expected an IPv4 prefix like 10.1.0.0/16, got {v!r}")
    try:
        return ipaddress.IPv4Network(v, strict=True)
    except ValueError as e:
        raise ValueError(f"invalid IPv4 prefix {v!r}: {e}") from None


def _layer_range(v: Any) -> tuple[int, int]:
    if isinstance(v, bool):
        raise ValueError("expected a layer or range LO-HI")
    if isinstance(v, int):
        lo = hi = v
    elif isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        lo, hi = v
    elif isinstance(v, str) and re.fullmatch(r"\s*\d+\s*-\s*\d+\s*", v):
        lo, hi = (int(x) for x in v.split("-"))
    else:
        raise ValueError(f"expected a layer N, a range 'LO-HI' or [LO, HI], got {v!r}")
    if not 0 <= lo <= hi <= LAYER_MAX:
        raise ValueError(f"layer range {lo}-{hi} must satisfy 0 <= LO <= HI <= {LAYER_MAX}")
    return lo, hi


def _kind(v: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "nothing"}.get(type(v), type(v).__name__)


def _close(word: str, options: Iterable[str]) -> str | None:
    import difflib

    m = difflib.get_close_matches(word, list(options), n=1, cutoff=0.7)
    return m[0] if m else None


def loads(text: str, path: str | Path | None = None, base: Path | None = None) -> Network:
    """Parse and validate a network file's text; relative paths resolve against ``base`` (default: cwd)."""
    data, doc = _compose(text, path)
    return _Checker(data, doc, base or Path.cwd()).network(Path(path) if path else None)


def load(path: str | Path) -> Network:
    """Read, parse and validate a network file."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise NetFileError(p, "", None, f"cannot read: {e.strerror or e}") from None
    return loads(text, p, p.resolve().parent)

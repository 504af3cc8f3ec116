"""Run specs: one YAML file describes one testbed run (network, workers, training job, background traffic).

Example (see ``examples/testbed/*.yaml``)::

    name: demo-dlcp
    topology: {kind: leaf-spine, hosts: 4, link: {rate: 50mbit, queue: 64}}
    background: [{kind: tcp, src: b1, dst: b2, flows: 2}]
    workers: 4
    model: mlp
    dataset: digits
    algorithm: dear
    loss_bound: 0.01
    steps: 150
    target_accuracy: 0.9

Validation is strict: an unknown key, a wrong type or an out-of-range value raises :class:`SpecError` naming the
key path and the file line (``spec.yaml:7: topology.link.rate: ...``), so a typo never silently falls back to a
default.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

__all__ = ["SpecError", "LinkSpec", "DegradedPath", "TopologySpec", "BackgroundFlow", "TcpSpec", "ThresholdSpec", "RunSpec",
           "load_spec", "parse_rate", "spec_to_json", "spec_from_json", "ALGORITHMS", "TOPOLOGIES", "PRIORITY_MODES", "LOAD_BALANCING"]

ALGORITHMS = ("ddp-gloo", "dlcp-allreduce", "dear", "dear-gloo", "spardl", "spardl-gloo", "topk-allgather",
              "topk-allgather-gloo", "acid")
#: How the switches pick a DLCP packet's queue (``priority_mode``): ``trust`` the priority the sender wrote (1..6 by
#: layer position, host.policy); ``layer-table`` a controller table by layer index and gradient magnitude class
#: (the sender's priority ignored); ``single`` every packet, DLCP's control messages included, in queue 0 (no
#: prioritisation at all).
PRIORITY_MODES = ("trust", "layer-table", "single")
LOAD_BALANCING = ("spray", "per-flow")
#: Congestion control algorithms Linux can have (which ones this kernel offers is checked when a run starts).
TCP_CONGESTION = ("reno", "cubic", "bbr", "dctcp", "vegas", "htcp", "bic", "westwood", "illinois", "highspeed",
                  "scalable", "yeah", "hybla", "lp", "veno", "nv", "cdg")
TOPOLOGIES = ("star", "dumbbell", "leaf-spine")
#: Models (testbed.models) and datasets (testbed.data), named here so a spec is checked without importing torch.
MODELS = ("mlp", "cnn", "char-mlp", "transformer")
DATASETS = ("digits", "synthetic-cifar", "text", "cifar10")
SWITCH_TARGETS = ("embedded", "bmv2")


class SpecError(ValueError):
    """An invalid run spec: ``where`` is ``file:line``, ``key`` the dotted key path."""

    def __init__(self, where: str, key: str, message: str):
        super().__init__(f"{where}: {key}: {message}" if key else f"{where}: {message}")
        self.where, self.key = where, key


def parse_rate(v: Any) -> float:
    """'100mbit', '1gbit', '500k' or a number of bits/s -> bits/s (the controller's network files use the same)."""
    from controller.netfile import parse_rate as controller_parse_rate

    return controller_parse_rate(v)


@dataclass
class LinkSpec:
    """A link as the switches' traffic manager emulates it (the kernel here has no netem)."""

    rate: float = 100e6       # bits/s, both directions
    delay_us: int = 0         # one-way propagation delay
    loss: float = 0.0         # random loss probability per packet
    queue: int = 64           # queue capacity per (port, priority), packets


@dataclass
class ThresholdSpec:
    """Per-queue thresholds of the DLCP data queues (priorities 0-6), in packets; None: the defaults (drop at 3/4
    of the queue, mark at 1/4). A low drop threshold makes the switches drop drop-eligible packets as soon as a
    queue builds (bounded loss that really happens); 0 turns a threshold off."""

    drop: int | None = None
    mark: int | None = None
    #: magnitude class (0 smallest .. 7) -> drop threshold in packets for that class's eligible packets, on every
    #: queue (the switches' ``class_drop_threshold``: a packet is dropped at the smaller of its queue's and its
    #: class's), so that the smallest gradients are dropped first; None: no class thresholds
    classes: dict[int, int] | None = None


@dataclass
class TcpSpec:
    """TCP on every host (workers' Gloo and store connections, background iperf3), set per namespace:
    ``net.ipv4.tcp_congestion_control``, ``net.ipv4.tcp_ecn`` and the routes' ``rto_min``. None: the kernel's
    default. DCTCP with ``ecn: true`` is the fair TCP baseline on a marking network (the switches mark ECN-capable
    packets above the mark threshold, whatever their protocol)."""

    congestion_control: str | None = None
    ecn: bool | None = None
    rto_min_ms: int | None = None


@dataclass
class DegradedPath:
    """One equal-cost path of a leaf-spine made slow, lossy or flapping: both leaves' links to ``spine`` get
    these settings in the traffic manager (a setting left out keeps the core's). ``flap_ms`` 0: degraded for the
    whole run; > 0: degraded and normal in turn, each for ``flap_ms`` (the orchestrator rewrites the links through
    the controller). ``loss: 1`` is a path that is down while degraded, allowed only when it flaps (a path down for
    the whole run would lose every sprayed packet sent over it)."""

    spine: str = "spine2"
    rate: float | None = None       # bits/s
    delay_us: int | None = None
    loss: float | None = None       # random loss while degraded, 0..1
    flap_ms: float = 0.0


@dataclass
class TopologySpec:
    kind: str = "star"
    hosts: int = 2                      # worker hosts h1..hN
    background_hosts: int = 0           # extra hosts b1..bM for competing traffic (placed across the network)
    link: LinkSpec = field(default_factory=LinkSpec)
    core: LinkSpec | None = None        # switch-to-switch links (dumbbell bottleneck, leaf-spine uplinks)
    mtu: int = 1500                     # every interface; 9000 (jumbo) cuts the switches' packet rate six-fold
    degraded: DegradedPath | None = None  # leaf-spine: one spine's links slow, lossy or flapping


@dataclass
class BackgroundFlow:
    """Competing traffic between two hosts for the whole run: iperf3 TCP, or UDP at ``rate``. ``flows: 0`` turns
    the entry off (it is dropped when the spec is read), so a sweep can vary the background load down to none with
    ``background.0.flows: [0, 2, 4]``.

    Pressure: ``src`` may be a list of hosts, all sending to ``dst`` at once (incast: the entry becomes one per
    sender when the spec is read); ``on_ms``/``off_ms`` make the traffic bursty (:mod:`testbed.onoff` instead of
    iperf3: ``on_ms`` of sending, ``off_ms`` of silence, the periods aligned to the clock so that every sender of
    an incast bursts together)."""

    kind: str = "tcp"
    src: str | list[str] = "b1"
    dst: str = "b2"
    flows: int = 1      # parallel connections (iperf3 -P); 0: this entry is off
    rate: float = 0.0   # UDP only: bits/s per flow (0 = the link rate)
    on_ms: float = 0.0  # > 0: bursts of on_ms ...
    off_ms: float = 0.0  # ... separated by off_ms of silence (both 0: continuous)


@dataclass
class RunSpec:
    name: str = "run"
    topology: TopologySpec = field(default_factory=TopologySpec)
    switch: str = "embedded"
    workers: int = 2
    model: str = "mlp"
    dataset: str = "digits"
    dataset_path: str | None = None
    test_size: int | None = None        # generated datasets: held-out samples (None: 20% of the generated ones)
    algorithm: str = "dlcp-allreduce"
    loss_bound: float = 0.0
    # the dlcp backend marks the smallest-magnitude packets drop-eligible within the bound (host.policy); false:
    # nothing eligible (DLCP_POLICY=no-eligible), every packet protected although the calls still ask for loss
    host_eligibility: bool = True
    # dlcp transport: on (ECN + delay), fast (on with FAST's delay law), ecn (the switches mark), off
    congestion_control: str = "ecn"
    density: float = 0.01               # spardl: fraction of gradient elements sent
    teams: int = 1                      # spardl: d
    acid_step_seconds: float = 0.02     # acid: each gradient step padded to this (an emulated accelerator step, so
                                        # one exchange per step through the software switches is possible)
    rate_com: float = 1.0               # acid: communications per gradient step
    optimizer: str = "sgd"
    lr: float = 0.05
    momentum: float = 0.9
    batch_size: int = 32
    steps: int = 100
    target_accuracy: float | None = None
    # training stops at the first evaluation reaching target_accuracy; false: every run trains all its steps and
    # time to target is still read off the evaluations (so tails and final accuracy cover the same steps)
    stop_at_target: bool = True
    eval_every: int = 10
    hidden: int = 256
    seed: int = 0
    background: list[BackgroundFlow] = field(default_factory=list)
    priority_queues: int = 8
    thresholds: ThresholdSpec = field(default_factory=ThresholdSpec)
    priority_mode: str = "trust"
    # DSCP -> queue for non-DLCP traffic; None: class selector CSp (DSCP p << 3) -> queue p, capped at the top
    # queue (everything unmarked, background iperf3 included, in queue 0)
    dscp_map: dict[int, int] | None = None
    # host-side DSCP for the workers' TCP (Gloo, the rendezvous store): None leaves it 0 (best effort)
    job_dscp: int | None = None
    load_balancing: str = "spray"       # DLCP packets sprayed per packet, or everything hashed per flow
    tcp: TcpSpec = field(default_factory=TcpSpec)
    compute_ms: float = 0.0             # emulated accelerator compute per step (1/3 in forward, 2/3 in backward)
    timeout_s: float = 300.0            # the whole run (workers included) must end within this
    source: str = "<spec>"              # the file it came from (not a YAML key)


def _line_of(node: yaml.Node | None) -> int:
    return node.start_mark.line + 1 if node is not None else 0


class _Reader:
    def __init__(self, path: str):
        self.path = path
        self.lines: dict[str, int] = {}  # key path -> line of its value, for the semantic checks' errors

    def where(self, node: yaml.Node | None) -> str:
        return f"{self.path}:{_line_of(node)}"

    def scalar(self, node: yaml.Node, key: str) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            raise SpecError(self.where(node), key, "expected a single value")
        return yaml.safe_load(yaml.serialize(node))

    def mapping(self, node: yaml.Node, key: str) -> list[tuple[str, yaml.Node, yaml.Node]]:
        if not isinstance(node, yaml.MappingNode):
            raise SpecError(self.where(node), key, "expected a mapping (key: value lines)")
        out = []
        seen = set()
        for k, v in node.value:
            name = self.scalar(k, key)
            if not isinstance(name, str):
                raise SpecError(self.where(k), key, f"keys must be names, got {name!r}")
            if name in seen:
                raise SpecError(self.where(k), f"{key}.{name}" if key else name, "duplicate key")
            seen.add(name)
            out.append((name, k, v))
        return out

    def dataclass(self, cls: type, node: yaml.Node, key: str) -> Any:
        obj = cls()
        known = {f.name: f for f in fields(cls) if f.name != "source"}
        for name, knode, vnode in self.mapping(node, key):
            path = f"{key}.{name}" if key else name
            if name not in known:
                raise SpecError(self.where(knode), path, f"unknown key (known: {', '.join(sorted(known))})")
            self.lines[path] = _line_of(vnode)
            setattr(obj, name, self.value(cls, name, vnode, path))
        return obj

    def value(self, cls: type, name: str, node: yaml.Node, path: str) -> Any:
        where = self.where(node)
        if (cls, name) in ((TopologySpec, "link"), (TopologySpec, "core")):
            return self.dataclass(LinkSpec, node, path)
        if (cls, name) == (RunSpec, "topology"):
            return self.dataclass(TopologySpec, node, path)
        if (cls, name) == (TopologySpec, "degraded"):
            if isinstance(node, yaml.ScalarNode) and self.scalar(node, path) is None:
                return None
            return self.dataclass(DegradedPath, node, path)
        if (cls, name) == (BackgroundFlow, "src") and isinstance(node, yaml.SequenceNode):
            hosts = [self.scalar(n, f"{path}[{i}]") for i, n in enumerate(node.value)]
            for i, (h, n) in enumerate(zip(hosts, node.value)):
                if not isinstance(h, str):
                    raise SpecError(self.where(n), f"{path}[{i}]", f"expected a host name, got {h!r}")
            if not hosts:
                raise SpecError(where, path, "an empty list of senders")
            return hosts
        if (cls, name) == (RunSpec, "thresholds"):
            return self.dataclass(ThresholdSpec, node, path)
        if (cls, name) == (RunSpec, "tcp"):
            return self.dataclass(TcpSpec, node, path)
        if (cls, name) == (RunSpec, "dscp_map"):
            return self.dscp_map(node, path)
        if (cls, name) == (ThresholdSpec, "classes"):
            return self.class_map(node, path)
        if (cls, name) == (RunSpec, "background"):
            if not isinstance(node, yaml.SequenceNode):
                raise SpecError(where, path, "expected a list of flows")
            for i, n in enumerate(node.value):
                self.lines[f"{path}[{i}]"] = _line_of(n)
            return [self.dataclass(BackgroundFlow, n, f"{path}[{i}]") for i, n in enumerate(node.value)]
        v = self.scalar(node, path)
        try:
            return _convert(cls, name, v)
        except (TypeError, ValueError) as e:
            raise SpecError(where, path, str(e)) from None

    def dscp_map(self, node: yaml.Node, path: str) -> dict[int, int] | None:
        if isinstance(node, yaml.ScalarNode) and self.scalar(node, path) is None:
            return None
        out = {}
        for _name, knode, vnode in self.mapping_any(node, path):
            d, q = self.scalar(knode, path), self.scalar(vnode, path)
            for what, v, n, hi in (("DSCP", d, knode, 63), ("queue", q, vnode, 7)):
                if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= hi:
                    raise SpecError(self.where(n), f"{path}.{d}", f"{what} must be an integer 0..{hi}, got {v!r}")
            out[d] = q
        return out

    def class_map(self, node: yaml.Node, path: str) -> dict[int, int] | None:
        """``thresholds.classes``: magnitude class 0..7 -> packets (checked against the queue later)."""
        if isinstance(node, yaml.ScalarNode) and self.scalar(node, path) is None:
            return None
        out = {}
        for c, knode, vnode in self.mapping_any(node, path):
            v = self.scalar(vnode, path)
            self.lines[f"{path}.{c}"] = _line_of(vnode)
            if isinstance(c, bool) or not isinstance(c, int) or not 0 <= c <= 7:
                raise SpecError(self.where(knode), f"{path}.{c}", "a magnitude class is an integer 0..7")
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise SpecError(self.where(vnode), f"{path}.{c}", f"expected packets (an integer >= 0), got {v!r}")
            out[c] = v
        return out

    def mapping_any(self, node: yaml.Node, key: str) -> list[tuple[Any, yaml.Node, yaml.Node]]:
        if not isinstance(node, yaml.MappingNode):
            raise SpecError(self.where(node), key, "expected a mapping (key: value lines)")
        return [(self.scalar(k, key), k, v) for k, v in node.value]


_INTS = {"mtu", "hosts", "background_hosts", "delay_us", "queue", "flows", "workers", "teams", "batch_size", "steps",
         "eval_every", "hidden", "seed", "priority_queues"}
_OPTIONAL_INTS = {"drop", "mark", "job_dscp", "rto_min_ms", "test_size"}
_OPTIONAL_BOOLS = {"ecn"}
_BOOLS = {"stop_at_target", "host_eligibility"}
_FLOATS = {"acid_step_seconds", "rate_com", "loss", "loss_bound", "density", "lr", "momentum", "target_accuracy",
           "timeout_s", "compute_ms", "on_ms", "off_ms", "flap_ms"}


def _convert(cls: type, name: str, v: Any) -> Any:
    if cls is DegradedPath and v is None and name in ("rate", "delay_us", "loss"):
        return None  # the core's
    if name == "rate":
        return parse_rate(v)
    if (name in _OPTIONAL_INTS or name in _OPTIONAL_BOOLS) and v is None:
        return None
    if name in _OPTIONAL_BOOLS or name in _BOOLS:
        if not isinstance(v, bool):
            raise TypeError(f"expected true or false, got {v!r}")
        return v
    if name in _INTS or name in _OPTIONAL_INTS:
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"expected an integer, got {v!r}")
        return v
    if name in _FLOATS:
        if v is None and name == "target_accuracy":
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"expected a number, got {v!r}")
        return float(v)
    if v is not None and not isinstance(v, str):
        raise TypeError(f"expected text, got {v!r}")
    return v


def _check(spec: RunSpec) -> None:
    """Semantic checks; raise SpecError(key) with the file but no line (the value was well-formed)."""
    lines: dict[str, int] = getattr(spec, "_lines", {})

    def bad(key: str, msg: str) -> SpecError:
        # the line of the key, or of the nearest enclosing one the file has (a default has none)
        path = key
        while path and path not in lines:
            path = path.rsplit(".", 1)[0] if "." in path else ""
        return SpecError(f"{spec.source}:{lines[path]}" if path else spec.source, key, msg)

    t = spec.topology
    if t.kind not in TOPOLOGIES:
        raise bad("topology.kind", f"{t.kind!r} is not one of {', '.join(TOPOLOGIES)}")
    if spec.algorithm not in ALGORITHMS:
        raise bad("algorithm", f"{spec.algorithm!r} is not one of {', '.join(ALGORITHMS)}")
    if spec.switch not in SWITCH_TARGETS:
        raise bad("switch", f"{spec.switch!r} is not one of {', '.join(SWITCH_TARGETS)}")
    if spec.algorithm == "acid" and spec.workers < 2:
        raise bad("workers", "acid needs at least 2 workers")
    if spec.workers < 1 or spec.workers > t.hosts:
        raise bad("workers", f"{spec.workers} workers need 1..topology.hosts ({t.hosts}) hosts")
    if not 576 <= t.mtu <= 9000:
        raise bad("topology.mtu", f"{t.mtu} is outside 576..9000")
    if t.kind != "star" and t.hosts < 2:
        raise bad("topology.hosts", f"{t.kind} needs at least 2 hosts")
    for key, lk in (("topology.link", t.link), ("topology.core", t.core)):
        if lk is None:
            continue
        if lk.rate <= 0:
            raise bad(f"{key}.rate", "must be positive")
        if not 0.0 <= lk.loss < 1.0:
            raise bad(f"{key}.loss", "must be in [0, 1)")
        if lk.queue < 1 or lk.delay_us < 0:
            raise bad(f"{key}", "queue must be >= 1 packet and delay_us >= 0")
    if not 0.0 <= spec.loss_bound < 1.0:
        raise bad("loss_bound", "must be in [0, 1)")
    if not 0.0 < spec.density <= 1.0:
        raise bad("density", "must be in (0, 1]")
    if spec.steps < 1 or spec.batch_size < 1 or spec.eval_every < 1:
        raise bad("steps", "steps, batch_size and eval_every must be >= 1")
    if spec.congestion_control not in ("on", "fast", "ecn", "off"):
        raise bad("congestion_control", f"{spec.congestion_control!r} is not one of on, fast, ecn, off")
    if spec.optimizer not in ("sgd", "adam", "adamw"):
        raise bad("optimizer", f"{spec.optimizer!r} is not one of sgd, adam, adamw")
    if not 1 <= spec.priority_queues <= 8:
        raise bad("priority_queues", "must be 1..8")
    for key in ("drop", "mark"):
        v = getattr(spec.thresholds, key)
        if v is not None and not 0 <= v <= t.link.queue:
            raise bad(f"thresholds.{key}", f"{v} is outside 0..topology.link.queue ({t.link.queue}) packets")
    for c, v in (spec.thresholds.classes or {}).items():
        if v > t.link.queue:
            raise bad(f"thresholds.classes.{c}", f"{v} is outside 0..topology.link.queue ({t.link.queue}) packets")
    if spec.priority_mode not in PRIORITY_MODES:
        raise bad("priority_mode", f"{spec.priority_mode!r} is not one of {', '.join(PRIORITY_MODES)}")
    if spec.load_balancing not in LOAD_BALANCING:
        raise bad("load_balancing", f"{spec.load_balancing!r} is not one of {', '.join(LOAD_BALANCING)}")
    for d, q in (spec.dscp_map or {}).items():
        if q >= spec.priority_queues:
            raise bad(f"dscp_map.{d}", f"queue {q} is outside 0..{spec.priority_queues - 1} (priority_queues is "
                                       f"{spec.priority_queues})")
    if spec.job_dscp is not None and not 0 <= spec.job_dscp <= 63:
        raise bad("job_dscp", f"{spec.job_dscp} is outside 0..63")
    if spec.job_dscp is not None and spec.algorithm == "acid":
        raise bad("job_dscp", "acid's workers use no TCP to mark (their exchanges are DLCP)")
    tcp = spec.tcp
    if tcp.congestion_control is not None and tcp.congestion_control not in TCP_CONGESTION:
        raise bad("tcp.congestion_control", f"{tcp.congestion_control!r} is not one of {', '.join(TCP_CONGESTION)}")
    if tcp.rto_min_ms is not None and not 1 <= tcp.rto_min_ms <= 1000:
        raise bad("tcp.rto_min_ms", f"{tcp.rto_min_ms} is outside 1..1000 ms")
    if not 0.0 <= spec.compute_ms <= 10_000.0:
        raise bad("compute_ms", f"{spec.compute_ms} is outside 0..10000 ms")
    if spec.test_size is not None:
        if spec.dataset not in ("synthetic-cifar", "text"):
            raise bad("test_size", f"dataset {spec.dataset} has a fixed test set (test_size is for the generated "
                                   f"ones: synthetic-cifar, text)")
        if not 100 <= spec.test_size <= 200_000:
            raise bad("test_size", f"{spec.test_size} is outside 100..200000 samples")
    if spec.dataset not in DATASETS:
        raise bad("dataset", f"{spec.dataset!r} is not one of {', '.join(DATASETS)}")
    if spec.model not in MODELS:
        raise bad("model", f"{spec.model!r} is not one of {', '.join(MODELS)}")
    needs = {"cnn": ("synthetic-cifar", "cifar10"), "char-mlp": ("text",), "transformer": ("text",)}
    if spec.algorithm != "acid" and spec.dataset not in needs.get(spec.model, (spec.dataset,)):
        raise bad("model", f"{spec.model} needs dataset {' or '.join(needs[spec.model])}, not {spec.dataset}")
    if spec.model == "transformer" and spec.hidden % 4:
        raise bad("hidden", f"the transformer's width ({spec.hidden}) must be a multiple of its 4 heads")
    if spec.compute_ms and spec.algorithm == "acid":
        raise bad("compute_ms", "acid pads its steps with acid_step_seconds instead")
    hosts = {f"h{i + 1}" for i in range(t.hosts)} | {f"b{i + 1}" for i in range(t.background_hosts)}
    for i, f in enumerate(spec.background):
        if f.kind not in ("tcp", "udp"):
            raise bad(f"background[{i}].kind", f"{f.kind!r} is not tcp or udp")
        for side in ("src", "dst"):
            h = getattr(f, side)
            if not isinstance(h, list) and h not in hosts:
                raise bad(f"background[{i}].{side}", f"no host {h!r} (hosts: {', '.join(sorted(hosts))})")
        for k, h in enumerate(f.src if isinstance(f.src, list) else []):
            if h not in hosts:
                raise bad(f"background[{i}].src", f"sender {k} is no host: {h!r} (hosts: {', '.join(sorted(hosts))})")
        senders = f.src if isinstance(f.src, list) else [f.src]
        if f.dst in senders or f.flows < 0:
            raise bad(f"background[{i}]", "src and dst must differ and flows must be >= 0 (0: no traffic)")
        if len(set(senders)) != len(senders):
            raise bad(f"background[{i}].src", f"a sender is listed twice: {senders}")
        for key in ("on_ms", "off_ms"):
            v = getattr(f, key)
            if not 0.0 <= v <= 60_000.0:
                raise bad(f"background[{i}].{key}", f"{v:g} is outside 0..60000 ms")
        if (f.on_ms > 0) != (f.off_ms > 0):
            raise bad(f"background[{i}].{'off_ms' if f.on_ms > 0 else 'on_ms'}",
                      "bursty traffic needs both on_ms and off_ms (both 0: continuous)")
        if 0 < f.on_ms < 5 or 0 < f.off_ms < 5:
            raise bad(f"background[{i}].on_ms", "bursts and pauses of under 5 ms are below the sender's timer")
    d = t.degraded
    if d is not None:
        if t.kind != "leaf-spine":
            raise bad("topology.degraded", f"a degraded path needs a leaf-spine (two spines to spray over), not "
                                           f"{t.kind}")
        if d.spine not in ("spine1", "spine2"):
            raise bad("topology.degraded.spine", f"{d.spine!r} is not spine1 or spine2")
        if d.rate is None and d.delay_us is None and d.loss is None:
            raise bad("topology.degraded", "give at least one of rate, delay_us, loss")
        if d.rate is not None and d.rate <= 0:
            raise bad("topology.degraded.rate", "must be positive")
        if d.delay_us is not None and not 0 <= d.delay_us <= 1_000_000:
            raise bad("topology.degraded.delay_us", f"{d.delay_us} is outside 0..1000000")
        if d.loss is not None and not 0.0 <= d.loss <= 1.0:
            raise bad("topology.degraded.loss", f"{d.loss:g} is outside 0..1")
        if d.flap_ms != 0 and not 100.0 <= d.flap_ms <= 600_000.0:
            raise bad("topology.degraded.flap_ms", f"{d.flap_ms:g} is outside 100..600000 ms (0: no flapping; "
                                                   f"the controller needs tens of ms per change)")
        if d.loss == 1.0 and not d.flap_ms:
            raise bad("topology.degraded.loss", "a path down (loss 1) for the whole run loses every packet "
                                                "sprayed over it: give flap_ms, or a loss below 1")


def _override(path: str, node: yaml.MappingNode, key: str, value: Any) -> None:
    """Replace ``key`` (dotted for nested mappings and list items: ``topology.link.rate``, ``background.0.flows``)
    in the composed file; the value then goes through the same typed reader as the file's own (its line is the
    file's first)."""
    *parents, last = key.split(".")
    for part in parents:
        if isinstance(node, yaml.SequenceNode):
            if not part.isdigit() or int(part) >= len(node.value):
                raise SpecError(f"{path}:{_line_of(node)}", key, f"{part!r} is not an item of a {len(node.value)}-item "
                                                                 f"list")
            child = node.value[int(part)]
        else:
            child = next((v for k, v in node.value if k.value == part), None)
            if child is None:
                child = yaml.MappingNode("tag:yaml.org,2002:map", [], start_mark=node.start_mark)
                node.value.append((yaml.ScalarNode("tag:yaml.org,2002:str", part, start_mark=node.start_mark),
                                   child))
        if not isinstance(child, (yaml.MappingNode, yaml.SequenceNode)):
            raise SpecError(f"{path}:{_line_of(child)}", key, f"{part!r} is a single value, not a mapping to set a "
                                                              f"key in")
        node = child
    if isinstance(node, yaml.SequenceNode):  # a whole list item: background.0
        if not last.isdigit() or int(last) >= len(node.value):
            raise SpecError(f"{path}:{_line_of(node)}", key, f"{last!r} is not an item of a {len(node.value)}-item "
                                                             f"list")
        node.value[int(last)] = yaml.compose(yaml.safe_dump(value))
        return
    pair = yaml.compose(yaml.safe_dump({last: value})).value[0]
    node.value = [kv for kv in node.value if kv[0].value != last] + [pair]


def load_spec(path: str | Path, overrides: dict[str, Any] | None = None) -> RunSpec:
    """Read and validate a run spec. ``overrides`` replaces top-level keys after reading (command-line options)."""
    p = str(path)
    try:
        text = Path(p).read_text()
    except OSError as e:
        raise SpecError(p, "", f"cannot read: {e.strerror}") from None
    try:
        node = yaml.compose(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise SpecError(f"{p}:{mark.line + 1 if mark else 0}", "", f"not valid YAML: {getattr(e, 'problem', e)}") \
            from None
    if node is None:
        raise SpecError(f"{p}:1", "", "empty spec")
    if not isinstance(node, yaml.MappingNode):
        raise SpecError(f"{p}:1", "", "a spec is a mapping of keys to values")
    for k, v in (overrides or {}).items():
        _override(p, node, k, v)
    reader = _Reader(p)
    spec = reader.dataclass(RunSpec, node, "")
    spec.source = p
    spec._lines = reader.lines  # not a field: asdict() and the run's JSON leave it out
    _check(spec)
    # flows: 0 is an entry switched off; an incast entry (a list of senders) is one entry per sender
    spec.background = [replace(f, src=src) for f in spec.background if f.flows > 0
                       for src in (f.src if isinstance(f.src, list) else [f.src])]
    return spec


def spec_to_json(spec: RunSpec) -> str:
    """The run spec as the JSON its workers read (``spec.json`` beside the run's results)."""
    return json.dumps(asdict(spec))


def spec_from_json(text: str) -> RunSpec:
    """A run spec back from :func:`spec_to_json`'s JSON (a worker's first step)."""
    d = json.loads(text)
    t = d.pop("topology")
    t["link"] = LinkSpec(**t["link"])
    t["core"] = LinkSpec(**t["core"]) if t.get("core") else None
    t["degraded"] = DegradedPath(**t["degraded"]) if t.get("degraded") else None
    d["background"] = [BackgroundFlow(**b) for b in d.pop("background")]
    d["thresholds"] = ThresholdSpec(**d.get("thresholds", {}))
    d["tcp"] = TcpSpec(**d.get("tcp", {}))
    if d["thresholds"].classes is not None:  # JSON keys are text
        d["thresholds"].classes = {int(k): v for k, v in d["thresholds"].classes.items()}
    if d.get("dscp_map") is not None:  # JSON keys are text
        d["dscp_map"] = {int(k): v for k, v in d["dscp_map"].items()}
    return RunSpec(topology=TopologySpec(**t), **d)

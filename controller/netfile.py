"""Network files: the YAML description of a DLCP network that ``dlcpctl`` turns into switch state.

The schema is documented in ``docs/controller.md``. Loading validates everything up front and raises
:class:`NetFileError` naming the file, the offending key (as a dotted path such as ``hosts.h1.mac``) and its line,
so a typo never reaches a switch.

Loading is four modules, one job each; this one is the entry point (:func:`load`, :func:`loads`), validates every
section into the model, and re-exports the others' public names, so ``from controller.netfile import ...`` is the
one import users need:

- :mod:`controller.netfile_yaml`: YAML text -> plain values with the line of every key (no base-60 numbers, no
  silently merged duplicate keys), and :class:`NetFileError`;
- :mod:`controller.netfile_values`: the value parsers (rates, delays, loss, MACs, ``SWITCH:PORT``...), also used
  by the command line;
- :mod:`controller.netfile_model`: the validated data model (:class:`Network` and its records) and the defaults
  a file that says nothing gets.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from .netfile_model import (DEFAULT_PROGRAM, LB_MODES, MSG_TYPES, PRIORITY_ORDERS, TARGETS, TOFINO_CELLS_PER_PACKET,
                            TOFINO_P4INFO, ClassThresholdRule,
                            DlcpRule, HostSpec,
                            LinkProps, LinkSpec, Network, NextHopSpec, QueueRule, QueueSelector, StaticRoute,
                            SwitchSpec, ThresholdRule, TLSSpec, default_dlcp_rules, default_dscp_map,
                            default_mac_base)
from .netfile_values import (LAYER_MAX, MAX_PORT, THRESHOLD_MAX, format_mac, parse_delay, parse_ipv4,
                             parse_layer_range, parse_loss, parse_mac, parse_port, parse_port_ref, parse_prefix,
                             parse_rate)
from .netfile_yaml import LocatedDoc, NetFileError, compose, map_key

__all__ = [
    "NetFileError", "Network", "SwitchSpec", "HostSpec", "LinkSpec", "LinkProps", "TLSSpec", "DlcpRule",
    "ThresholdRule", "ClassThresholdRule", "QueueRule", "QueueSelector", "StaticRoute", "NextHopSpec", "load", "loads", "DEFAULT_PROGRAM",
    "MSG_TYPES", "LB_MODES", "TARGETS", "PRIORITY_ORDERS", "MAX_PORT", "THRESHOLD_MAX", "LAYER_MAX",
    "default_dlcp_rules", "default_dscp_map", "default_mac_base",
    "parse_rate", "parse_delay", "parse_loss", "parse_mac", "format_mac", "parse_port_ref", "parse_port",
    "parse_ipv4", "parse_prefix", "parse_layer_range",
]


class _Checker:
    """Turns the plain document into the model, raising :class:`NetFileError` at the first problem."""

    def __init__(self, data: Any, doc: LocatedDoc, base: Path):
        self.data = data
        self.doc = doc
        self.base = base

    def error(self, key: tuple, message: str) -> NetFileError:
        """The error to raise for the value at key path ``key``, located at its line."""
        return self.doc.error(key, message)

    def mapping(self, value: Any, key: tuple, allowed: Iterable[str], required: Iterable[str] = ()) -> dict:
        """``value`` checked to be a mapping with only ``allowed`` keys (a near miss is suggested) and every
        ``required`` one."""
        if not isinstance(value, dict):
            raise self.error(key, f"expected a mapping, got {_kind(value)}")
        allowed = tuple(allowed)
        for name in value:
            if name not in allowed:
                hint = _close(str(name), allowed)
                raise self.error(key + (name,), f"unknown key {name!r}"
                                 + (f" (did you mean {hint!r}?)" if hint else "") + f"; allowed: {', '.join(allowed)}")
        for name in required:
            if name not in value:
                raise self.error(key, f"missing required key {name!r}")
        return value

    def converted(self, value: Any, key: tuple, fn: Callable[[Any], Any]) -> Any:
        """``fn(value)``, a parser's ValueError or TypeError raised as the error at ``key``."""
        try:
            return fn(value)
        except (ValueError, TypeError) as e:
            raise self.error(key, str(e)) from None

    def integer(self, value: Any, key: tuple, lo: int, hi: int) -> int:
        """``value`` checked to be an integer (not a boolean) within ``lo..hi``."""
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"expected an integer, got {_kind(value)} {value!r}")
        if not lo <= value <= hi:
            raise self.error(key, f"{value} out of range {lo}..{hi}")
        return value

    def string(self, value: Any, key: tuple) -> str:
        """``value`` checked to be a non-empty string."""
        if not isinstance(value, str) or not value:
            raise self.error(key, f"expected a non-empty string, got {_kind(value)} {value!r}")
        return value

    def integers(self, value: Any, key: tuple, lo: int, hi: int,
                 names: dict[str, int] | None = None) -> tuple[int, ...]:
        """One value or a list of values (integers, or names from ``names``)."""
        items = value if isinstance(value, list) else [value]
        if not items:
            raise self.error(key, "empty list")
        out = []
        for i, x in enumerate(items):
            where = key + (i,) if isinstance(value, list) else key
            if names is not None and isinstance(x, str):
                if x.lower() not in names:
                    raise self.error(where, f"unknown name {x!r}; expected one of {', '.join(names)} or {lo}..{hi}")
                out.append(names[x.lower()])
            else:
                out.append(self.integer(x, where, lo, hi))
        return tuple(dict.fromkeys(out))

    def path(self, value: Any, key: tuple, must_exist: bool = True) -> Path:
        """A file path, a relative one resolved against the base directory (the network file's, for :func:`load`)."""
        resolved = Path(self.string(value, key))
        resolved = resolved if resolved.is_absolute() else self.base / resolved
        if must_exist and not resolved.exists():
            raise self.error(key, f"file not found: {resolved}")
        return resolved

    # -- sections -------------------------------------------------------------------------------------------------

    def network(self, source: Path | None) -> Network:
        top = self.mapping(self.data, (), ("program", "include", "load_balancing", "connect_timeout", "switches",
                                             "hosts", "links", "priorities", "thresholds", "class_thresholds",
                                             "queues", "routes", "p4info", "device_config"),
                           required=("switches",))
        program = self.path(top["program"], ("program",)) if "program" in top else DEFAULT_PROGRAM
        p4info, device_config = self.artifact_pair(top, ())
        if p4info is not None and "program" in top:
            raise self.error(("p4info",), "give either program (compiled here) or p4info + device_config (p4c's "
                                          "output), not both")
        includes = top.get("include", [])
        if not isinstance(includes, list):
            raise self.error(("include",), "expected a list of directories")
        include_dirs = tuple(self.path(d, ("include", i)) for i, d in enumerate(includes))
        lb_mode = top.get("load_balancing", "spray")
        if lb_mode not in LB_MODES:
            raise self.error(("load_balancing",), f"expected one of {', '.join(LB_MODES)}, got {lb_mode!r}")
        timeout = top.get("connect_timeout", 5.0)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise self.error(("connect_timeout",), f"expected a positive number of seconds, got {timeout!r}")

        switches = self.switches(top["switches"], lb_mode)
        hosts = self.hosts(top.get("hosts", {}), switches)
        links = self.links(top.get("links", []), switches)
        self.check_ports(switches, hosts, links)
        prios = self.mapping(top.get("priorities", {}), ("priorities",), ("dlcp", "dscp"))
        top_q = min(spec.priority_queues for spec in switches.values()) - 1
        dlcp_rules = self.dlcp_rules(prios.get("dlcp", default_dlcp_rules(top_q)), switches)
        dscp_map = self.dscp_map(prios.get("dscp", default_dscp_map(top_q)), switches)
        thresholds = self.thresholds(top.get("thresholds", []), switches)
        class_thresholds = self.class_thresholds(top.get("class_thresholds", []), switches)
        queues = self.queue_rules(top.get("queues", []), switches)
        net = Network(source=source, program=program, include_dirs=include_dirs, switches=switches, hosts=hosts,
                      links=links, dlcp_rules=dlcp_rules, dscp_map=dscp_map, thresholds=thresholds, queues=queues,
                      routes=[], lb_mode=lb_mode, connect_timeout=float(timeout), lines=self.doc.lines,
                      p4info=p4info, device_config=device_config, class_thresholds=class_thresholds)
        net.routes = self.routes(top.get("routes", []), net)
        return net

    def switches(self, value: Any, lb_default: str) -> dict[str, SwitchSpec]:
        key = ("switches",)
        if not isinstance(value, dict) or not value:
            raise self.error(key, "expected a non-empty mapping of switch name -> settings")
        out: dict[str, SwitchSpec] = {}
        macs: dict[int, str] = {}
        for name, settings in value.items():
            where = key + (name,)
            if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", name):
                raise self.error(where, f"invalid switch name {name!r} (letters, digits, _ . -; not starting with a "
                                        "digit)")
            settings = self.mapping(settings, where, ("address", "device_id", "target", "tls", "mgmt_address",
                                                      "thrift_port", "bmv2_json", "cpu_port", "priority_queues",
                                                      "load_balancing", "mac_base", "p4info", "device_config",
                                                      "priority_order", "cells_per_packet"),
                                    required=("address",))
            addr = self.string(settings["address"], where + ("address",))
            if not re.fullmatch(r"(\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.-]+):[0-9]{1,5}", addr):
                raise self.error(where + ("address",), f"expected HOST:PORT, got {addr!r}")
            target = settings.get("target", "embedded")
            if target not in TARGETS:
                raise self.error(where + ("target",), f"expected one of {', '.join(TARGETS)}, got {target!r}")
            tls = self.tls(settings["tls"], where + ("tls",)) if "tls" in settings else None
            lb_mode = settings.get("load_balancing", lb_default)
            if lb_mode not in LB_MODES:
                raise self.error(where + ("load_balancing",),
                                 f"expected one of {', '.join(LB_MODES)}, got {lb_mode!r}")
            if "mac_base" in settings:
                mac_base = self.converted(settings["mac_base"], where + ("mac_base",), parse_mac)
                if mac_base & 0xFFFF:
                    raise self.error(where + ("mac_base",), "the last two bytes must be 00:00 (they hold the port)")
            else:
                mac_base = default_mac_base(name)
            if mac_base in macs:
                raise self.error(where + ("mac_base",), f"router MAC base {format_mac(mac_base)} is also used by "
                                                        f"switch {macs[mac_base]!r}; set mac_base on one of them")
            macs[mac_base] = name
            mgmt = settings.get("mgmt_address", "")
            if mgmt:
                self.string(mgmt, where + ("mgmt_address",))
            bmv2_json = (self.path(settings["bmv2_json"], where + ("bmv2_json",)) if "bmv2_json" in settings
                         else None)
            if target == "tofino":
                p4info, device_config = self.tofino_artifacts(settings, where)
                cells = self.integer(settings.get("cells_per_packet", TOFINO_CELLS_PER_PACKET),
                                     where + ("cells_per_packet",), 1, 4096)
            else:
                p4info, device_config = self.artifact_pair(settings, where)
                if "cells_per_packet" in settings:
                    raise self.error(where + ("cells_per_packet",), "only for target: tofino (whose queue depths "
                                                                    "count cells, not packets)")
                cells = 1
            if p4info is not None and bmv2_json is not None:
                raise self.error(where + ("bmv2_json",), "give either bmv2_json (with the program's P4Info) or "
                                                         "p4info + device_config, not both")
            order = settings.get("priority_order", "high-first")
            if order not in PRIORITY_ORDERS:
                raise self.error(where + ("priority_order",),
                                 f"expected one of {', '.join(PRIORITY_ORDERS)}, got {order!r}")
            out[name] = SwitchSpec(
                name=name, address=addr,
                device_id=self.integer(settings.get("device_id", 0), where + ("device_id",), 0, 2**64 - 1),
                target=target, tls=tls, mgmt_address=mgmt,
                thrift_port=self.integer(settings.get("thrift_port", 9090), where + ("thrift_port",), 1, 65535),
                bmv2_json=bmv2_json, p4info=p4info, device_config=device_config, priority_order=order,
                cpu_port=(self.integer(settings["cpu_port"], where + ("cpu_port",), 0, MAX_PORT)
                          if "cpu_port" in settings else None),
                priority_queues=self.integer(settings.get("priority_queues", 8), where + ("priority_queues",), 1, 8),
                lb_mode=lb_mode, mac_base=mac_base, cells_per_packet=cells)
        return out

    def tofino_artifacts(self, settings: dict, key: tuple) -> tuple[Path, Path | None]:
        """A Tofino switch's P4Info (its own, else the twin's, TOFINO_P4INFO) and, optionally, the device config
        dlcpctl may push; without one the switch loads its pipeline itself and dlcpctl only checks it runs it."""
        if "bmv2_json" in settings:
            raise self.error(key + ("bmv2_json",), "a tofino switch runs the Tofino back end's output, not BMv2 JSON")
        if "p4info" in settings:
            p4info = self.path(settings["p4info"], key + ("p4info",))
        elif TOFINO_P4INFO.is_file():
            p4info = TOFINO_P4INFO
        else:
            raise self.error(key + ("target",), f"no P4Info of the Tofino twin at {TOFINO_P4INFO}: make it with "
                                                "python scripts/tofino_resources.py (p4c's Tofino back end: "
                                                "scripts/build-tofino-backend.sh), or give p4info: (p4c-barefoot "
                                                "--p4runtime-files FILE --p4runtime-force-std-externs)")
        device_config = (self.path(settings["device_config"], key + ("device_config",))
                         if "device_config" in settings else None)
        return p4info, device_config

    def artifact_pair(self, settings: dict, key: tuple) -> tuple[Path | None, Path | None]:
        """``p4info`` and ``device_config`` of a mapping: both or neither."""
        if ("p4info" in settings) != ("device_config" in settings):
            missing = "device_config" if "p4info" in settings else "p4info"
            raise self.error(key + (("p4info",) if "p4info" in settings else ("device_config",)),
                             f"p4info and device_config go together (p4c writes both); {missing} is missing")
        if "p4info" not in settings:
            return None, None
        return (self.path(settings["p4info"], key + ("p4info",)),
                self.path(settings["device_config"], key + ("device_config",)))

    def tls(self, value: Any, key: tuple) -> TLSSpec:
        fields = self.mapping(value, key, ("ca", "cert", "key", "server_name"), required=("ca",))
        if ("cert" in fields) != ("key" in fields):
            raise self.error(key, "cert and key go together (a client certificate needs its key)")
        return TLSSpec(ca=self.path(fields["ca"], key + ("ca",)),
                       cert=self.path(fields["cert"], key + ("cert",)) if "cert" in fields else None,
                       key=self.path(fields["key"], key + ("key",)) if "key" in fields else None,
                       server_name=(self.string(fields["server_name"], key + ("server_name",))
                                    if "server_name" in fields else ""))

    def link_props(self, value: dict, key: tuple) -> LinkProps:
        return LinkProps(
            rate_bps=self.converted(value["rate"], key + ("rate",), parse_rate) if "rate" in value else None,
            delay_us=self.converted(value["delay"], key + ("delay",), parse_delay) if "delay" in value else None,
            loss=self.converted(value["loss"], key + ("loss",), parse_loss) if "loss" in value else None,
            queue_depth=(self.integer(value["queue_depth"], key + ("queue_depth",), 1, 1 << 20)
                         if "queue_depth" in value else None))

    def hosts(self, value: Any, switches: dict[str, SwitchSpec]) -> dict[str, HostSpec]:
        key = ("hosts",)
        if not isinstance(value, dict):
            raise self.error(key, f"expected a mapping of host name -> settings, got {_kind(value)}")
        out: dict[str, HostSpec] = {}
        ips: dict[ipaddress.IPv4Address, str] = {}
        macs: dict[int, str] = {}
        for name, host in value.items():
            where = key + (name,)
            if not isinstance(name, str) or not name:
                raise self.error(where, f"invalid host name {name!r}")
            if name in switches:
                raise self.error(where, f"{name!r} is already a switch name")
            host = self.mapping(host, where, ("ip", "mac", "attach", "rate", "delay", "loss", "queue_depth"),
                                required=("ip", "mac", "attach"))
            ip = self.converted(host["ip"], where + ("ip",), parse_ipv4)
            if ip in ips:
                raise self.error(where + ("ip",), f"{ip} is also the address of host {ips[ip]!r}")
            ips[ip] = name
            mac = self.converted(host["mac"], where + ("mac",), parse_mac)
            if mac in macs:
                raise self.error(where + ("mac",), f"{format_mac(mac)} is also the MAC of host {macs[mac]!r}")
            macs[mac] = name
            switch, port = self.converted(host["attach"], where + ("attach",), parse_port_ref)
            if switch not in switches:
                raise self.error(where + ("attach",), f"unknown switch {switch!r}; switches: {', '.join(switches)}")
            out[name] = HostSpec(name=name, ip=ip, mac=mac, switch=switch, port=port,
                                 link=self.link_props(host, where))
        return out

    def links(self, value: Any, switches: dict[str, SwitchSpec]) -> list[LinkSpec]:
        key = ("links",)
        if not isinstance(value, list):
            raise self.error(key, f"expected a list of links, got {_kind(value)}")
        out = []
        for i, link in enumerate(value):
            where = key + (i,)
            link = self.mapping(link, where, ("between", "rate", "delay", "loss", "queue_depth", "cost"),
                                required=("between",))
            ends = link["between"]
            if not isinstance(ends, list) or len(ends) != 2:
                raise self.error(where + ("between",), "expected two endpoints [SWITCH:PORT, SWITCH:PORT]")
            a = self.converted(ends[0], where + ("between", 0), parse_port_ref)
            b = self.converted(ends[1], where + ("between", 1), parse_port_ref)
            for j, (switch, _) in enumerate((a, b)):
                if switch not in switches:
                    raise self.error(where + ("between", j),
                                     f"unknown switch {switch!r}; switches: {', '.join(switches)}")
            if a[0] == b[0]:
                raise self.error(where + ("between",), "a link must join two different switches")
            out.append(LinkSpec(a=a, b=b, props=self.link_props(link, where),
                                cost=self.integer(link.get("cost", 1), where + ("cost",), 1, 1 << 16)))
        return out

    def check_ports(self, switches: dict[str, SwitchSpec], hosts: dict[str, HostSpec], links: list[LinkSpec]) -> None:
        used: dict[tuple[str, int], str] = {}
        for spec in switches.values():
            if spec.cpu_port is not None:
                used[(spec.name, spec.cpu_port)] = "the CPU port"

        def claim(ref: tuple[str, int], what: str, key: tuple) -> None:
            if ref in used:
                raise self.error(key, f"port {ref[0]}:{ref[1]} is already used by {used[ref]}")
            used[ref] = what

        for host in hosts.values():
            claim((host.switch, host.port), f"host {host.name}", ("hosts", host.name, "attach"))
        for i, link in enumerate(links):
            claim(link.a, f"links[{i}]", ("links", i, "between", 0))
            claim(link.b, f"links[{i}]", ("links", i, "between", 1))

    def dlcp_rules(self, value: Any, switches: dict[str, SwitchSpec]) -> list[DlcpRule]:
        key = ("priorities", "dlcp")
        maxq = min(spec.priority_queues for spec in switches.values())
        out = []
        for i, where, rule in self.rules(value, key, ("msg_type", "priority", "mag_class", "layer", "queue", "trust")):
            trust = rule.get("trust", False)
            if not isinstance(trust, bool):
                raise self.error(where + ("trust",), f"expected true or false, got {trust!r}")
            if trust == ("queue" in rule):
                raise self.error(where, "a rule needs exactly one of 'queue: N' or 'trust: true'")
            queue = None if trust else self.integer(rule["queue"], where + ("queue",), 0, maxq - 1)
            msg_types = (self.integers(rule["msg_type"], where + ("msg_type",), 0, 15, MSG_TYPES)
                         if "msg_type" in rule else (None,))
            prios = self.integers(rule["priority"], where + ("priority",), 0, 7) if "priority" in rule else (None,)
            mags = self.integers(rule["mag_class"], where + ("mag_class",), 0, 7) if "mag_class" in rule else (None,)
            layer = self.converted(rule["layer"], where + ("layer",), parse_layer_range) if "layer" in rule else None
            for mt in msg_types:
                for p in prios:
                    for m in mags:
                        out.append(DlcpRule(msg_type=mt, priority=p, mag_class=m, layer=layer, queue=queue, rank=i))
        if len(out) > 256:
            raise self.error(key, f"{len(out)} entries after expanding lists; dlcp_priority holds 256")
        return out

    def dscp_map(self, value: Any, switches: dict[str, SwitchSpec]) -> dict[int, int]:
        key = ("priorities", "dscp")
        if not isinstance(value, dict):
            raise self.error(key, f"expected a mapping DSCP -> queue, got {_kind(value)}")
        maxq = min(spec.priority_queues for spec in switches.values())
        return {self.integer(dscp, key + (map_key(dscp),), 0, 63):
                self.integer(queue, key + (map_key(dscp),), 0, maxq - 1)
                for dscp, queue in value.items()}

    def rules(self, value: Any, key: tuple, allowed: tuple[str, ...]) -> Iterator[tuple[int, tuple, dict]]:
        """(index, key path, mapping) of each rule of the list ``value`` at ``key``, with only ``allowed`` keys."""
        if not isinstance(value, list):
            raise self.error(key, f"expected a list of rules, got {_kind(value)}")
        for i, rule in enumerate(value):
            yield i, key + (i,), self.mapping(rule, key + (i,), allowed)

    def selectors(self, rule: dict, where: tuple, switches: dict[str, SwitchSpec]):
        """The rule's ``switch``, ``port`` and ``priority`` selectors (:class:`QueueSelector`'s fields)."""
        switch_names = None
        if "switch" in rule:
            items = rule["switch"] if isinstance(rule["switch"], list) else [rule["switch"]]
            for name in items:
                if name not in switches:
                    raise self.error(where + ("switch",), f"unknown switch {name!r}; switches: {', '.join(switches)}")
            switch_names = tuple(items)
        ports = self.integers(rule["port"], where + ("port",), 0, MAX_PORT) if "port" in rule else None
        prios = self.integers(rule["priority"], where + ("priority",), 0, 7) if "priority" in rule else None
        return switch_names, ports, prios

    def thresholds(self, value: Any, switches: dict[str, SwitchSpec]) -> list[ThresholdRule]:
        out = []
        for _, where, rule in self.rules(value, ("thresholds",), ("switch", "port", "priority", "drop", "mark")):
            if "drop" not in rule and "mark" not in rule:
                raise self.error(where, "a threshold rule sets 'drop', 'mark' or both")
            switch_names, ports, prios = self.selectors(rule, where, switches)
            out.append(ThresholdRule(
                switch_names, ports, prios,
                drop=self.integer(rule["drop"], where + ("drop",), 0, THRESHOLD_MAX) if "drop" in rule else None,
                mark=self.integer(rule["mark"], where + ("mark",), 0, THRESHOLD_MAX) if "mark" in rule else None))
        return out

    def class_thresholds(self, value: Any, switches: dict[str, SwitchSpec]) -> list[ClassThresholdRule]:
        """``class_thresholds``: rules ``{switch (optional), class: C or [C, ...], drop: N}``, magnitude classes
        0..7 (0 smallest), N packets (0: none for those classes)."""
        out = []
        for _, where, rule in self.rules(value, ("class_thresholds",), ("switch", "class", "drop")):
            for key in ("class", "drop"):
                if key not in rule:
                    raise self.error(where, f"a class threshold rule needs '{key}'")
            switch_names, _, _ = self.selectors({k: v for k, v in rule.items() if k == "switch"}, where, switches)
            out.append(ClassThresholdRule(switch_names, self.integers(rule["class"], where + ("class",), 0, 7),
                                          self.integer(rule["drop"], where + ("drop",), 0, THRESHOLD_MAX)))
        return out

    def queue_rules(self, value: Any, switches: dict[str, SwitchSpec]) -> list[QueueRule]:
        out = []
        for _, where, rule in self.rules(value, ("queues",), ("switch", "port", "priority", "depth", "rate_pps")):
            if "depth" not in rule and "rate_pps" not in rule:
                raise self.error(where, "a queue rule sets 'depth', 'rate_pps' or both")
            switch_names, ports, prios = self.selectors(rule, where, switches)
            rate = rule.get("rate_pps")
            if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float)) or rate < 0):
                raise self.error(where + ("rate_pps",),
                                 f"expected packets per second >= 0 (0 = unlimited), got {rate!r}")
            depth = self.integer(rule["depth"], where + ("depth",), 1, 1 << 20) if "depth" in rule else None
            out.append(QueueRule(switch_names, ports, prios, depth=depth,
                                 rate_pps=float(rate) if rate is not None else None))
        return out

    def routes(self, value: Any, net: Network) -> list[StaticRoute]:
        key = ("routes",)
        if not isinstance(value, list):
            raise self.error(key, f"expected a list of routes, got {_kind(value)}")
        out = []
        seen: dict[tuple[str, ipaddress.IPv4Network], int] = {}
        host_prefixes = {(h.ip, 32) for h in net.hosts.values()}
        for i, route in enumerate(value):
            where = key + (i,)
            route = self.mapping(route, where, ("switch", "prefix", "via"), required=("switch", "prefix", "via"))
            switch = route["switch"]
            if switch not in net.switches:
                raise self.error(where + ("switch",),
                                 f"unknown switch {switch!r}; switches: {', '.join(net.switches)}")
            prefix = self.converted(route["prefix"], where + ("prefix",), parse_prefix)
            if (prefix.network_address, prefix.prefixlen) in host_prefixes:
                raise self.error(where + ("prefix",), f"{prefix} is a host route the controller computes itself")
            if (switch, prefix) in seen:
                raise self.error(where + ("prefix",), f"{prefix} on {switch} is also routes[{seen[(switch, prefix)]}]")
            seen[(switch, prefix)] = i
            vias = route["via"] if isinstance(route["via"], list) else [route["via"]]
            if not vias:
                raise self.error(where + ("via",), "needs at least one next hop")
            connected = net.ports_of(switch)
            hops = []
            for j, hop in enumerate(vias):
                hop_key = where + ("via", j) if isinstance(route["via"], list) else where + ("via",)
                if isinstance(hop, dict):
                    hop = self.mapping(hop, hop_key, ("port", "mac"), required=("port",))
                    port = self.converted(hop["port"], hop_key + ("port",), parse_port)
                    mac = self.converted(hop["mac"], hop_key + ("mac",), parse_mac) if "mac" in hop else None
                else:
                    port, mac = self.converted(hop, hop_key, parse_port), None
                if mac is None and port not in connected:
                    raise self.error(hop_key, f"port {port} of {switch} connects to no host or link; give its "
                                              f"next-hop MAC as {{port: {port}, mac: ...}}")
                hops.append(NextHopSpec(port, mac))
            out.append(StaticRoute(switch, prefix, tuple(hops)))
        return out


def _kind(value: Any) -> str:
    """What ``value`` is, in words, for error messages."""
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "nothing"}.get(type(value), type(value).__name__)


def _close(word: str, options: Iterable[str]) -> str | None:
    """The option ``word`` is most likely a misspelling of, if any."""
    matches = difflib.get_close_matches(word, list(options), n=1, cutoff=0.7)
    return matches[0] if matches else None


def loads(text: str, path: str | Path | None = None, base: Path | None = None) -> Network:
    """Parse and validate a network file's text; relative paths resolve against ``base`` (default: cwd)."""
    data, doc = compose(text, path)
    return _Checker(data, doc, base or Path.cwd()).network(Path(path) if path else None)


def load(path: str | Path) -> Network:
    """Read, parse and validate a network file."""
    file = Path(path)
    try:
        text = file.read_text()
    except OSError as e:
        raise NetFileError(file, "", None, f"cannot read: {e.strerror or e}") from None
    return loads(text, file, file.resolve().parent)

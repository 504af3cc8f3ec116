"""Network files, the value parsers: rates, delays, loss, MAC and IPv4 addresses, ``SWITCH:PORT``, layer ranges.

One of the four modules of network-file loading (see :mod:`controller.netfile_yaml`); the command line
(``dlcpctl``) and the testbed use the same parsers.  Each takes a plain YAML value and returns the parsed one,
or raises :class:`ValueError` whose message says what was expected; the validator adds the file, key and line.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

__all__ = ["MAX_PORT", "THRESHOLD_MAX", "LAYER_MAX", "parse_rate", "parse_delay", "parse_loss", "parse_mac",
           "format_mac", "parse_port_ref", "parse_port", "parse_ipv4", "parse_prefix", "parse_layer_range"]

MAX_PORT = 510  # 9-bit ports; 511 is the v1model drop port
THRESHOLD_MAX = (1 << 19) - 1  # registers are bit<19>
LAYER_MAX = 0xFFFF

def _scaled(value: Any, what: str, pattern: str, units: dict[str, float], examples: str) -> float:
    """A number as it is, or a string ``pattern`` matches as (number, unit), scaled by ``units[unit]``."""
    if isinstance(value, bool):
        raise ValueError(f"expected a {what}, got a boolean")
    if isinstance(value, (int, float)):
        return float(value)
    match = re.fullmatch(pattern, str(value))
    if not match:
        raise ValueError(f"invalid {what} {value!r} (examples: {examples})")
    return float(match.group(1)) * units[match.group(2).lower()]


_RATE_UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


def parse_rate(value: Any) -> float:
    """Bits per second from a number or a string like ``100Mbit``, ``1Gbps``, ``10M``, ``2.5g``."""
    rate = _scaled(value, "rate", r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([kKmMgGtT]?)(?:bit|bps|b/s)?\s*",
                   _RATE_UNITS, "100Mbit, 1Gbps, 5e8")
    if rate <= 0:
        raise ValueError(f"rate must be positive, got {value!r}")
    return rate


_DELAY_UNITS = {"us": 1, "µs": 1, "ms": 1000, "s": 1_000_000}


def parse_delay(value: Any) -> int:
    """Microseconds from a number (microseconds) or a string like ``250us``, ``1.5ms``, ``0.1s``."""
    delay = _scaled(value, "delay", r"\s*([0-9]*\.?[0-9]+)\s*(us|µs|ms|s)\s*", _DELAY_UNITS, "250us, 1.5ms, 0")
    if delay < 0:
        raise ValueError(f"delay must not be negative, got {value!r}")
    return int(round(delay))


def parse_loss(value: Any) -> float:
    """Loss probability from a fraction (``0.01``) or a percentage string (``1%``)."""
    if isinstance(value, bool):
        raise ValueError("expected a loss probability, got a boolean")
    if isinstance(value, str) and value.strip().endswith("%"):
        try:
            loss = float(value.strip()[:-1]) / 100
        except ValueError:
            raise ValueError(f"invalid loss {value!r}") from None
    elif isinstance(value, (int, float)):
        loss = float(value)
    else:
        raise ValueError(f"invalid loss {value!r} (examples: 0.01, 1%)")
    if not 0 <= loss <= 1:
        raise ValueError(f"loss must be within 0..1 (or 0%..100%), got {value!r}")
    return loss


def parse_mac(value: Any) -> int:
    """A MAC address ``aa:bb:cc:dd:ee:ff`` (or with dashes) as an integer."""
    if not isinstance(value, str):
        raise ValueError(f"expected a MAC address like '00:00:0a:00:00:01' (quoted), got {value!r}")
    if not re.fullmatch(r"([0-9a-fA-F]{1,2})([:-][0-9a-fA-F]{1,2}){5}", value.strip()):
        raise ValueError(f"invalid MAC address {value!r}")
    return int("".join(octet.zfill(2) for octet in re.split(r"[:-]", value.strip())), 16)


def format_mac(mac: int) -> str:
    """``aa:bb:cc:dd:ee:ff`` of a MAC address held as an integer."""
    return ":".join(f"{octet:02x}" for octet in mac.to_bytes(6, "big"))


def parse_port_ref(value: Any) -> tuple[str, int]:
    """``SWITCH:PORT`` as (switch, port)."""
    if not isinstance(value, str) or ":" not in value:
        raise ValueError(f"expected SWITCH:PORT (e.g. s1:3), got {value!r}")
    name, _, port = value.rpartition(":")
    if not name or not port.strip().isdigit():
        raise ValueError(f"expected SWITCH:PORT (e.g. s1:3), got {value!r}")
    return name.strip(), parse_port(int(port))


def parse_port(value: Any) -> int:
    """A switch port number, 0..:data:`MAX_PORT`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected a port number, got {value!r}")
    if not 0 <= value <= MAX_PORT:
        raise ValueError(f"port {value} out of range 0..{MAX_PORT}")
    return value


def parse_ipv4(value: Any) -> ipaddress.IPv4Address:
    """An IPv4 address written as a string."""
    if not isinstance(value, str):
        raise ValueError(f"expected an IPv4 address, got {value!r}")
    try:
        return ipaddress.IPv4Address(value)
    except ValueError:
        raise ValueError(f"invalid IPv4 address {value!r}") from None


def parse_prefix(value: Any) -> ipaddress.IPv4Network:
    """An IPv4 prefix ``A.B.C.D/LEN`` with no host bits set."""
    if not isinstance(value, str):
        raise ValueError(f"expected an IPv4 prefix like 10.1.0.0/16, got {value!r}")
    try:
        return ipaddress.IPv4Network(value, strict=True)
    except ValueError as e:
        raise ValueError(f"invalid IPv4 prefix {value!r}: {e}") from None


def parse_layer_range(value: Any) -> tuple[int, int]:
    """A DLCP layer or range of layers: ``N``, ``'LO-HI'`` or ``[LO, HI]``, as (LO, HI)."""
    if isinstance(value, bool):
        raise ValueError("expected a layer or range LO-HI")
    if isinstance(value, int):
        lo = hi = value
    elif isinstance(value, list) and len(value) == 2 and all(
            isinstance(x, int) and not isinstance(x, bool) for x in value):
        lo, hi = value
    elif isinstance(value, str) and re.fullmatch(r"\s*\d+\s*-\s*\d+\s*", value):
        lo, hi = (int(x) for x in value.split("-"))
    else:
        raise ValueError(f"expected a layer N, a range 'LO-HI' or [LO, HI], got {value!r}")
    if not 0 <= lo <= hi <= LAYER_MAX:
        raise ValueError(f"layer range {lo}-{hi} must satisfy 0 <= LO <= HI <= {LAYER_MAX}")
    return lo, hi

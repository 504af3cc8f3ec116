"""Classic pcap files (readable by scapy, tcpdump and tshark), one per switch port and direction.

``PcapDir(d)`` writes ``d/port<N>_<ifname>_in.pcap`` (frames received on the port) and ``..._out.pcap`` (frames
sent), created on first use.  Microsecond timestamps, LINKTYPE_ETHERNET, snap length 65535 (longer frames are
truncated in the file and recorded with their original length).  Writes are buffered; :meth:`PcapDir.flush`
(called by the daemon when idle and at exit) pushes them to disk.
"""
from __future__ import annotations

import struct
import time
from pathlib import Path
from typing import BinaryIO

MAGIC_US = 0xA1B2C3D4
LINKTYPE_ETHERNET = 1
SNAPLEN = 65535
_GLOBAL = struct.pack("<IHHiIII", MAGIC_US, 2, 4, 0, 0, SNAPLEN, LINKTYPE_ETHERNET)
_REC = struct.Struct("<IIII")


class PcapWriter:
    """One pcap file."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._f: BinaryIO = open(self.path, "wb", buffering=1 << 16)
        self._f.write(_GLOBAL)
        self.count = 0

    def write(self, data: bytes, t_ns: int | None = None) -> None:
        if t_ns is None:
            t_ns = time.time_ns()
        sec, us = divmod(t_ns // 1000, 1_000_000)
        cap = data[:SNAPLEN]
        self._f.write(_REC.pack(sec, us, len(cap), len(data)))
        self._f.write(cap)
        self.count += 1

    def flush(self) -> None:
        self._f.flush()

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()


def safe_name(s: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in s)


class PcapDir:
    """Per (port, direction) writers in one directory."""

    def __init__(self, directory: str | Path, names: dict[int, str] | None = None):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.names = dict(names or {})
        self._w: dict[tuple[int, str], PcapWriter] = {}

    def path(self, port: int, direction: str) -> Path:
        name = self.names.get(port)
        base = f"port{port}_{safe_name(name)}" if name else f"port{port}"
        return self.dir / f"{base}_{direction}.pcap"

    def writer(self, port: int, direction: str) -> PcapWriter:
        w = self._w.get((port, direction))
        if w is None:
            w = self._w[(port, direction)] = PcapWriter(self.path(port, direction))
        return w

    def rx(self, port: int, data: bytes, t_ns: int | None = None) -> None:
        self.writer(port, "in").write(data, t_ns)

    def tx(self, port: int, data: bytes, t_ns: int | None = None) -> None:
        self.writer(port, "out").write(data, t_ns)

    def flush(self) -> None:
        for w in self._w.values():
            w.flush()

    def close(self) -> None:
        for w in self._w.values():
            w.close()

"""Traffic tool run inside a test namespace (``ip netns exec NS python netns_tool.py CMD ...``) by
tests/switch/test_daemon.py and bench/switch_pps.py.  Prints one JSON document on stdout.

    recv PORT[,PORT..] COUNT TIMEOUT      UDP receiver: [[port, payload, ttl], ...] in arrival order
    send DST PORT COUNT [PREFIX]          UDP sender: COUNT datagrams "PREFIX-<i>" (TTL 64)
    burst DST PORT1 N1 PORT2 N2           N1 datagrams to PORT1 then N2 to PORT2, back to back ("b<port>-<i>")
    raw IFNAME HEX [COUNT]                one Ethernet frame (hex) COUNT times through an AF_PACKET socket
    garbage IFNAME COUNT SEED             COUNT random frames of 14..300 bytes (seeded)
    flood DST PORT SECONDS SIZE [N STEP]  UDP as fast as possible for SECONDS: {"sent": n}; with N, to the N
                                          addresses DST, DST+STEP, ... in turn
    sink PORT SECONDS                     count UDP datagrams until SECONDS of silence after the first: {"n", "t"}
"""
from __future__ import annotations

import ipaddress
import json
import random
import selectors
import socket
import sys
import time

IP_RECVTTL = 12
IP_TTL = 2


def recv(ports: str, count: int, timeout: float) -> list:
    sel = selectors.DefaultSelector()
    socks = []
    for p in ports.split(","):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.IPPROTO_IP, IP_RECVTTL, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
        s.bind(("0.0.0.0", int(p)))
        sel.register(s, selectors.EVENT_READ, int(p))
        socks.append(s)
    print("ready", file=sys.stderr, flush=True)
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        for key, _ in sel.select(max(0.0, deadline - time.monotonic())):
            data, anc, _flags, _addr = key.fileobj.recvmsg(65536, socket.CMSG_SPACE(4))
            ttl = next((int.from_bytes(d[:4], sys.byteorder) for lvl, typ, d in anc
                        if lvl == socket.IPPROTO_IP and typ == IP_TTL), -1)
            out.append([key.data, data.decode(errors="replace"), ttl])
    return out


def send(dst: str, port: int, count: int, prefix: str = "p") -> dict:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for i in range(count):
        s.sendto(f"{prefix}-{i}".encode(), (dst, port))
    return {"sent": count}


def burst(dst: str, p1: int, n1: int, p2: int, n2: int) -> dict:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for port, n in ((p1, n1), (p2, n2)):
        for i in range(n):
            s.sendto(f"b{port}-{i}".encode(), (dst, port))
    return {"sent": n1 + n2}


def raw(ifname: str, frame_hex: str, count: int = 1) -> dict:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((ifname, 0))
    for _ in range(count):
        s.send(bytes.fromhex(frame_hex))
    return {"sent": count}


def garbage(ifname: str, count: int, seed: int) -> dict:
    rng = random.Random(seed)
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((ifname, 0))
    n = 0
    for _ in range(count):
        try:
            s.send(bytes(rng.getrandbits(8) for _ in range(rng.randint(14, 300))))
            n += 1
        except OSError:
            pass
    return {"sent": n}


def flood(dst: str, port: int, seconds: float, size: int, count: int = 1, step: int = 1) -> dict:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    payload = b"f" * size
    base = int(ipaddress.IPv4Address(dst))
    dests = [(str(ipaddress.IPv4Address(base + i * step)), port) for i in range(count)]
    n = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(64):
            try:
                s.sendto(payload, dests[n % count])
                n += 1
            except OSError:
                pass
    return {"sent": n}


def sink(port: int, silence: float) -> dict:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 23)
    s.bind(("0.0.0.0", port))
    print("ready", file=sys.stderr, flush=True)
    s.settimeout(30.0)
    n, t0, t1 = 0, None, None
    try:
        while True:
            s.recv(65536)
            t1 = time.monotonic()
            if t0 is None:
                t0 = t1
                s.settimeout(silence)
            n += 1
    except socket.timeout:
        pass
    return {"n": n, "t": (t1 - t0) if t0 is not None and t1 is not None else 0.0}


def main(argv: list[str]) -> None:
    cmd, args = argv[0], argv[1:]
    if cmd == "recv":
        res = recv(args[0], int(args[1]), float(args[2]))
    elif cmd == "send":
        res = send(args[0], int(args[1]), int(args[2]), *(args[3:4]))
    elif cmd == "burst":
        res = burst(args[0], *map(int, args[1:5]))
    elif cmd == "raw":
        res = raw(args[0], args[1], int(args[2]) if len(args) > 2 else 1)
    elif cmd == "garbage":
        res = garbage(args[0], int(args[1]), int(args[2]))
    elif cmd == "flood":
        res = flood(args[0], int(args[1]), float(args[2]), int(args[3]), *map(int, args[4:6]))
    elif cmd == "sink":
        res = sink(int(args[0]), float(args[1]))
    else:
        raise SystemExit(f"unknown command {cmd}")
    print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

"""Traffic agent run inside a test namespace (``ip netns exec NS python ns_agent.py CMD ...``) by the switch fuzz
campaign (``tests/fuzz/switch_fuzz.py``). Binary-safe, line-oriented on stdin/stdout, so one process serves a
whole campaign.

    inject IFNAME      reads lines of hex Ethernet frames from stdin, sends each through an AF_PACKET socket on
                       IFNAME; an empty line is a barrier, answered "ok <sent> <refused>" (since the last one) on stdout
    udp DST PORT       reads lines of hex payloads, sends each as a UDP datagram to DST:PORT (the kernel builds the
                       frame: the genuine traffic); barrier as above
    recv PORT          binds UDP PORT; prints "ready", then each datagram as a line of hex; on stdin EOF exits
"""
from __future__ import annotations

import socket
import sys
import threading


def _serve(send) -> None:
    sent = refused = 0
    for line in sys.stdin:
        line = line.strip()
        if not line:
            print(f"ok {sent} {refused}", flush=True)
            sent = refused = 0
            continue
        try:
            send(bytes.fromhex(line))
            sent += 1
        except OSError:  # (a frame the kernel refuses: too short, too long)
            refused += 1
    print(f"ok {sent} {refused}", flush=True)


def inject(ifname: str) -> None:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((ifname, 0))
    _serve(s.send)


def udp(dst: str, port: str) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    _serve(lambda b: s.sendto(b, (dst, int(port))))


def recv(port: str) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
    s.bind(("0.0.0.0", int(port)))
    s.settimeout(0.2)
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    print("ready", flush=True)
    while not done.is_set():
        try:
            data = s.recv(65536)
        except socket.timeout:
            continue
        print(data.hex(), flush=True)


if __name__ == "__main__":
    cmd, *args = sys.argv[1:]
    {"inject": inject, "udp": udp, "recv": recv}[cmd](*args)

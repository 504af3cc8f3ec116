"""A second P4Runtime client, p4runtime-shell 0.0.6 from PyPI, driving a ``dlcp-switch`` as its users would.

Run by tests/controller/test_p4runtime_shell.py with the Python of its own virtual environment
(``build/p4runtime-shell``, made by scripts/p4runtime-shell-venv.sh: p4runtime-shell pins protobuf < 3.21, which
the project's .venv cannot hold). Only p4runtime_sh and the standard library are imported here. Each step prints
one JSON line ``{"step": ..., ...}``; the test checks them and what the switch did.

Steps: the default device id (1) against a switch that is device 0 (the error must say what to do); the pipeline
pushed as docs/switch-daemon.md says any client can (P4Info from ``python -m switch.compile``, the P4 source as
the device config); a route written with the shell's TableEntry; PacketOut out of a port as is and routed;
PacketIn with its ingress_port; then the shell stays primary until stdin closes (the test runs dlcpctl meanwhile).
"""

from __future__ import annotations

import argparse
import json
import logging
import socket
import sys
import threading
import time

ETH_P_ALL = 0x0003


def say(step: str, **kw) -> None:
    print(json.dumps({"step": step, **kw}), flush=True)


def frame(dst_mac: bytes, src_mac: bytes, src_ip: bytes, dst_ip: bytes, marker: bytes, ttl: int = 9) -> bytes:
    """Ethernet + IPv4 (checksum computed) + UDP (no checksum) + marker, with the standard library only."""
    udp = (7000).to_bytes(2, "big") + (7001).to_bytes(2, "big") + (8 + len(marker)).to_bytes(2, "big") + b"\0\0"
    total = 20 + len(udp) + len(marker)
    header = bytearray(b"\x45\x00" + total.to_bytes(2, "big") + b"\0\0\0\0" + bytes([ttl, 17]) + b"\0\0"
                       + src_ip + dst_ip)
    csum = sum(int.from_bytes(header[i:i + 2], "big") for i in range(0, 20, 2))
    while csum >> 16:
        csum = (csum & 0xFFFF) + (csum >> 16)
    header[10:12] = (~csum & 0xFFFF).to_bytes(2, "big")
    return dst_mac + src_mac + b"\x08\x00" + bytes(header) + udp + marker


def send_and_capture(ifname: str, marker: bytes, send) -> bytes | None:
    """Listen on ``ifname`` first, then call ``send()``: the frame cannot leave before the socket is bound."""
    got: list[bytes | None] = []
    ready = threading.Event()

    def listen() -> None:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        s.bind((ifname, 0))
        s.settimeout(0.2)
        ready.set()
        deadline = time.monotonic() + 20
        try:
            while time.monotonic() < deadline:
                try:
                    data = s.recv(65535)
                except socket.timeout:
                    continue
                if marker in data:
                    got.append(data)
                    return
            got.append(None)
        finally:
            s.close()

    t = threading.Thread(target=listen)
    t.start()
    ready.wait(5)
    send()
    t.join(25)
    return got[0] if got else None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--addr", required=True)
    ap.add_argument("--p4info", required=True)
    ap.add_argument("--program", required=True)
    ap.add_argument("--host-if", required=True, help="host side of the veth on switch port 1")
    args = ap.parse_args()
    logging.basicConfig(level=logging.CRITICAL, stream=sys.stderr)

    import p4runtime_sh.shell as sh
    from p4runtime_sh.p4runtime import P4RuntimeClient

    # 1. p4runtime-shell's default device id is 1; the switch is device 0 (BMv2's default)
    messages: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    logging.getLogger().addHandler(Keep())
    try:
        P4RuntimeClient(1, args.addr, (0, 1)).tear_down()
        say("device_id_1", ok=True, messages=messages)
    except SystemExit:
        say("device_id_1", ok=False, messages=messages)
    messages.clear()

    # 2. push the pipeline: P4Info from `python -m switch.compile`, the P4 source as the device config
    sh.setup(device_id=0, grpc_addr=args.addr, election_id=(0, 1),
             config=sh.FwdPipeConfig(args.p4info, args.program), verbose=False)
    say("pipeline")

    # 3. a route to host 10.0.0.1 out of port 1, written with the shell's TableEntry
    te = sh.TableEntry("DlcpIngress.ipv4_lpm")(action="DlcpIngress.set_nhop")
    te.match["meta.dst_addr"] = "10.0.0.1/32"
    te.action["dmac"] = "02:00:00:00:00:0a"
    te.action["smac"] = "02:dc:00:00:00:01"
    te.action["port"] = "1"
    te.action["nhop_id"] = "1"
    te.insert()
    route_to_cpu = sh.TableEntry("DlcpIngress.ipv4_lpm")(action="DlcpIngress.set_nhop")
    route_to_cpu.match["meta.dst_addr"] = "10.9.9.9/32"
    route_to_cpu.action["dmac"] = "02:00:00:00:00:ff"
    route_to_cpu.action["smac"] = "02:dc:00:00:00:ff"
    route_to_cpu.action["port"] = "255"
    route_to_cpu.action["nhop_id"] = "255"
    route_to_cpu.insert()
    say("entries", ipv4_lpm=sum(1 for _ in sh.TableEntry("DlcpIngress.ipv4_lpm").read()))

    mac_a, mac_b = bytes.fromhex("020000000077"), bytes.fromhex("020000000078")
    ip_src, ip_host = socket.inet_aton("10.0.0.2"), socket.inet_aton("10.0.0.1")

    # 4. PacketOut out of port 1 as it is (egress_port, do_forwarding 0), and routed (do_forwarding 1)
    direct = frame(mac_a, mac_b, ip_src, ip_host, b"p4sh-direct")
    got = send_and_capture(args.host_if, b"p4sh-direct",
                           lambda: sh.PacketOut(payload=direct, egress_port="1", do_forwarding="0").send())
    say("packet_out_direct", sent=direct.hex(), got=got.hex() if got else None)
    routed = frame(mac_a, mac_b, ip_src, ip_host, b"p4sh-routed")
    got = send_and_capture(args.host_if, b"p4sh-routed",
                           lambda: sh.PacketOut(payload=routed, egress_port="0", do_forwarding="1").send())
    say("packet_out_routed", sent=routed.hex(), got=got.hex() if got else None)

    # 5. PacketIn: frames to 10.9.9.9 arriving on port 1 go to the CPU port
    inbound = frame(bytes.fromhex("02dc00000001"), bytes.fromhex("02000000000a"), ip_host,
                    socket.inet_aton("10.9.9.9"), b"p4sh-packet-in")
    stop = threading.Event()

    def keep_sending() -> None:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        s.bind((args.host_if, 0))
        while not stop.is_set():
            s.send(inbound)
            time.sleep(0.2)
        s.close()

    sender = threading.Thread(target=keep_sending)
    sender.start()
    packet_in = sh.PacketIn()
    found = None
    for msg in packet_in.sniff(timeout=5):
        if b"p4sh-packet-in" in msg.packet.payload:
            found = msg.packet
            break
    stop.set()
    sender.join()
    say("packet_in", payload=found.payload.hex() if found else None,
        metadata={m.metadata_id: int.from_bytes(m.value, "big") for m in found.metadata} if found else None)

    # 6. stay primary while the test runs dlcpctl; then: did the switch tell the shell of any change of primary
    # (an arbitration update), and can it still write?
    say("holding")
    sys.stdin.read()
    updates = []
    while (msg := sh.client.get_stream_packet("arbitration", timeout=0.5)) is not None:
        updates.append(msg.arbitration.status.code)
    te = sh.TableEntry("DlcpIngress.ipv4_lpm")(action="DlcpIngress.no_route")
    te.match["meta.dst_addr"] = "10.7.0.0/16"
    try:
        te.insert()
        wrote = True
    except Exception as e:  # noqa: BLE001 - the test reports what failed
        wrote = f"{type(e).__name__}: {e}"
    say("done", arbitration_updates=updates, write=wrote)
    sh.teardown()
    return 0


if __name__ == "__main__":
    sys.exit(main())

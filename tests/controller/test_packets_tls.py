"""PacketOut/PacketIn through a switch daemon on a real veth interface, and the controller over TLS."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from controller import Network
from controller.netfile import format_mac
from testbed.netns import add_veth, disable_ipv6, run

from .conftest import dlcpctl, start_daemon

ETH_P_ALL = 0x0003


@pytest.fixture
def veth(root_required):
    """A veth pair in the root namespace: (switch side, host side), IPv6 off so the kernel stays quiet."""
    a, b = f"dcx{os.getpid() % 100000}a", f"dcx{os.getpid() % 100000}b"
    add_veth(a, b)
    try:
        for n in (a, b):
            disable_ipv6(dev=n)
            run("ip", "link", "set", n, "up")
        yield a, b
    finally:
        run("ip", "link", "del", a, check=False)


def raw_socket(ifname: str) -> socket.socket:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.bind((ifname, 0))
    s.settimeout(0.2)
    return s


def receive(s: socket.socket, marker: bytes, timeout: float = 20.0) -> bytes:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            data = s.recv(65535)
        except socket.timeout:
            continue
        if marker in data:
            return data
    pytest.fail(f"no frame with {marker!r} within {timeout} s")


@pytest.mark.slow
@pytest.mark.netns
def test_packet_out_and_packet_in_on_an_interface(veth, tmp_path: Path) -> None:
    sw_side, host_side = veth
    d = start_daemon("s1", "-i", f"1@{sw_side}")
    try:
        host_mac = "02:00:00:00:00:0b"
        (tmp_path / "n.yaml").write_text(f"""\
switches:
  s1: {{address: {d.address}, cpu_port: 255}}
hosts:
  h1: {{ip: 10.0.0.1, mac: "{host_mac}", attach: s1:1}}
  h2: {{ip: 10.0.0.2, mac: "02:00:00:00:00:0c", attach: s1:2}}
""")
        net = Network.from_file(tmp_path / "n.yaml")
        net.apply()
        sock = raw_socket(host_side)
        try:
            # PacketOut: routed like any packet entering on the CPU port, out of port 1 with the rewrites
            out = bytes(Ether(dst="02:00:00:00:00:01", src="02:00:00:00:00:0c") / IP(src="10.0.0.2", dst="10.0.0.1",
                                                                                   ttl=9)
                        / UDP(sport=5, dport=6) / b"packet-out-marker")
            r = dlcpctl("-n", str(tmp_path / "n.yaml"), "packet-out", "--hex", out.hex())
            assert r.returncode == 0, r.stderr
            got = Ether(receive(sock, b"packet-out-marker"))
            assert got.dst == host_mac and got.src == net.router_mac("s1", 1) and got[IP].ttl == 8

            # PacketOut with dlcp.p4's packet_out header: egress_port and do_forwarding=0 send the frame out of
            # that port as it is (no routing: MACs and TTL unchanged)
            direct = bytes(Ether(dst="02:00:00:00:00:aa", src="02:00:00:00:00:bb") / IP(src="10.0.0.2", dst="10.0.0.1",
                                                                                       ttl=9)
                           / UDP(sport=5, dport=6) / b"direct-out-marker")
            r = dlcpctl("-n", str(tmp_path / "n.yaml"), "packet-out", "--hex", direct.hex(), "--meta", "egress_port=1")
            assert r.returncode == 0, r.stderr
            assert receive(sock, b"direct-out-marker") == direct
            r = dlcpctl("-n", str(tmp_path / "n.yaml"), "packet-out", "--hex", direct.hex(), "--meta", "port=1")
            assert r.returncode == 2 and "no field port (its fields: egress_port, do_forwarding, _pad)" in r.stderr

            # PacketIn: a route towards the CPU port; a frame arriving on port 1 reaches the controller
            cpu_mac = "02:00:00:00:00:ff"
            r = dlcpctl("-n", str(tmp_path / "n.yaml"), "route", "add", "10.9.9.9", "--via", f"255@{cpu_mac}")
            assert r.returncode == 0, r.stderr
            env = dict(os.environ, COLUMNS="200")
            proc = subprocess.Popen([sys.executable, "-m", "controller.cli", "-n", str(tmp_path / "n.yaml"),
                                     "packet-in", "--count", "1", "--timeout", "30", "--json"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                    cwd=Path(__file__).resolve().parents[2])
            inbound = bytes(Ether(dst=net.router_mac("s1", 1), src=host_mac) / IP(src="10.0.0.1", dst="10.9.9.9")
                            / UDP(sport=7, dport=8) / b"packet-in-marker")
            deadline = time.monotonic() + 40
            while proc.poll() is None and time.monotonic() < deadline:
                sock.send(inbound)  # until the listener (which subscribes after connecting) has one
                time.sleep(0.3)
            stdout, stderr = proc.communicate(timeout=30)
            assert proc.returncode == 0, stderr
            pkt = json.loads(stdout.splitlines()[0])
            payload = bytes.fromhex(pkt["payload"])
            assert b"packet-in-marker" in payload
            assert Ether(payload).dst == cpu_mac and Ether(payload)[IP].dst == "10.9.9.9"
            assert pkt["metadata"]["ingress_port"] == 1  # dlcp.p4's packet_in header: where the frame came in
        finally:
            sock.close()
    finally:
        d.stop()


@pytest.mark.slow
def test_tls(tmp_path: Path) -> None:
    """A switch serving TLS: apply and show work with the file's CA; without TLS the switch is unreachable."""
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(tmp_path / "key.pem"),
                    "-out", str(tmp_path / "cert.pem"), "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"], check=True, capture_output=True,
                   timeout=60)
    d = start_daemon("tls", "--grpc-tls-cert", str(tmp_path / "cert.pem"), "--grpc-tls-key", str(tmp_path / "key.pem"))
    try:
        hosts = 'hosts:\n  h1: {ip: 10.0.0.1, mac: "02:00:00:00:00:01", attach: s1:1, queue_depth: 9}\n'
        (tmp_path / "tls.yaml").write_text(f"switches:\n  s1: {{address: {d.address}, tls: {{ca: cert.pem}}}}\n"
                                           + hosts)
        res = Network.from_file(tmp_path / "tls.yaml").apply()
        assert res.switches["s1"].pipeline_pushed and res.switches["s1"].inserts > 0
        st = Network.from_file(tmp_path / "tls.yaml").stats()["s1"]
        assert st.tm.ports[1].queues[0].capacity == 9  # the management service over TLS too
        (tmp_path / "plain.yaml").write_text(f"connect_timeout: 2\nswitches:\n  s1: {{address: {d.address}}}\n"
                                             + hosts)
        r = dlcpctl("apply", str(tmp_path / "plain.yaml"))
        assert r.returncode == 4 and f"switch s1 at {d.address} unreachable" in r.stderr, r.stderr
    finally:
        d.stop()


def test_router_mac_is_stable() -> None:
    net = Network.from_text("switches:\n  s1: {address: 127.0.0.1:1}\n")
    assert net.router_mac("s1", 3) == format_mac(net.spec.switches["s1"].mac_base | 3)
    assert net.router_mac("s1", 3).startswith("02:dc:")

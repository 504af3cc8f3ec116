"""Mininet node classes: switches that run the DLCP P4 program, and hosts fit for measurements.

* :class:`DlcpSwitch`: the embedded target, ``dlcp-switch`` (this project), one process per switch in the root
  namespace with AF_PACKET sockets on its ``sX-ethN`` interfaces, P4Runtime on ``127.0.0.1:<grpc_port>``.
* :class:`Bmv2Switch`: BMv2 ``simple_switch_grpc`` for users who have it; the same command-line convention
  (``-i <port>@<intf>``, ``--device-id``, ``--grpc-server-addr``, ``--priority-queues``). Without the binary on
  PATH, construction fails with :class:`MissingBinary` naming it.
* :class:`DlcpHost`: checksum and segmentation offloads off (frames seen on raw sockets would otherwise carry
  partial checksums and 64 KB super-frames), IPv6 off (no stray router solicitations in the measurements).

Both switch classes start with no pipeline (BMv2's ``--no-p4``); the controller pushes the program and its
entries over P4Runtime, exactly as it would to a hardware switch.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from mininet.node import Host, Switch

__all__ = ["DlcpSwitch", "Bmv2Switch", "DlcpHost", "MissingBinary", "SwitchStartError"]


class MissingBinary(RuntimeError):
    """A switch program is not installed; the message names it and what provides it."""


class SwitchStartError(RuntimeError):
    """A switch process exited or never listened; the message carries the end of its log."""


def _wait_listening(port: int, proc: subprocess.Popen, log: Path, timeout: float, what: str,
                    ready: str | None = None) -> None:
    """Wait until ``proc`` listens on ``port``. A connection alone does not prove the listener is ``proc`` (another
    process may hold the port), so with ``ready`` the process's own log must also say so: the switch is not
    accepted until that line appears while it is alive."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SwitchStartError(f"{what} exited with status {proc.returncode}:\n{_tail(log)}")
        if ready is not None and ready not in _tail(log, 200):
            time.sleep(0.05)
            continue
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                if proc.poll() is None:
                    return
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SwitchStartError(f"{what} did not listen on 127.0.0.1:{port} within {timeout:.0f} s:\n{_tail(log)}")


def _tail(log: Path, n: int = 20) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


class _P4Switch(Switch):
    """Common part: one switch process with ``-i port@intf`` arguments and a P4Runtime port."""

    binary = ""

    def __init__(self, name: str, grpc_port: int = 9559, device_id: int = 0, log_dir: str = "/tmp/dlcp-testbed",
                 priority_queues: int = 8, pcap_dir: str | None = None, start_timeout: float = 20.0,
                 mtu: int = 1500, **params):
        super().__init__(name, **params)
        self.grpc_port = grpc_port
        self.device_id = device_id
        self.log_dir = Path(log_dir)
        self.priority_queues = priority_queues
        self.pcap_dir = pcap_dir
        self.start_timeout = start_timeout
        self.mtu = mtu
        self.proc: subprocess.Popen | None = None
        self.log_path = self.log_dir / f"{name}.log"

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def port_map(self) -> dict[int, str]:
        """Switch port number -> interface name, as Mininet numbered them (``sX-ethN`` is port N)."""
        return {port: intf.name for port, intf in self.intfs.items() if intf.name != "lo"}

    def command(self) -> list[str]:
        raise NotImplementedError

    def ready_line(self) -> str | None:
        """What the switch process writes to its log once it listens (None: the port alone is trusted)."""
        return None

    def start(self, controllers) -> None:  # noqa: ARG002  (P4 switches have no OpenFlow controller)
        for intf in self.intfs.values():
            if intf.name != "lo":
                # Same reason as DlcpHost: the switch sees frames as the wire would carry them. The MTU is set
                # before the switch opens its sockets (changing it later resets them).
                subprocess.run(["ethtool", "-K", intf.name, "rx", "off", "tx", "off", "sg", "off", "tso", "off",
                                "gso", "off", "gro", "off"], capture_output=True)
                subprocess.run(["ip", "link", "set", "dev", intf.name, "mtu", str(self.mtu)], check=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        cmd = self.command()
        with open(self.log_path, "wb") as log:
            log.write((" ".join(cmd) + "\n").encode())
            log.flush()
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        _wait_listening(self.grpc_port, self.proc, self.log_path, self.start_timeout, f"{self.name} ({cmd[0]})",
                        self.ready_line())

    def stop(self, deleteIntfs: bool = True) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        super().stop(deleteIntfs)


class DlcpSwitch(_P4Switch):
    """The embedded P4 target (``dlcp-switch``) as a Mininet switch."""

    def ready_line(self) -> str:
        return f"dlcp-switch: listening on {self.grpc_address}"

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "switch.daemon"]
        for port, intf in sorted(self.port_map().items()):
            cmd += ["-i", f"{port}@{intf}"]
        cmd += ["--device-id", str(self.device_id), "--grpc-server-addr", self.grpc_address,
                "--priority-queues", str(self.priority_queues), "--log-level", "warning"]
        if self.pcap_dir:
            cmd += ["--pcap", self.pcap_dir]
        return cmd


class Bmv2Switch(_P4Switch):
    """BMv2 ``simple_switch_grpc`` (needs the binary on PATH; queue settings go through ``simple_switch_CLI``)."""

    binary = "simple_switch_grpc"

    def __init__(self, name: str, **params):
        if shutil.which(self.binary) is None:
            raise MissingBinary(
                f"switch {name}: BMv2's {self.binary} is not on PATH (install behavioral-model from p4lang, or use "
                f"`switch: embedded` in the run spec for dlcp's own target)")
        super().__init__(name, **params)
        from .netfile import BMV2_THRIFT_BASE

        self.thrift_port = BMV2_THRIFT_BASE + self.device_id  # what the network file names

    def command(self) -> list[str]:
        cmd = [self.binary, "--device-id", str(self.device_id), "--thrift-port", str(self.thrift_port),
               "--log-file", str(self.log_dir / f"{self.name}-bmv2")]
        for port, intf in sorted(self.port_map().items()):
            cmd += ["-i", f"{port}@{intf}"]
        if self.pcap_dir:
            cmd += ["--pcap", self.pcap_dir]
        # Target options (after `--`): the P4Runtime address and the number of priority queues per port.
        cmd += ["--no-p4", "--", "--grpc-server-addr", self.grpc_address,
                "--priority-queues", str(self.priority_queues)]
        return cmd


class DlcpHost(Host):
    """A host with offloads and IPv6 off, and the run's MTU."""

    def config(self, mtu: int = 1500, **params):
        r = super().config(**params)
        for intf in self.intfList():
            if intf.name != "lo":
                self.cmd(f"ethtool -K {intf.name} rx off tx off sg off tso off gso off gro off")
                self.cmd(f"ip link set dev {intf.name} mtu {mtu}")
        self.cmd("sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 "
                 "net.ipv6.conf.lo.disable_ipv6=1")
        return r

"""Traffic-manager management of the switch daemon: the ``dlcp.switch.mgmt.v1.SwitchManagement`` gRPC service
(switch/daemon/mgmt.proto; served next to P4Runtime on the same port) and its Python client.

P4Runtime has no queue or link settings and no parameters for custom CRCs (BMv2 uses its Thrift CLI:
``set_queue_depth``, ``set_queue_rate``, ``set_crc16_parameters``, ``set_crc32_parameters``), so a controller
sets them here::

    with MgmtClient("127.0.0.1:9559") as m:
        m.set_queue(3, 7, depth=128, rate_pps=10_000)      # port 3, priority 7
        m.set_link(3, delay_us=200, loss=0.01)
        st = m.stats()                                       # SwitchStats
        st.ports[3].queues[7].peak_depth, st.drops, st.writes
        m.crc_calculations()                                 # [CrcCalculation(name="calc_0", width=32, ...)]
        m.set_crc32_parameters("calc_0", 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, True, True)    # CRC-32C

Errors raise :class:`MgmtError` carrying the gRPC status code and the server's message.  The service is open
to whoever can reach the server (loopback by default, TLS when configured): it does not take part in P4Runtime
arbitration.
"""
from __future__ import annotations

from dataclasses import dataclass

import grpc

from ..errors import SwitchError
from . import mgmt_pb2 as pb
from . import mgmt_pb2_grpc as pb_grpc
from .device import CrcCalculation, Device, PortStats, QueueStats, SwitchStats

__all__ = ["CrcCalculation", "MgmtClient", "MgmtError", "MgmtService", "QueueDefaults", "SwitchStats", "PortStats",
           "QueueStats"]


class MgmtService(pb_grpc.SwitchManagementServicer):
    """Server side: translates requests to :class:`~switch.daemon.device.Device` calls."""

    def __init__(self, device: Device):
        self.device = device

    def _dev(self, device_id: int, context) -> Device:
        if device_id != self.device.device_id:
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown device id {device_id} (this switch is device "
                                                     f"{self.device.device_id})")
        return self.device

    def SetQueue(self, request, context):
        dev = self._dev(request.device_id, context)
        try:
            dev.set_queue(request.port, request.priority if request.HasField("priority") else None,
                          depth=request.depth if request.HasField("depth") else None,
                          rate_pps=request.rate_pps if request.HasField("rate_pps") else None)
        except SwitchError as e:
            context.abort(getattr(grpc.StatusCode, e.code, grpc.StatusCode.UNKNOWN), e.message)
        return pb.SetQueueResponse()

    def SetLink(self, request, context):
        dev = self._dev(request.device_id, context)
        try:
            dev.set_link(request.port, rate_bps=request.rate_bps if request.HasField("rate_bps") else None,
                         delay_us=request.delay_us if request.HasField("delay_us") else None,
                         loss=request.loss if request.HasField("loss") else None)
        except SwitchError as e:
            context.abort(getattr(grpc.StatusCode, e.code, grpc.StatusCode.UNKNOWN), e.message)
        return pb.SetLinkResponse()

    def SetCrcParameters(self, request, context):
        dev = self._dev(request.device_id, context)
        c = request.parameters
        try:
            dev.set_crc_parameters(request.name, request.width, c.polynomial, c.initial_remainder,
                                   c.final_xor_value, c.reflect_data, c.reflect_remainder)
        except SwitchError as e:
            context.abort(getattr(grpc.StatusCode, e.code, grpc.StatusCode.UNKNOWN), e.message)
        return pb.SetCrcParametersResponse()

    def GetCrcCalculations(self, request, context):
        dev = self._dev(request.device_id, context)
        r = pb.GetCrcCalculationsResponse()
        for c in dev.crc_calculations():
            r.calculations.add(name=c.name, width=c.width, location=c.location, parameters=pb.CrcParameters(
                polynomial=c.polynomial, initial_remainder=c.initial_remainder, final_xor_value=c.final_xor_value,
                reflect_data=c.reflect_data, reflect_remainder=c.reflect_remainder))
        return r

    def GetStats(self, request, context):
        dev = self._dev(request.device_id, context)
        r = stats_to_proto(dev.stats())
        with dev.lock:
            r.default_queue_depth = dev.settings.queue_depth
            r.default_queue_rate_pps = dev.settings.queue_rate_pps
        return r


def stats_to_proto(st: SwitchStats) -> pb.GetStatsResponse:
    r = pb.GetStatsResponse(writes=st.writes, write_updates=st.write_updates, packet_errors=st.packet_errors)
    for port, ps in sorted(st.ports.items()):
        p = r.ports.add(port=port, rx_packets=ps.rx_packets, tx_packets=ps.tx_packets, rate_bps=ps.rate_bps,
                        delay_us=ps.delay_us, loss=ps.loss,
                        last_src_mac=bytes.fromhex(ps.last_src_mac.replace(":", "")) if ps.last_src_mac else b"")
        for prio, q in sorted(ps.queues.items()):
            p.queues.add(priority=prio, depth=q.depth, peak_depth=q.peak_depth, capacity=q.capacity,
                         rate_pps=q.rate_pps, enq_packets=q.enq_packets, deq_packets=q.deq_packets)
    for (port, prio, reason), n in sorted(st.drops.items()):
        r.drops.add(port=port, priority=prio, reason=reason, count=n)
    return r


def stats_from_proto(r: pb.GetStatsResponse) -> SwitchStats:
    st = SwitchStats(writes=r.writes, write_updates=r.write_updates, packet_errors=r.packet_errors)
    for p in r.ports:
        st.ports[p.port] = PortStats(p.rx_packets, p.tx_packets, {
            q.priority: QueueStats(q.depth, q.peak_depth, q.capacity, q.rate_pps, q.enq_packets, q.deq_packets)
            for q in p.queues},
            p.rate_bps if p.HasField("rate_bps") else None, p.delay_us if p.HasField("delay_us") else None,
            p.loss if p.HasField("loss") else None,
            ":".join(f"{b:02x}" for b in p.last_src_mac) if p.last_src_mac else None)
    st.drops = {(d.port, d.priority, d.reason): d.count for d in r.drops}
    return st


@dataclass(frozen=True)
class QueueDefaults:
    """Capacity (packets) and rate (packets/s, 0 = unlimited) of a queue nothing has set."""

    depth: int
    rate_pps: float


class MgmtError(RuntimeError):
    """A management call failed: ``code`` is the ``grpc.StatusCode``, ``details`` the server's message."""

    def __init__(self, method: str, code: grpc.StatusCode, details: str):
        self.method, self.code, self.details = method, code, details
        super().__init__(f"{method}: {code.name}: {details}")


class MgmtClient:
    """Client of the management service of one switch (``address`` = the daemon's ``--grpc-server-addr``)."""

    def __init__(self, address: str, *, device_id: int = 0, root_certificates: bytes | None = None,
                 timeout: float = 5.0):
        self.address, self.device_id, self.timeout = address, device_id, timeout
        # a subchannel of its own: a channel made after the switch restarted connects at once instead of
        # inheriting the reconnect backoff that gRPC's shared subchannel built up while it was down
        opts = [("grpc.use_local_subchannel_pool", 1)]
        if root_certificates is not None:
            self._channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(root_certificates), opts)
        else:
            self._channel = grpc.insecure_channel(address, opts)
        self._stub = pb_grpc.SwitchManagementStub(self._channel)

    def _call(self, name: str, request):
        try:
            return getattr(self._stub, name)(request, timeout=self.timeout)
        except grpc.RpcError as e:
            raise MgmtError(f"{name} on {self.address}", e.code(), e.details() or "") from None

    def set_queue(self, port: int, priority: int | None = None, *, depth: int | None = None,
                  rate_pps: float | None = None) -> None:
        """Capacity (packets) and/or rate (packets/s, 0 = unlimited) of queue (port, priority); every priority
        of the port when ``priority`` is None."""
        self._call("SetQueue", pb.SetQueueRequest(device_id=self.device_id, port=port, priority=priority,
                                                  depth=depth, rate_pps=rate_pps))

    def set_link(self, port: int, *, rate_bps: float | None = None, delay_us: int | None = None,
                 loss: float | None = None) -> None:
        """Line rate (bits/s, 0 = unlimited), propagation delay (microseconds), random loss (0..1) of a port."""
        self._call("SetLink", pb.SetLinkRequest(device_id=self.device_id, port=port, rate_bps=rate_bps,
                                                delay_us=delay_us, loss=loss))

    def stats(self) -> SwitchStats:
        return stats_from_proto(self._call("GetStats", pb.GetStatsRequest(device_id=self.device_id)))

    def stats_and_defaults(self) -> tuple[SwitchStats, QueueDefaults | None]:
        """Statistics and the queue settings the switch falls back to (None from a server that does not report
        them), in one call: what a controller compares against to restore settings its file dropped."""
        r = self._call("GetStats", pb.GetStatsRequest(device_id=self.device_id))
        d = None
        if r.HasField("default_queue_depth") and r.HasField("default_queue_rate_pps"):
            d = QueueDefaults(r.default_queue_depth, r.default_queue_rate_pps)
        return stats_from_proto(r), d

    def set_crc16_parameters(self, name: str, polynomial: int, initial_remainder: int, final_xor_value: int,
                             reflect_data: bool, reflect_remainder: bool) -> None:
        """BMv2's ``set_crc16_parameters``: the parameters of crc16_custom calculation ``name``."""
        self._set_crc(name, 16, polynomial, initial_remainder, final_xor_value, reflect_data, reflect_remainder)

    def set_crc32_parameters(self, name: str, polynomial: int, initial_remainder: int, final_xor_value: int,
                             reflect_data: bool, reflect_remainder: bool) -> None:
        """BMv2's ``set_crc32_parameters``: the parameters of crc32_custom calculation ``name``."""
        self._set_crc(name, 32, polynomial, initial_remainder, final_xor_value, reflect_data, reflect_remainder)

    def _set_crc(self, name: str, width: int, polynomial: int, init: int, xor: int, refin: bool,
                 refout: bool) -> None:
        self._call("SetCrcParameters", pb.SetCrcParametersRequest(
            device_id=self.device_id, name=name, width=width, parameters=pb.CrcParameters(
                polynomial=polynomial, initial_remainder=init, final_xor_value=xor, reflect_data=refin,
                reflect_remainder=refout)))

    def crc_calculations(self) -> list[CrcCalculation]:
        """The running program's crc16_custom / crc32_custom calculations with their current parameters."""
        r = self._call("GetCrcCalculations", pb.GetCrcCalculationsRequest(device_id=self.device_id))
        return [CrcCalculation(c.name, c.width, c.location, c.parameters.polynomial,
                               c.parameters.initial_remainder, c.parameters.final_xor_value,
                               c.parameters.reflect_data, c.parameters.reflect_remainder) for c in r.calculations]

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "MgmtClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

"""The DLCP host transport: tensors as tagged DLCP packets over UDP, bounded-loss delivery, selective
retransmission and ECN/delay-driven rate control. See ``docs/transport.md``.

Modules, as stages (``docs/transport.md``, Design, has the table): ``endpoint`` (the public ``Endpoint``: builds
and wires the stages, runs the I/O thread), ``packetio`` (the bound socket, batched receives, error queue, keyed
tags), ``intake`` (datagram checks and dispatch), ``receiver`` (reassembly into buffers, ACK/NACK, completion
under the loss bound, zero-fill), ``reassembly`` (arrival state of one transfer), ``unclaimed`` (the staging budget
of data that arrives before its receive is posted), ``sender`` (bursts, window and pacing, ACK/NACK/DONE,
retransmission, RTO), ``transmit`` (socket writes, GSO, the full send buffer), ``liveness`` (probes, dead peers,
fate groups), ``control`` (header words and control messages), ``api`` (public types), ``stats`` (counters),
``chunking`` (packets and headers of a tensor), ``cc`` (DCTCP-style window), ``tensors`` (zero-copy views),
``faults`` (lossy socket wrapper for tests). The priority policy is ``host.policy``.
"""

from host.transport.endpoint import (Endpoint, LossReport, Options, RecvHandle, RecvResult, SendHandle,
                                     TransportError, path_mtu)
from host.transport.faults import LossySocket

try:  # the magnitude classification's C kernels live in the send lane's extension; the policy is told of it here
    from host.transport import _txlane as _txlane_kernel
except ImportError:  # pragma: no cover - a broken install; the endpoint logs it
    pass
else:
    from host.policy import use_native_kernels

    use_native_kernels(_txlane_kernel.abs_sums, _txlane_kernel.mag_classes, _txlane_kernel.classify_packets)

__all__ = ["Endpoint", "Options", "SendHandle", "RecvHandle", "RecvResult", "LossReport", "TransportError",
           "LossySocket", "path_mtu"]

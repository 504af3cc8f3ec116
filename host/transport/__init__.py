"""The DLCP host transport: tensors as tagged DLCP packets over UDP, bounded-loss delivery, selective
retransmission and ECN/delay-driven rate control. See ``docs/transport.md``.

Modules: ``endpoint`` (the I/O thread, sender, receiver, timers, the public API), ``packetio`` (the bound socket,
batched receives, error queue, keyed tags), ``chunking`` (packets and headers of a tensor),
``reassembly`` (receiver arrival state), ``unclaimed`` (the staging budget of data that arrives before its receive
is posted), ``cc`` (DCTCP-style window), ``tensors`` (zero-copy views),
``faults`` (lossy socket wrapper for tests). The priority policy is ``host.policy``.
"""

from host.transport.endpoint import (Endpoint, LossReport, Options, RecvHandle, RecvResult, SendHandle,
                                     TransportError, path_mtu)
from host.transport.faults import LossySocket

try:  # the magnitude classification's C kernel lives in the send lane's extension; the policy is told of it here
    from host.transport import _txlane as _txlane_kernel
except ImportError:  # pragma: no cover - a broken install; the endpoint logs it
    pass
else:
    from host.policy import use_abs_sums_kernel

    use_abs_sums_kernel(_txlane_kernel.abs_sums)

__all__ = ["Endpoint", "Options", "SendHandle", "RecvHandle", "RecvResult", "LossReport", "TransportError",
           "LossySocket", "path_mtu"]

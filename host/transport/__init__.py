"""The DLCP host transport: tensors as tagged DLCP packets over UDP, bounded-loss delivery, selective
retransmission and ECN/delay-driven rate control. See ``docs/transport.md``.

Modules: ``endpoint`` (sockets, threads, the public API), ``chunking`` (packets and headers of a tensor),
``reassembly`` (receiver arrival state), ``cc`` (DCTCP-style window), ``tensors`` (zero-copy views),
``faults`` (lossy socket wrapper for tests). The priority policy is ``host.policy``.
"""

from host.transport.endpoint import (Endpoint, LossReport, Options, RecvHandle, RecvResult, SendHandle,
                                     TransportError, path_mtu)
from host.transport.faults import LossySocket

__all__ = ["Endpoint", "Options", "SendHandle", "RecvHandle", "RecvResult", "LossReport", "TransportError",
           "LossySocket", "path_mtu"]

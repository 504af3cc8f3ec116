"""The switch's real P4Runtime server (``switch.daemon.p4rt.service``) on a loopback port inside the test process, and a
finsy controller for it: for tests that check P4Runtime behaviour and then look at the pipeline directly
(``device.pipeline.switch``), without the packet thread and interfaces of a full daemon."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import finsy as fy
import grpc
from finsy.proto import p4r_grpc

from switch.daemon.device import Device
from switch.backend.p4info import P4InfoBuilder, to_text
from switch.daemon.p4rt.service import P4RuntimeService
from switch.target import Switch

CPU_PORT = 255
PROGRAMS = Path(__file__).parent / "programs"


@contextmanager
def local_server(**device_kw):
    """Yields (device, address, service) of a P4Runtime server for a fresh :class:`Device` (no pipeline yet)."""
    device_kw.setdefault("cpu_port", CPU_PORT)
    device_kw.setdefault("include_dirs", [str(PROGRAMS)])     # the router includes "headers.p4"
    dev = Device(0, **device_kw)
    svc = P4RuntimeService(dev)
    server = grpc.server(ThreadPoolExecutor(max_workers=8, thread_name_prefix="test-p4rt"))
    p4r_grpc.add_P4RuntimeServicer_to_server(svc, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield dev, f"127.0.0.1:{port}", svc
    finally:
        server.stop(grace=None).wait(10)


def p4info_of(program: Path, out_dir: Path) -> Path:
    """The P4Info of ``program`` (as ``python -m switch.compile`` writes it), in ``out_dir``."""
    out = out_dir / (program.stem + ".p4info.txtpb")
    out.write_text(to_text(P4InfoBuilder(Switch(str(program)).ir).build()))
    return out


@asynccontextmanager
async def connect(addr: str, program: Path, tmp_dir: Path, **kw):
    """A primary finsy controller that pushed ``program`` (source as the device config, VERIFY_AND_COMMIT)."""
    opts = fy.SwitchOptions(p4info=p4info_of(program, tmp_dir), p4blob=program.read_bytes(), device_id=0,
                            p4force=True, **kw)
    async with fy.Switch("sw", addr, opts) as sw:
        yield sw

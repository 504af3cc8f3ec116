"""The ``p4.v1.P4Runtime`` servicer (synchronous grpcio, one thread per RPC) of the switch daemon.

Status codes follow p4lang/PI (see ../shared/p4-target.md): unknown device NOT_FOUND; a non-primary writer
PERMISSION_DENIED; no pipeline FAILED_PRECONDITION "No forwarding pipeline config set for this device"; a Write
with failed updates ends with UNKNOWN and a ``google.rpc.Status`` in the ``grpc-status-details-bin`` trailer
holding one ``p4.v1.Error`` per update, in order.  Control-plane work holds the device lock; the packet thread
hands PacketIn and digest messages over with :meth:`P4RuntimeService.packet_in` / :meth:`digests` (queue puts,
no server lock).
"""
from __future__ import annotations

import logging
import os
import threading
import time

import grpc
from google.protobuf import any_pb2

from finsy.proto import U128, p4r, p4r_grpc, rpc_code, rpc_status

from ...errors import SwitchError
from ..device import Device
from .arbitration import Arbiter, Stream, unknown_device_message
from .pipeline import build_pipeline

log = logging.getLogger("dlcp.switch.p4rt")

API_VERSION = "1.5.0"
_GET = p4r.GetForwardingPipelineConfigRequest
_SET = p4r.SetForwardingPipelineConfigRequest
READ_BATCH = 500            # entities per ReadResponse
WRITE_CHUNK = 64            # Write updates applied per acquisition of the device lock
#: Test mode (environment DLCP_SWITCH_TEST_REVERSE_WRITES=1): apply the updates of each WriteRequest last to
#: first, as P4Runtime allows a server to; controllers' tests use it to show they never rely on batch order.
REVERSE_WRITE_BATCHES = os.environ.get("DLCP_SWITCH_TEST_REVERSE_WRITES", "") not in ("", "0")


def _code(name: str) -> grpc.StatusCode:
    return getattr(grpc.StatusCode, name, grpc.StatusCode.UNKNOWN)


def _abort(context, e: SwitchError):
    context.abort(_code(e.code), e.message)


class P4RuntimeService(p4r_grpc.P4RuntimeServicer):
    """P4Runtime for one :class:`~switch.daemon.device.Device`."""

    def __init__(self, device: Device):
        self.device = device
        self.arbiter = Arbiter({device.device_id})
        self._digest_list_id = 0

    # -- helpers ------------------------------------------------------------------------------------------------
    def _dev(self, device_id: int) -> Device:
        if device_id != self.device.device_id:
            raise SwitchError("NOT_FOUND", unknown_device_message(device_id, [self.device.device_id]))
        return self.device

    @staticmethod
    def _eid(req) -> int | None:
        return U128.decode(req.election_id) if req.HasField("election_id") else None

    # -- Capabilities -------------------------------------------------------------------------------------------
    def Capabilities(self, request, context):
        return p4r.CapabilitiesResponse(p4runtime_api_version=API_VERSION)

    # -- pipeline -----------------------------------------------------------------------------------------------
    def SetForwardingPipelineConfig(self, request, context):
        try:
            dev = self._dev(request.device_id)
            self.arbiter.check_primary(request.device_id, request.role, self._eid(request))
            act = request.action
            cookie = request.config.cookie.cookie if request.config.HasField("cookie") else None
            if act == _SET.COMMIT:
                with dev.lock:
                    staged = dev.staged
                    if staged is None:
                        raise SwitchError("FAILED_PRECONDITION", "COMMIT without a config saved by VERIFY_AND_SAVE")
                    dev.staged = None
                dev.install(staged)
                log.info("pipeline committed (saved config)")
                return p4r.SetForwardingPipelineConfigResponse()
            if act == _SET.RECONCILE_AND_COMMIT:
                raise SwitchError("UNIMPLEMENTED", "RECONCILE_AND_COMMIT is not supported: use VERIFY_AND_COMMIT")
            if act not in (_SET.VERIFY, _SET.VERIFY_AND_SAVE, _SET.VERIFY_AND_COMMIT):
                raise SwitchError("INVALID_ARGUMENT", "SetForwardingPipelineConfig needs an action")
            pl = build_pipeline(dev, request.config.p4_device_config,
                                request.config.p4info if request.config.HasField("p4info") else None, cookie)
            if act == _SET.VERIFY_AND_SAVE:
                with dev.lock:
                    dev.staged = pl
            elif act == _SET.VERIFY_AND_COMMIT:
                dev.install(pl)
                log.info("pipeline installed (%d tables, cookie %s)", len(pl.p4info.tables), cookie)
            return p4r.SetForwardingPipelineConfigResponse()
        except SwitchError as e:
            _abort(context, e)

    def GetForwardingPipelineConfig(self, request, context):
        try:
            dev = self._dev(request.device_id)
            with dev.lock:
                pl = dev.require_pipeline()
            cfg = p4r.ForwardingPipelineConfig()
            rt = request.response_type
            if pl.cookie is not None:
                cfg.cookie.cookie = pl.cookie
            if rt in (_GET.ALL, _GET.P4INFO_AND_COOKIE):
                cfg.p4info.CopyFrom(pl.p4info)
            if rt in (_GET.ALL, _GET.DEVICE_CONFIG_AND_COOKIE):
                cfg.p4_device_config = pl.device_config
            return p4r.GetForwardingPipelineConfigResponse(config=cfg)
        except SwitchError as e:
            _abort(context, e)

    # -- Write / Read -------------------------------------------------------------------------------------------
    def Write(self, request, context):
        try:
            dev = self._dev(request.device_id)
            with dev.lock:
                dev.writes += 1
            self.arbiter.check_primary(request.device_id, request.role, self._eid(request))
            if request.atomicity != p4r.WriteRequest.CONTINUE_ON_ERROR:
                raise SwitchError("UNIMPLEMENTED", "only CONTINUE_ON_ERROR atomicity is supported")
            errors: list[p4r.Error] = [p4r.Error()] * len(request.updates)
            failed = 0
            order = range(len(request.updates))
            if REVERSE_WRITE_BATCHES:
                order = reversed(order)
            with dev.lock:
                pl = dev.require_pipeline()
            order = list(order)
            # the device lock is taken per chunk of updates, so a large batch never holds the packet thread
            # for long (each update is validated and applied whole under the lock; see Entities.write)
            for c in range(0, len(order), WRITE_CHUNK):
                with dev.lock:
                    for i in order[c:c + WRITE_CHUNK]:
                        try:
                            if dev.pipeline is not pl:
                                raise SwitchError("ABORTED", "the forwarding pipeline changed during this Write")
                            pl.runtime.write(request.updates[i])
                            errors[i] = p4r.Error(canonical_code=rpc_code.OK)
                            dev.write_updates += 1
                        except SwitchError as e:
                            failed += 1
                            errors[i] = p4r.Error(canonical_code=rpc_code.Code.Value(e.code)
                                                  if e.code in rpc_code.Code.keys() else rpc_code.UNKNOWN,
                                                  message=e.message)
                        except Exception as e:    # a bug must not take the server down: report it per update
                            log.exception("internal error in a Write update")
                            failed += 1
                            errors[i] = p4r.Error(canonical_code=rpc_code.INTERNAL,
                                                  message=f"internal error: {e!r}")
            if failed:
                st = rpc_status.Status(code=rpc_code.UNKNOWN,
                                       message=f"{failed} of {len(request.updates)} updates failed")
                for err in errors:
                    a = any_pb2.Any()
                    a.Pack(err)
                    st.details.append(a)
                context.set_trailing_metadata((("grpc-status-details-bin", st.SerializeToString()),))
                context.set_code(grpc.StatusCode.UNKNOWN)
                first = next(e for e in errors if e.canonical_code != rpc_code.OK)
                context.set_details(f"{st.message}; first: {rpc_code.Code.Name(first.canonical_code)}: "
                                    f"{first.message}")
            return p4r.WriteResponse()
        except SwitchError as e:
            _abort(context, e)

    def Read(self, request, context):
        try:
            dev = self._dev(request.device_id)
            if not request.entities:
                return
            out: list[p4r.Entity] = []
            with dev.lock:
                pl = dev.require_pipeline()
                for ent in request.entities:
                    out.extend(pl.runtime.read(ent))
        except SwitchError as e:
            _abort(context, e)
            return
        for i in range(0, max(len(out), 1), READ_BATCH):
            yield p4r.ReadResponse(entities=out[i:i + READ_BATCH])

    # -- StreamChannel ------------------------------------------------------------------------------------------
    def StreamChannel(self, request_iterator, context):
        s = Stream(peer=context.peer())
        reader = threading.Thread(target=self._read_stream, args=(s, request_iterator), daemon=True,
                                  name=f"p4rt-stream-{s.id}")
        context.add_callback(lambda: s.out.put(None))
        reader.start()
        try:
            while True:
                msg = s.out.get()
                if msg is None:
                    break
                yield msg
        finally:
            self.arbiter.remove(s)
        if s.error is not None:
            context.abort(_code(s.error[0]), s.error[1])

    def _read_stream(self, s: Stream, requests) -> None:
        try:
            for req in requests:
                kind = req.WhichOneof("update")
                if kind == "arbitration":
                    try:
                        self.arbiter.update(s, req.arbitration)
                    except SwitchError as e:
                        s.error = (e.code, e.message)
                        break
                    continue
                if s.device_id is None:
                    s.error = ("FAILED_PRECONDITION", "the first stream message must be a MasterArbitrationUpdate")
                    break
                if kind == "packet":
                    self._packet_out(s, req.packet)
                elif kind == "digest_ack":
                    pass                   # digests are not re-sent, so acks need no bookkeeping
                else:
                    s.send(self._stream_error(rpc_code.UNIMPLEMENTED, f"stream message {kind} not supported"))
        except grpc.RpcError:
            pass                           # the client went away
        except Exception:
            log.exception("stream %d reader failed", s.id)
        finally:
            s.out.put(None)

    @staticmethod
    def _stream_error(code: int, message: str, packet: p4r.PacketOut | None = None) -> p4r.StreamMessageResponse:
        err = p4r.StreamError(canonical_code=code, message=message)
        if packet is not None:
            err.packet_out.packet_out.CopyFrom(packet)
        return p4r.StreamMessageResponse(error=err)

    def _packet_out(self, s: Stream, pkt: p4r.PacketOut) -> None:
        dev = self.device
        try:
            if self.arbiter.primary.get((s.device_id, s.role)) is not s:
                raise SwitchError("PERMISSION_DENIED", "only the primary controller may send PacketOut")
            if dev.cpu_port is None:
                raise SwitchError("FAILED_PRECONDITION", "the switch has no CPU port (start it with --cpu-port)")
            with dev.lock:
                pl = dev.require_pipeline()
                hdr = pl.runtime.packet_out
                if hdr is None:
                    if pkt.metadata:
                        raise SwitchError("INVALID_ARGUMENT", "the program has no @controller_header(\"packet_out\")")
                    data = pkt.payload
                else:
                    data = hdr.build(pkt.metadata) + pkt.payload
                dev.packet_out.append((dev.cpu_port, data))
                dev.rx[dev.cpu_port] += 1
            dev.wake()
        except SwitchError as e:
            s.send(self._stream_error(rpc_code.Code.Value(e.code), e.message, pkt))

    # -- from the packet thread ---------------------------------------------------------------------------------
    def packet_in(self, runtime, data: bytes) -> str | None:
        """A frame that left on the CPU port -> PacketIn to every primary.  None when a stream took it, else why
        not: ``no_controller`` (no primary) or ``controller_queue_full`` (every primary's outgoing queue is full,
        see ``arbitration.STREAM_QUEUE_LIMIT``)."""
        targets = self.arbiter.primaries(self.device.device_id)
        if not targets:
            return "no_controller"
        hdr = runtime.packet_in
        if hdr is None:
            msg = p4r.StreamMessageResponse(packet=p4r.PacketIn(payload=data))
        else:
            md, payload = hdr.split(data)
            msg = p4r.StreamMessageResponse(packet=p4r.PacketIn(payload=payload, metadata=md))
        sent = False
        for s in targets:
            sent = s.send(msg, droppable=True) or sent
        return None if sent else "controller_queue_full"

    def digests(self, runtime, items: list[tuple[int, tuple]]) -> None:
        """Digest messages of the program -> one DigestList per configured digest to every primary (entries for
        digests without a DigestEntry config are discarded, as P4Runtime asks)."""
        by_id: dict[int, list] = {}
        for index, values in items:
            f = runtime.digest_fields.get(index)
            if f is None or f[0] not in runtime.digest_config:
                continue
            by_id.setdefault(f[0], []).append((values, f[1]))
        if not by_id:
            return
        from .codec import digest_data
        targets = self.arbiter.primaries(self.device.device_id)
        for did, lst in by_id.items():
            cap = runtime.digest_config[did].max_list_size or len(lst)
            for i in range(0, len(lst), cap):
                self._digest_list_id += 1
                dl = p4r.DigestList(digest_id=did, list_id=self._digest_list_id, timestamp=time.time_ns(),
                                    data=[digest_data(v, f) for v, f in lst[i:i + cap]])
                for s in targets:
                    s.send(p4r.StreamMessageResponse(digest=dl), droppable=True)

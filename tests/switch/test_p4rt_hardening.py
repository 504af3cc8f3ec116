"""P4Runtime under updates that fail half-way and clients that stop reading (issue 35): a refused update leaves
no trace, and a stream's outgoing queue stays bounded."""
from __future__ import annotations

import threading
import time

import grpc
import pytest
from finsy import P4IndirectAction, P4TableAction, P4TableEntry, P4TableMatch
from finsy.proto import U128, p4r, rpc_code

from p4rt_local import connect, local_server
from switch.daemon.p4rt import arbitration
from switch.daemon.p4rt.arbitration import Stream
from switchd import ROUTER, p4rt_stub, run
from test_p4runtime import _details, _raw_write

ACL_KEY = {"srcAddr": (0x0A000001, 0xFFFFFFFF), "protocol": (17, 0xFF)}


def udp(src: str, dst: str) -> bytes:
    from scapy.all import IP, UDP, Ether
    return bytes(Ether(dst="02:00:00:00:00:fe", src="02:00:00:00:00:01") / IP(src=src, dst=dst, ttl=64)
                 / UDP(sport=1000, dport=2000) / (b"x" * 20))


def test_insert_with_counter_data_into_a_table_without_direct_counter_leaves_nothing(tmp_path):
    """acl has no direct counter: INSERT with counter_data is INVALID_ARGUMENT, and afterwards the entry is
    neither forwarding packets, nor in Read, nor in the way of the same INSERT without counter_data."""
    with local_server() as (dev, addr, svc):
        async def go():
            async with connect(addr, ROUTER, tmp_path) as sw:
                await sw.insert([P4TableEntry("routes", match=P4TableMatch(dstAddr="10.2.0.0/16"),
                                              action=P4TableAction("set_nhop", dmac=2, smac=1, port=2))])
                def deny():
                    return P4TableEntry("acl", match=P4TableMatch(ACL_KEY), action=P4TableAction("deny"),
                                        priority=10)
                u = (+deny()).encode_update(sw.p4info)
                u.entity.table_entry.counter_data.packet_count = 7
                meter = (+deny()).encode_update(sw.p4info)
                meter.entity.table_entry.meter_config.cir = 10
                meter.entity.table_entry.meter_config.pir = 10
                with pytest.raises(grpc.RpcError) as ei:
                    _raw_write(addr, sw.election_id, u, meter)
                errs = _details(ei.value)
                assert [e.canonical_code for e in errs] == [rpc_code.INVALID_ARGUMENT] * 2
                assert "no direct counter" in errs[0].message and "no direct meter" in errs[1].message
                assert [e async for e in sw.read(P4TableEntry("acl"))] == []
                with dev.lock:
                    s = dev.pipeline.switch
                    assert not s.tables["I.acl"].entries
                    assert [o.port for o in s.send(1, udp("10.0.0.1", "10.2.3.4"))] == [2]   # not denied
                await sw.insert([deny()])                 # the same entry, correctly written, now works
                assert len([e async for e in sw.read(P4TableEntry("acl"))]) == 1
                with dev.lock:
                    assert dev.pipeline.switch.send(1, udp("10.0.0.1", "10.2.3.4")) == []
        run(go())


def test_refused_one_shot_and_member_updates_leave_nothing(tmp_path):
    """A one-shot action set with a bad action, or an entry naming a missing member, changes nothing: no hidden
    members are left in the selector and the table stays empty."""
    with local_server() as (dev, addr, svc):
        async def go():
            async with connect(addr, ROUTER, tmp_path) as sw:
                def good():
                    return P4TableEntry("ecmp", match=P4TableMatch(dstAddr="10.9.0.1"), action=P4IndirectAction(
                        [(2, P4TableAction("ecmp_nhop", dmac=1, port=1)),
                         (1, P4TableAction("ecmp_nhop", dmac=2, port=2))]))
                bad = (+good()).encode_update(sw.p4info)
                bad.entity.table_entry.action.action_profile_action_set.action_profile_actions[1].action. \
                    params[1].value = b"\x7f\xff"             # port is bit<9>
                missing = (+P4TableEntry("ecmp", match=P4TableMatch(dstAddr="10.9.0.2"),
                                         action=P4TableAction("ecmp_nhop", dmac=1, port=1))).encode_update(sw.p4info)
                missing.entity.table_entry.action.ClearField("action_profile_action_set")
                missing.entity.table_entry.action.action_profile_member_id = 99
                with pytest.raises(grpc.RpcError) as ei:
                    _raw_write(addr, sw.election_id, bad, missing)
                assert [e.canonical_code for e in _details(ei.value)] == [rpc_code.INVALID_ARGUMENT,
                                                                         rpc_code.NOT_FOUND]
                with dev.lock:
                    s = dev.pipeline.switch
                    assert not s.tables["I.ecmp"].entries
                    prof = s.instances["I.ecmp_sel"]
                    assert not prof.members and not prof.groups
                await sw.insert([good()])
                with dev.lock:
                    prof = dev.pipeline.switch.instances["I.ecmp_sel"]
                    assert len(prof.members) == 2 and len(prof.groups) == 1
        run(go())


def test_stream_queue_is_bounded_when_the_client_does_not_read(tmp_path):
    """A primary that stops reading its stream: PacketIns beyond the bound are dropped and reported as
    ``controller_queue_full``; the queue never grows past the bound."""
    with local_server() as (dev, addr, svc):
        async def push():
            async with connect(addr, ROUTER, tmp_path):
                pass
        run(push())
        ch, stub = p4rt_stub(addr)
        hold = threading.Event()

        def requests():
            yield p4r.StreamMessageRequest(arbitration=p4r.MasterArbitrationUpdate(
                device_id=0, election_id=U128.encode(100)))
            hold.wait(30)

        with ch:
            call = stub.StreamChannel(requests(), timeout=60)
            first = next(call)                                # the arbitration answer; then nothing is read
            assert first.arbitration.status.code == rpc_code.OK
            deadline = time.monotonic() + 10
            while not svc.arbiter.primaries(0) and time.monotonic() < deadline:
                time.sleep(0.01)
            (s,) = svc.arbiter.primaries(0)
            runtime = dev.pipeline.runtime
            # gRPC's sender may still move up to its HTTP/2 flow-control window (64 KiB, some hundreds of these
            # messages) off the queue while nobody reads: push well past the bound plus that window
            results = [svc.packet_in(runtime, b"\x00" * 60) for _ in range(arbitration.STREAM_QUEUE_LIMIT + 3000)]
            assert s.out.qsize() <= arbitration.STREAM_QUEUE_LIMIT + 1
            assert results.count("controller_queue_full") >= 400 and s.dropped >= 400
            assert results[0] is None
            hold.set()
            call.cancel()


def test_stream_send_bounds():
    s = Stream()
    limit = arbitration.STREAM_QUEUE_LIMIT
    assert all(s.send(i, droppable=True) for i in range(limit))
    assert not s.send("pkt", droppable=True) and s.dropped == 1
    # control messages get a little headroom, then the stream is ended with RESOURCE_EXHAUSTED
    assert all(s.send(("ctl", i)) for i in range(arbitration.CONTROL_HEADROOM))
    assert not s.send("ctl-overflow")
    assert s.closed and s.error[0] == "RESOURCE_EXHAUSTED"
    assert s.out.qsize() == limit + arbitration.CONTROL_HEADROOM + 1      # + the None that ends it

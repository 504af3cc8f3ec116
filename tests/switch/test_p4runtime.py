"""The daemon's P4Runtime server against a real finsy controller (and raw grpc stubs where finsy would refuse
to send a malformed request): pipeline push, entries read back byte-identical, externs, PacketIn/PacketOut,
arbitration, error semantics, TLS."""
from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import finsy as fy
import grpc
import pytest
from finsy import (P4ActionProfileGroup, P4ActionProfileMember, P4CounterData, P4CounterEntry, P4DigestEntry,
                   P4DirectCounterEntry, P4DirectMeterEntry, P4IndirectAction, P4Member, P4MeterConfig, P4MeterEntry,
                   P4MulticastGroupEntry, P4PacketOut, P4RegisterEntry, P4TableAction, P4TableEntry, P4TableMatch)
from finsy.p4client import P4ClientError
from finsy.proto import U128, p4i, p4r, rpc_code, rpc_status
from google.protobuf import text_format

from switch.daemon.mgmt import MgmtClient, MgmtError
from switch.daemon.p4rt.pipeline import P4DeviceConfig

from switchd import CPU_PORT, PROGRAMS, ROOT, ROUTER, Daemon, p4info_file, p4rt_stub, run

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def p4info(tmp_path_factory) -> Path:
    return p4info_file(ROUTER, tmp_path_factory.mktemp("p4info"))


@pytest.fixture(scope="module")
def daemon():
    with Daemon("--cpu-port", str(CPU_PORT), "-I", str(PROGRAMS)) as d:
        yield d
        assert d.proc.poll() is None, d.log()


def options(p4info: Path, **kw) -> fy.SwitchOptions:
    """finsy options pushing the router (its P4 source is the device config); p4force gives every test a fresh
    pipeline (VERIFY_AND_COMMIT clears forwarding state)."""
    kw.setdefault("p4force", True)
    return fy.SwitchOptions(p4info=p4info, p4blob=ROUTER.read_bytes(), device_id=0, **kw)


def raw_read(addr: str, *entities: p4r.Entity) -> list[p4r.Entity]:
    ch, stub = p4rt_stub(addr)
    with ch:
        out = []
        for resp in stub.Read(p4r.ReadRequest(device_id=0, entities=list(entities)), timeout=10):
            out.extend(resp.entities)
        return out


def ser(e) -> bytes:
    return e.SerializeToString(deterministic=True)


def all_table_entries(addr: str) -> set[bytes]:
    return {ser(e) for e in raw_read(addr, p4r.Entity(table_entry=p4r.TableEntry()))}


# ---- pipeline -------------------------------------------------------------------------------------------------
def test_push_pipeline_and_get_every_response_type(daemon, p4info):
    async def go():
        async with fy.Switch("sw", daemon.addr, options(p4info)) as sw:
            assert sw.is_primary
            return sw.p4info.p4cookie

    cookie = run(go())
    ch, stub = p4rt_stub(daemon.addr)
    G = p4r.GetForwardingPipelineConfigRequest
    ours = text_format.Parse(p4info.read_text(), p4i.P4Info())
    with ch:
        full = stub.GetForwardingPipelineConfig(G(device_id=0, response_type=G.ALL), timeout=10).config
        assert full.cookie.cookie == cookie
        assert ser(full.p4info) == ser(ours)
        assert full.p4_device_config == ROUTER.read_bytes()
        c = stub.GetForwardingPipelineConfig(G(device_id=0, response_type=G.COOKIE_ONLY), timeout=10).config
        assert c.cookie.cookie == cookie and not c.HasField("p4info") and not c.p4_device_config
        c = stub.GetForwardingPipelineConfig(G(device_id=0, response_type=G.P4INFO_AND_COOKIE), timeout=10).config
        assert c.HasField("p4info") and not c.p4_device_config
        c = stub.GetForwardingPipelineConfig(G(device_id=0, response_type=G.DEVICE_CONFIG_AND_COOKIE),
                                             timeout=10).config
        assert not c.HasField("p4info") and c.p4_device_config == ROUTER.read_bytes()
        with pytest.raises(grpc.RpcError) as ei:
            stub.GetForwardingPipelineConfig(G(device_id=7), timeout=10)
        assert ei.value.code() == grpc.StatusCode.NOT_FOUND


def _set_pipeline(stub, action, config: p4r.ForwardingPipelineConfig, election_id: int):
    return stub.SetForwardingPipelineConfig(p4r.SetForwardingPipelineConfigRequest(
        device_id=0, election_id=U128.encode(election_id), action=action, config=config), timeout=30)


def test_pipeline_config_forms_and_rejections(daemon, p4info):
    """Wrapper and raw source accepted, a P4Info with a wrong id and a program with an error rejected with a
    message naming the problem, VERIFY changes nothing, VERIFY_AND_SAVE + COMMIT installs, includes resolve."""
    S = p4r.SetForwardingPipelineConfigRequest
    ours = text_format.Parse(p4info.read_text(), p4i.P4Info())

    async def go():
        async with fy.Switch("sw", daemon.addr, options(p4info)) as sw:
            ch, stub = p4rt_stub(daemon.addr)
            eid = sw.election_id
            with ch:
                wrapped = P4DeviceConfig(device_data=ROUTER.read_bytes(), reassign=True).SerializeToString()
                _set_pipeline(stub, S.VERIFY_AND_COMMIT, p4r.ForwardingPipelineConfig(
                    p4info=ours, p4_device_config=wrapped, cookie=p4r.ForwardingPipelineConfig.Cookie(cookie=7)),
                    eid)
                G = p4r.GetForwardingPipelineConfigRequest
                got = stub.GetForwardingPipelineConfig(G(device_id=0), timeout=10).config
                assert got.p4_device_config == wrapped and got.cookie.cookie == 7

                bad = p4i.P4Info()
                bad.CopyFrom(ours)
                bad.tables[0].preamble.id ^= 1
                with pytest.raises(grpc.RpcError) as ei:
                    _set_pipeline(stub, S.VERIFY_AND_COMMIT, p4r.ForwardingPipelineConfig(
                        p4info=bad, p4_device_config=ROUTER.read_bytes()), eid)
                assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert bad.tables[0].preamble.name in ei.value.details() and "id" in ei.value.details()

                broken = ROUTER.read_text().replace("hdr.ipv4.ttl - 1", "hdr.ipv4.ttl - nosuchname")
                with pytest.raises(grpc.RpcError) as ei:
                    _set_pipeline(stub, S.VERIFY, p4r.ForwardingPipelineConfig(p4_device_config=broken.encode()),
                                  eid)
                assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                line = broken[:broken.index("nosuchname")].count("\n") + 1
                assert f":{line}:" in ei.value.details() and "nosuchname" in ei.value.details()

                # VERIFY of a different program (p4src/dlcp.p4, whose include resolves via p4src/) changes nothing
                dlcp = (ROOT / "p4src/dlcp.p4").read_bytes()
                _set_pipeline(stub, S.VERIFY, p4r.ForwardingPipelineConfig(p4_device_config=dlcp), eid)
                assert stub.GetForwardingPipelineConfig(G(device_id=0), timeout=10).config.cookie.cookie == 7
                _set_pipeline(stub, S.VERIFY_AND_SAVE, p4r.ForwardingPipelineConfig(
                    p4_device_config=dlcp, cookie=p4r.ForwardingPipelineConfig.Cookie(cookie=8)), eid)
                assert stub.GetForwardingPipelineConfig(G(device_id=0), timeout=10).config.cookie.cookie == 7
                _set_pipeline(stub, S.COMMIT, p4r.ForwardingPipelineConfig(), eid)
                got = stub.GetForwardingPipelineConfig(G(device_id=0), timeout=10).config
                assert got.cookie.cookie == 8
                assert any(t.preamble.name == "DlcpIngress.ipv4_lpm" for t in got.p4info.tables)
                with pytest.raises(grpc.RpcError) as ei:
                    _set_pipeline(stub, S.COMMIT, p4r.ForwardingPipelineConfig(), eid)
                assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION
                with pytest.raises(grpc.RpcError) as ei:      # not the primary's election id
                    _set_pipeline(stub, S.VERIFY_AND_COMMIT, p4r.ForwardingPipelineConfig(
                        p4_device_config=dlcp), eid + 100)
                assert ei.value.code() == grpc.StatusCode.PERMISSION_DENIED

    run(go())


# ---- table entries ----------------------------------------------------------------------------------------------
def test_entries_insert_modify_delete_read_back_byte_identical(daemon, p4info):
    async def go():
        async with fy.Switch("sw", daemon.addr, options(p4info)) as sw:
            entries = [
                P4TableEntry("routes", match=P4TableMatch(dstAddr="10.1.0.0/16"),
                             action=P4TableAction("set_nhop", dmac=0x0A, smac=0x0B, port=2), metadata=b"cookie-1"),
                P4TableEntry("routes", match=P4TableMatch(dstAddr="10.1.2.0/24"), action=P4TableAction("to_cpu")),
                P4TableEntry("acl", match=P4TableMatch(srcAddr=("10.0.0.0", "255.0.0.0"), dport=(5000, 5001)),
                             action=P4TableAction("set_prio", prio=7), priority=20),
                P4TableEntry("acl", match=P4TableMatch(protocol=(17, 0xFF)), action=P4TableAction("deny"),
                             priority=10),
                P4TableEntry("ecmp", match=P4TableMatch(dstAddr="10.9.9.9"), action=P4IndirectAction(
                    [(2, P4TableAction("ecmp_nhop", dmac=1, port=1)), (1, P4TableAction("ecmp_nhop", dmac=2, port=2))],
                    selection_mode=fy.P4ActionSelectionMode.RANDOM)),
                P4TableEntry("sources", match=P4TableMatch(srcAddr=0x0200000000AA), action=P4TableAction("mark_known")),
            ]
            await sw.insert(entries)
            written = {ser(e.encode(sw.p4info)) for e in entries}
            assert all_table_entries(daemon.addr) == written
            # a filtered read returns exactly that entry
            one = raw_read(daemon.addr, entries[2].encode(sw.p4info))
            assert [ser(e) for e in one] == [ser(entries[2].encode(sw.p4info))]

            modified = P4TableEntry("routes", match=P4TableMatch(dstAddr="10.1.0.0/16"),
                                    action=P4TableAction("set_nhop", dmac=0x0C, smac=0x0D, port=3), metadata=b"c2")
            await sw.modify([modified])
            written = (written - {ser(entries[0].encode(sw.p4info))}) | {ser(modified.encode(sw.p4info))}
            assert all_table_entries(daemon.addr) == written

            # default entries: modify, read back, reset
            await sw.modify([P4TableEntry("routes", is_default_action=True, action=P4TableAction("to_cpu"))])
            got = [e async for e in sw.read(P4TableEntry("routes", is_default_action=True))]
            assert got[0].action.name == "to_cpu"
            await sw.modify([P4TableEntry("routes", is_default_action=True)])
            got = [e async for e in sw.read(P4TableEntry("routes", is_default_action=True))]
            assert got[0].action.name == "drop"

            await sw.delete_all()
            assert all_table_entries(daemon.addr) == set()
            # one-shot resources were released with the entry: the selector holds no hidden members
            assert raw_read(daemon.addr, p4r.Entity(action_profile_member=p4r.ActionProfileMember())) == []
            with MgmtClient(daemon.addr) as m:
                st = m.stats()
            assert st.writes >= 4 and st.write_updates >= len(entries) + 3

    run(go())


def test_profiles_groups_multicast_digest_config(daemon, p4info):
    async def go():
        async with fy.Switch("sw", daemon.addr, options(p4info)) as sw:
            members = [P4ActionProfileMember("ecmp_sel", member_id=i, action=P4TableAction("ecmp_nhop", dmac=i, port=i))
                       for i in (1, 2, 3)]
            group = P4ActionProfileGroup("ecmp_sel", group_id=10, members=[P4Member(1, weight=1),
                                                                           P4Member(2, weight=3)])
            entry = P4TableEntry("ecmp", match=P4TableMatch(dstAddr="10.0.0.1"), action=P4IndirectAction(group_id=10))
            mc = P4MulticastGroupEntry(5, replicas=[(1, 0), (2, 0), (3, 1)])
            dg = P4DigestEntry("learn_t", max_list_size=4, max_timeout_ns=1000)
            await sw.insert(members + [group, entry, mc, dg])
            got = {ser(e) for e in raw_read(daemon.addr, p4r.Entity(action_profile_member=p4r.ActionProfileMember()),
                                            p4r.Entity(action_profile_group=p4r.ActionProfileGroup()),
                                            p4r.Entity(packet_replication_engine_entry=p4r.PacketReplicationEngineEntry(
                                                multicast_group_entry=p4r.MulticastGroupEntry())),
                                            p4r.Entity(digest_entry=p4r.DigestEntry()))}
            assert got == {ser(x.encode(sw.p4info)) for x in members + [group, mc, dg]}
            # in use: the group by the entry, member 2 by the group
            with pytest.raises(P4ClientError) as ei:
                await sw.delete([group])
            assert ei.value.details[0].canonical_code == rpc_code.FAILED_PRECONDITION
            with pytest.raises(P4ClientError) as ei:
                await sw.delete([members[1]])
            assert ei.value.details[0].canonical_code == rpc_code.FAILED_PRECONDITION
            await sw.delete([entry, group, mc, dg] + members)
            assert raw_read(daemon.addr, p4r.Entity(action_profile_group=p4r.ActionProfileGroup()),
                            p4r.Entity(digest_entry=p4r.DigestEntry())) == []

    run(go())


# ---- externs -----------------------------------------------------------------------------------------------------
def test_registers_counters_meters_direct_counters(daemon, p4info):
    async def go():
        async with fy.Switch("sw", daemon.addr, options(p4info)) as sw:
            await sw.modify([P4RegisterEntry("last_dst", index=3, data=0xC0A80001)])
            got = [e async for e in sw.read(P4RegisterEntry("last_dst", index=3))]
            assert got[0].data == 0xC0A80001
            assert len([e async for e in sw.read(P4RegisterEntry("last_dst"))]) == 16

            await sw.modify([P4CounterEntry("port_rx", index=5, data=P4CounterData(packet_count=9, byte_count=900))])
            got = [e async for e in sw.read(P4CounterEntry("port_rx", index=5))]
            assert (got[0].data.packet_count, got[0].data.byte_count) == (9, 900)

            cfg = P4MeterConfig(cir=100, cburst=10, pir=200, pburst=20)
            await sw.modify([P4MeterEntry("port_meter", index=4, config=cfg)])
            got = [e async for e in sw.read(P4MeterEntry("port_meter", index=4))]
            assert got[0].config == cfg

            route = P4TableEntry("routes", match=P4TableMatch(dstAddr="10.0.0.0/8"), action=P4TableAction("to_cpu"))
            await sw.insert([route])
            await sw.modify([P4DirectCounterEntry(table_entry=route, data=P4CounterData(packet_count=3, byte_count=300))])
            got = [e async for e in sw.read(P4DirectCounterEntry("route_hits"))]
            assert (got[0].data.packet_count, got[0].data.byte_count) == (3, 300)

            src = P4TableEntry("sources", match=P4TableMatch(srcAddr=0x020000000009), action=P4TableAction("mark_known"))
            await sw.insert([src])
            dcfg = P4MeterConfig(cir=10, cburst=1, pir=20, pburst=2)
            await sw.modify([P4DirectMeterEntry(table_entry=src, config=dcfg)])
            got = [e async for e in sw.read(P4DirectMeterEntry(table_entry=P4TableEntry("sources")))]
            assert len(got) == 1 and got[0].config == dcfg
            got = [e async for e in sw.read(P4TableEntry("sources", meter_config=P4MeterConfig(cir=0, cburst=0, pir=0, pburst=0)))]
            assert got[0].meter_config == dcfg

            # live counting: a PacketOut enters on the CPU port and is counted at index CPU_PORT & 63
            before = [e async for e in sw.read(P4CounterEntry("port_rx", index=CPU_PORT & 63))][0].data.packet_count
            await sw.write([P4PacketOut(b"\xff" * 6 + b"\x02" * 6 + b"\x88\xb6" + b"x" * 50, egress_port=7, _pad=0)])
            for _ in range(100):
                now = [e async for e in sw.read(P4CounterEntry("port_rx", index=CPU_PORT & 63))][0].data.packet_count
                if now == before + 1:
                    break
                await asyncio.sleep(0.05)
            assert now == before + 1

            # MODIFY-only entities refuse INSERT
            with pytest.raises(P4ClientError) as ei:
                await sw.insert([P4RegisterEntry("last_dst", index=1, data=1)])
            assert ei.value.details[0].canonical_code == rpc_code.INVALID_ARGUMENT

    run(go())


def test_packet_out_loops_back_as_packet_in(daemon, p4info):
    frame = bytes.fromhex("ffffffffffff020000000001") + b"\x88\xb6" + bytes(range(60))

    async def go():
        async with fy.Switch("sw", daemon.addr, options(p4info)) as sw:
            async def first_packet():
                async for pkt in sw.read_packets():
                    return pkt
            reader = asyncio.ensure_future(first_packet())
            await asyncio.sleep(0.1)
            await sw.write([P4PacketOut(frame, egress_port=CPU_PORT, _pad=0)])
            pkt = await asyncio.wait_for(reader, 10)
            assert pkt.payload == frame
            assert pkt["ingress_port"] == CPU_PORT

            # a PacketOut with a metadata value too wide for its field gets a StreamError, the stream stays up
            bad = p4r.StreamMessageRequest(packet=p4r.PacketOut(payload=frame, metadata=[
                p4r.PacketMetadata(metadata_id=1, value=b"\x7f\xff")]))
            errors = []
            sw.ee.on(fy.SwitchEvent.STREAM_ERROR, lambda _sw, msg: errors.append(msg))
            await sw._p4client.send(bad)
            for _ in range(100):
                if errors:
                    break
                await asyncio.sleep(0.05)
            assert errors and errors[0].error.canonical_code == rpc_code.INVALID_ARGUMENT
            assert errors[0].error.packet_out.packet_out.payload == frame
            assert sw.is_primary

    run(go())
    with MgmtClient(daemon.addr) as m:
        st = m.stats()
    assert st.ports[CPU_PORT].rx_packets >= 1 and st.ports[CPU_PORT].tx_packets >= 1


# ---- errors ------------------------------------------------------------------------------------------------------
def _raw_write(addr, election_id, *updates, device_id=0):
    ch, stub = p4rt_stub(addr)
    with ch:
        return stub.Write(p4r.WriteRequest(device_id=device_id, election_id=U128.encode(election_id),
                                           updates=list(updates)), timeout=10)


def _details(e: grpc.RpcError) -> list[p4r.Error]:
    for k, v in e.trailing_metadata():
        if k == "grpc-status-details-bin":
            st = rpc_status.Status.FromString(v)
            out = []
            for a in st.details:
                err = p4r.Error()
                assert a.Unpack(err)
                out.append(err)
            return out
    raise AssertionError("no grpc-status-details-bin trailer")


def test_write_errors_as_finsy_sees_them(daemon, p4info):
    async def go():
        async with fy.Switch("sw", daemon.addr, options(p4info)) as sw:
            r = P4TableEntry("routes", match=P4TableMatch(dstAddr="10.2.0.0/16"), action=P4TableAction("to_cpu"))
            await sw.insert([r])
            with pytest.raises(P4ClientError) as ei:
                await sw.insert([r])
            assert ei.value.code == fy.GRPCStatusCode.UNKNOWN
            assert ei.value.details[0].canonical_code == rpc_code.ALREADY_EXISTS
            missing = P4TableEntry("routes", match=P4TableMatch(dstAddr="10.3.0.0/16"))
            with pytest.raises(P4ClientError) as ei:
                await sw.delete([missing])
            assert ei.value.details[0].canonical_code == rpc_code.NOT_FOUND
            with pytest.raises(P4ClientError) as ei:      # ternary table without a priority
                await sw.insert([P4TableEntry("acl", match=P4TableMatch(protocol=(6, 0xFF)),
                                              action=P4TableAction("deny"))])
            assert ei.value.details[0].canonical_code == rpc_code.INVALID_ARGUMENT

            # wrong width (finsy checks widths itself, so send it raw): port is bit<9>; CONTINUE_ON_ERROR keeps
            # going and reports one error per update, in order
            ok1 = P4TableEntry("routes", match=P4TableMatch(dstAddr="10.4.0.0/16"), action=P4TableAction("to_cpu"))
            ok2 = P4TableEntry("routes", match=P4TableMatch(dstAddr="10.5.0.0/16"), action=P4TableAction("to_cpu"))
            wide = (+P4TableEntry("routes", match=P4TableMatch(dstAddr="10.6.0.0/16"),
                                  action=P4TableAction("set_nhop", dmac=1, smac=2, port=3))).encode_update(sw.p4info)
            wide.entity.table_entry.action.action.params[2].value = b"\x02\x00"       # 512 > 9 bits
            with pytest.raises(grpc.RpcError) as ei:
                _raw_write(daemon.addr, sw.election_id, (+ok1).encode_update(sw.p4info), wide,
                           (+ok2).encode_update(sw.p4info))
            assert ei.value.code() == grpc.StatusCode.UNKNOWN
            codes = [e.canonical_code for e in _details(ei.value)]
            assert codes == [rpc_code.OK, rpc_code.INVALID_ARGUMENT, rpc_code.OK]
            assert "port" in _details(ei.value)[1].message and "9 bits" in _details(ei.value)[1].message
            assert len(all_table_entries(daemon.addr)) == 3

            # a backup controller (lower election id) may read but not write
            async with fy.Switch("backup", daemon.addr, options(p4info, initial_election_id=5, p4force=False)) as bk:
                assert not bk.is_primary
                assert len([e async for e in bk.read(P4TableEntry())]) == 3
                with pytest.raises(P4ClientError) as ei:
                    await bk.insert([P4TableEntry("routes", match=P4TableMatch(dstAddr="10.7.0.0/16"),
                                                  action=P4TableAction("to_cpu"))])
                assert ei.value.code == fy.GRPCStatusCode.PERMISSION_DENIED
            with pytest.raises(grpc.RpcError) as ei:
                _raw_write(daemon.addr, sw.election_id, ok1.encode_update(sw.p4info), device_id=3)
            assert ei.value.code() == grpc.StatusCode.NOT_FOUND

    run(go())


def _stream(addr: str, *requests: p4r.StreamMessageRequest, wait: int = 1):
    """Open a StreamChannel, send ``requests``, return (channel, responses iterator, first ``wait`` responses)."""
    ch, stub = p4rt_stub(addr)
    import queue
    q: queue.Queue = queue.Queue()
    for r in requests:
        q.put(r)
    it = stub.StreamChannel(iter(q.get, None), timeout=20)
    got = [next(it) for _ in range(wait)]
    return ch, q, it, got


def _arb(eid: int | None, device_id: int = 0) -> p4r.StreamMessageRequest:
    m = p4r.MasterArbitrationUpdate(device_id=device_id)
    if eid is not None:
        m.election_id.CopyFrom(U128.encode(eid))
    return p4r.StreamMessageRequest(arbitration=m)


def test_arbitration_on_the_stream(daemon):
    ch1, q1, it1, got = _stream(daemon.addr, _arb(100))
    assert got[0].arbitration.status.code == rpc_code.OK
    ch2, q2, it2, got = _stream(daemon.addr, _arb(50))
    assert got[0].arbitration.status.code == rpc_code.ALREADY_EXISTS
    assert U128.decode(got[0].arbitration.election_id) == 100
    # the same election id from another stream is refused with the text clients match
    ch3, stub3 = p4rt_stub(daemon.addr)
    with pytest.raises(grpc.RpcError) as ei:
        list(stub3.StreamChannel(iter([_arb(100)]), timeout=10))
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "Election id already exists" in ei.value.details()
    ch3.close()
    # unknown device
    ch4, stub4 = p4rt_stub(daemon.addr)
    with pytest.raises(grpc.RpcError) as ei:
        list(stub4.StreamChannel(iter([_arb(1, device_id=9)]), timeout=10))
    assert ei.value.code() == grpc.StatusCode.NOT_FOUND
    ch4.close()
    # the primary leaves: the backup is told it is primary now
    q1.put(None)
    ch1.close()
    upd = next(it2)
    assert upd.arbitration.status.code == rpc_code.OK and U128.decode(upd.arbitration.election_id) == 50
    q2.put(None)
    ch2.close()


def test_no_pipeline_errors():
    with Daemon() as d:
        ch, stub = p4rt_stub(d.addr)
        with ch:
            with pytest.raises(grpc.RpcError) as ei:
                stub.GetForwardingPipelineConfig(p4r.GetForwardingPipelineConfigRequest(device_id=0), timeout=10)
            assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "No forwarding pipeline config set for this device" in ei.value.details()
            sch, q, it, got = _stream(d.addr, _arb(1))
            assert got[0].arbitration.status.code == rpc_code.OK
            with pytest.raises(grpc.RpcError) as ei:
                _raw_write(d.addr, 1, p4r.Update(type=p4r.Update.INSERT, entity=p4r.Entity(
                    table_entry=p4r.TableEntry(table_id=1))))
            assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            with pytest.raises(grpc.RpcError) as ei:
                list(stub.Read(p4r.ReadRequest(device_id=0, entities=[p4r.Entity(table_entry=p4r.TableEntry())]),
                               timeout=10))
            assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            q.put(None)
            sch.close()


# ---- TLS ---------------------------------------------------------------------------------------------------------
def test_tls(tmp_path, p4info):
    openssl = shutil.which("openssl")
    assert openssl, "the openssl command is needed to make a test certificate (Debian package openssl)"
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    with Daemon("--grpc-tls-cert", str(cert), "--grpc-tls-key", str(key), "-I", str(PROGRAMS)) as d:
        with MgmtClient(d.addr, root_certificates=cert.read_bytes()) as m:
            m.set_queue(1, 0, depth=7)
            assert m.stats().ports[1].queues[0].capacity == 7
        with MgmtClient(d.addr, timeout=3) as m:            # plaintext against a TLS server fails cleanly
            with pytest.raises(MgmtError) as ei:
                m.stats()
            assert ei.value.code == grpc.StatusCode.UNAVAILABLE

        async def go():
            creds = fy.GRPCCredentialsTLS(cacert=cert, cert=None, private_key=None)
            async with fy.Switch("sw", d.addr, options(p4info, channel_credentials=creds)) as sw:
                await sw.insert([P4TableEntry("routes", match=P4TableMatch(dstAddr="10.0.0.0/8"),
                                              action=P4TableAction("to_cpu"))])
                return len([e async for e in sw.read(P4TableEntry())])

        assert run(go()) == 1

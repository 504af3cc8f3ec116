"""The traffic-manager management service: the ``MgmtClient`` contract against a running daemon, errors, and
settings and counters that survive a pipeline change."""
from __future__ import annotations

import grpc
import pytest

from switch.daemon.device import Device, TmSettings
from switch.daemon.mgmt import MgmtClient, MgmtError, PortStats, QueueStats, SwitchStats
from switch.daemon.p4rt.pipeline import build_pipeline

from switchd import CPU_PORT, PROGRAMS, ROUTER, Daemon, p4rt_stub

pytestmark = pytest.mark.slow


def test_client_contract_against_the_daemon():
    with Daemon("--cpu-port", str(CPU_PORT), "--priority-queues", "4", "--queue-depth", "32", str(ROUTER)) as d:
        with MgmtClient(d.addr, timeout=5) as m:
            st = m.stats()
            assert isinstance(st, SwitchStats) and st.writes == 0 and st.write_updates == 0 and st.packet_errors == 0
            cpu = st.ports[CPU_PORT]
            assert isinstance(cpu, PortStats) and sorted(cpu.queues) == [0, 1, 2, 3]
            assert cpu.queues[0] == QueueStats(0, 0, 32, 0.0, 0, 0)
            assert (cpu.rate_bps, cpu.delay_us, cpu.loss) == (None, None, None)

            m.set_queue(5, depth=10)                          # every priority of port 5
            m.set_queue(5, 3, rate_pps=1000.5)                # one queue
            m.set_link(5, rate_bps=1e9, delay_us=250)
            st = m.stats()
            assert [st.ports[5].queues[p].capacity for p in range(4)] == [10, 10, 10, 10]
            assert [st.ports[5].queues[p].rate_pps for p in range(4)] == [0, 0, 0, 1000.5]
            assert (st.ports[5].rate_bps, st.ports[5].delay_us, st.ports[5].loss) == (1e9, 250, None)

            for call, words in ((lambda: m.set_queue(5, 4, depth=1), "priority 4"),
                                (lambda: m.set_queue(5, depth=0), "depth"),
                                (lambda: m.set_queue(511, depth=3), "port 511"),
                                (lambda: m.set_queue(5, rate_pps=-1), "rate"),
                                (lambda: m.set_link(5, loss=1.5), "loss"),
                                (lambda: m.set_link(5, delay_us=10**9), "delay")):
                with pytest.raises(MgmtError) as ei:
                    call()
                assert ei.value.code == grpc.StatusCode.INVALID_ARGUMENT and words in str(ei.value)
            assert m.stats().ports[5].queues[0].capacity == 10    # a refused call changed nothing

            # reads are not writes: the controller's "nothing to apply" check relies on this counter
            ch, stub = p4rt_stub(d.addr)
            with ch:
                from finsy.proto import p4r
                list(stub.Read(p4r.ReadRequest(device_id=0, entities=[p4r.Entity(table_entry=p4r.TableEntry())]),
                               timeout=10))
            assert m.stats().writes == 0

        with MgmtClient(d.addr, device_id=3) as m:
            with pytest.raises(MgmtError) as ei:
                m.stats()
            assert ei.value.code == grpc.StatusCode.NOT_FOUND
    with MgmtClient(d.addr, timeout=2) as m:                  # the daemon is gone: a clear error, no hang
        with pytest.raises(MgmtError) as ei:
            m.stats()
        assert ei.value.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def test_settings_and_counters_survive_a_pipeline_change():
    dev = Device(0, settings=TmSettings(priority_queues=8, queue_depth=16), include_dirs=[str(PROGRAMS)])
    dev.install(build_pipeline(dev, ROUTER.read_bytes()))
    dev.set_queue(2, 7, depth=5, rate_pps=100)
    dev.set_link(2, delay_us=40, loss=0.25)
    sw = dev.pipeline.switch
    assert sw.tm.queue(2, 7).capacity == 5 and sw.tm.ports[2].delay_ns == 40_000
    sw.tm.enqueue(2, 7, "x", 64, 0)                           # one packet counted, then left queued
    dev.install(build_pipeline(dev, ROUTER.read_bytes()))
    new = dev.pipeline.switch
    assert new is not sw
    assert new.tm.queue(2, 7).capacity == 5 and new.tm.queue(2, 7).rate_pps == 100
    assert new.tm.ports[2].delay_ns == 40_000 and new.tm.ports[2].loss == 0.25
    assert new.tm.queue(3, 0).capacity == 16
    st = dev.stats()
    assert st.ports[2].queues[7].enq_packets == 1 and st.ports[2].queues[7].peak_depth == 1
    assert st.drops[(2, 7, "pipeline_change")] == 1           # the queued packet of the old pipeline


def test_custom_crc_parameters_need_a_pipeline_and_reset_with_a_new_one():
    """No pipeline: FAILED_PRECONDITION and no calculations; a new pipeline starts from BMv2's defaults."""
    from switch.errors import SwitchError
    crc = PROGRAMS.parent / "conformance" / "crc_custom.p4"
    dev = Device(0, include_dirs=[str(crc.parent)])
    assert dev.crc_calculations() == []
    with pytest.raises(SwitchError) as ei:
        dev.set_crc_parameters("calc_0", 32, 0x1EDC6F41, 0, 0, True, True)
    assert ei.value.code == "FAILED_PRECONDITION"
    dev.install(build_pipeline(dev, crc.read_bytes()))
    dev.set_crc_parameters("calc_1", 32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, True, True)
    assert dev.crc_calculations()[1].polynomial == 0x1EDC6F41
    assert dev.crc_calculations()[1].location == "p4_device_config:34:9"
    dev.install(build_pipeline(dev, crc.read_bytes()))
    assert [c.polynomial for c in dev.crc_calculations()] == [0x04C11DB7] * 3 + [0x8005] * 2

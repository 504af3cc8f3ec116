"""Traffic manager: strict priority, capacity drops, rates on the simulated clock, enq_qdepth in
egress, link delay and loss, priority out of range."""
from pathlib import Path

from scapy.all import IP, Ether, UDP

from switch.target import Switch

PROGRAMS = Path(__file__).parent / "programs"


def ecn_pkt(dscp: int, ecn: int = 1, tag: int = 0) -> bytes:
    return bytes(Ether() / IP(tos=(dscp << 2) | ecn, id=0, src=f"10.0.0.{tag}") / UDP())


def tag_of(d) -> int:
    return int(Ether(d.data)[IP].src.split(".")[-1])


def test_strict_priority_departure_order():
    sw = Switch(str(PROGRAMS / "ecn.p4"), priority_queues=8)
    sw.tm.set_port(2, rate_bps=1_000_000)                # the port is the bottleneck
    for i in range(4):
        sw.inject(1, ecn_pkt(0, tag=i))                  # priority 0 (lowest)
    assert [tag_of(d) for d in sw.run(until_ns=0)] == [0]   # the link was idle: 0 leaves at once
    for i in range(4):
        sw.inject(1, ecn_pkt(5, tag=10 + i))             # priority 5
    out = sw.run()
    assert [tag_of(d) for d in out] == [10, 11, 12, 13, 1, 2, 3]
    times = [d.time_ns for d in out]
    assert times == sorted(times)


def test_rate_limit_departure_times():
    sw = Switch(str(PROGRAMS / "ecn.p4"))
    sw.tm.set_queue_rate(100, port=2)                    # 100 pps -> 10 ms apart
    for i in range(5):
        sw.inject(1, ecn_pkt(0, tag=i))
    out = sw.run()
    assert [d.time_ns for d in out] == [0, 10_000_000, 20_000_000, 30_000_000, 40_000_000]
    sw2 = Switch(str(PROGRAMS / "ecn.p4"))
    sw2.tm.set_port(2, rate_bps=1_000_000)               # 1 Mb/s line rate: serialisation time
    p = ecn_pkt(0)
    for _ in range(3):
        sw2.inject(1, p)
    tx = len(p) * 8 * 1000                               # ns per packet at 1 Mb/s
    assert [d.time_ns for d in sw2.run()] == [tx, 2 * tx, 3 * tx]


def test_capacity_drops_counted_and_qdepth_seen_in_egress():
    sw = Switch(str(PROGRAMS / "ecn.p4"))
    sw.tm.set_queue_rate(10, port=2)
    sw.tm.set_queue_depth(6, port=2)
    for i in range(10):
        sw.inject(1, ecn_pkt(0, ecn=1, tag=i))
    out = sw.run()
    assert len(out) == 6
    assert sw.drops() == {(2, 0, "queue_full"): 4}
    depths = [Ether(d.data)[IP].id for d in out]         # egress copies enq_qdepth into identification
    assert depths == [0, 1, 2, 3, 4, 5]
    ecn = [Ether(d.data)[IP].tos & 3 for d in out]
    assert ecn == [1, 1, 1, 1, 3, 3]                     # marked from enq_qdepth >= 4
    assert sw.register_read("E.qdepth", 2) == 0          # last packet left an empty queue


def test_priority_out_of_range_dropped():
    sw = Switch(str(PROGRAMS / "ecn.p4"), priority_queues=4)
    sw.send(1, ecn_pkt(6))
    assert sw.drops() == {(2, 6, "priority_out_of_range"): 1}


def test_link_delay_and_seeded_loss():
    def run(seed):
        sw = Switch(str(PROGRAMS / "ecn.p4"), seed=seed)
        sw.tm.set_port(2, delay_ns=250_000, loss=0.3)
        out = []
        for i in range(200):
            sw.inject(1, ecn_pkt(0, tag=i % 200), at_ns=i * 1000)
            out += sw.run(until_ns=i * 1000)
        out += sw.run()
        return sw, out

    sw, out = run(7)
    assert all(d.arrival_ns - d.time_ns == 250_000 for d in out)
    lost = sw.drop_total("emulated_loss")
    assert lost + len(out) == 200 and 35 <= lost <= 85
    sw2, out2 = run(7)
    assert [d.data for d in out2] == [d.data for d in out]   # same seed, same losses


def _naive_next(tm):
    """The next departure straight from the definition: a queue can send at max(head's enqueue time,
    its rate limit, its port's busy time); a port sends at its smallest such time from its highest
    priority queue with that time; the earliest port sends first, ties to the lowest port number."""
    best = None
    for port, p in tm.ports.items():
        ts = [(max(q.fifo[0][1], q.next_ok_ns, p.busy_until_ns), -prio, prio)
              for (qp, prio), q in tm.queues.items() if qp == port and q.fifo]
        if ts:
            t, _, prio = min(ts)
            if best is None or (t, port) < (best[0], best[1]):
                best = (t, port, prio)
    return best


def _stepwise(tm, until_ns, now_ns, egress):
    """The reference for TrafficManager.drain: next_departure() and dequeue_raw() one at a time, with
    next_departure() checked against _naive_next()."""
    while True:
        nd = tm.next_departure()
        assert nd == _naive_next(tm)
        if nd is None or (until_ns is not None and nd[0] > until_ns):
            return now_ns
        now_ns = max(now_ns, nd[0])
        e, depth = tm.dequeue_raw(nd[1], nd[2], now_ns)
        egress(nd[1], nd[2], e, depth, now_ns)


def test_drain_equals_stepwise_dequeue():
    """drain() inlines next_departure/_port_ready/dequeue_raw: on random enqueues, queue and port rates
    switched on and off, capacities and partial runs, both give the same departures, times and drops."""
    import random
    from switch.target.tm import TrafficManager

    for seed in range(40):
        rng = random.Random(seed)
        nprio = rng.choice([1, 3, 8])
        capacity = rng.choice([2, 8, 64])
        tms = [TrafficManager(nprio, capacity, seed) for _ in range(2)]
        logs: list[list] = [[], []]
        now = [0, 0]
        for step in range(60):
            op = rng.random()
            args = (rng.randrange(4), rng.randrange(nprio + 1), rng.choice([0, 100, 5000, 20000]),
                    rng.choice([0, 1e6, 1e8]), rng.randrange(200), rng.randrange(3) * 500_000)
            depth = rng.choice([1, 4, 64])
            t_next = now[0] + rng.choice([0, 0, 1000, 50_000, 3_000_000])
            for i, tm in enumerate(tms):
                port, prio, rate, bps, size, until = args
                if op < 0.6:
                    tm.enqueue(port, prio, (step,), size + 40, now[i])
                elif op < 0.7:
                    tm.set_queue_rate(rate, port, prio if prio < nprio else None)
                elif op < 0.8:
                    tm.set_port(port, rate_bps=bps)
                elif op < 0.85:
                    tm.set_queue_depth(depth)
                else:
                    def egress(port, prio, e, depth, t, log=logs[i], tm=tm):
                        log.append((port, prio, e[0][0], e[1:], depth, t))
                        if e[0][0] % 7 == 0:
                            tm.drop(port, prio, "pipeline_drop")
                    run = tm.drain if i == 0 else lambda u, n, eg, tm=tm: _stepwise(tm, u, n, eg)
                    now[i] = run(now[i] + until if op < 0.95 else None, now[i], egress)
            now = [max(n, t_next) for n in now]
        for i, tm in enumerate(tms):
            def final(port, prio, e, depth, t, log=logs[i]):
                log.append((port, prio, e[0][0], e[1:], depth, t))
            now[i] = (tm.drain if i == 0 else lambda u, n, eg, tm=tm: _stepwise(tm, u, n, eg))(None, now[i], final)
        assert logs[0] == logs[1] and now[0] == now[1], seed
        assert tms[0].drops == tms[1].drops and tms[0].backlog == tms[1].backlog == 0

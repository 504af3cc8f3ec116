"""The dlcp torch.distributed backend in real processes over the real transport (loopback), against gloo."""

from __future__ import annotations

import pytest

from .dist_run import check, launch

MOD = "tests.host.backend_worker"


@pytest.fixture(scope="module", autouse=True)
def _built_extension() -> None:
    """Build the C++ backend once here, so the ranks launched below load it instead of racing to build it."""
    from host.backend_ext import load

    load()


@pytest.mark.slow
@pytest.mark.parametrize("size", [2, 3, 4])
def test_every_collective_matches_gloo(size: int) -> None:
    out = check(launch(MOD, "collectives", size, timeout=240))
    assert all(o.strip().endswith(f"ok {r}") for r, o in enumerate(out))


@pytest.mark.slow
@pytest.mark.parametrize("size", [2, 3])
def test_half_precision_on_the_wire_and_against_gloo(size: int) -> None:
    """bf16/fp16 all-reduce, reduce-scatter and all-gather: 2-byte elements on the wire (half float32's bytes),
    within P-1 roundings of the float64 result like gloo, gloo's bits at 2 ranks; fp16 AVG does not overflow."""
    out = check(launch(MOD, "half", size, timeout=240))
    assert all(o.strip().endswith(f"ok {r}") for r, o in enumerate(out)), out


@pytest.mark.slow
@pytest.mark.parametrize("scenario,size", [("collectives-async", 3), ("ddp", 2)])
def test_staged_tensors_match_gloo(scenario: str, size: int) -> None:
    """Every operation (and DDP, through the work's future) with its tensors staged through host stand-ins as CUDA
    tensors are (host.staging; plain copies here instead of a GPU's streams): the same results as gloo."""
    out = check(launch(MOD, scenario, size, timeout=240, env={"DLCP_TEST_STAGE_HOST": "1"}))
    assert all(f"staged {r}" in o and o.strip().endswith(f"ok {r}") for r, o in enumerate(out)), out


@pytest.mark.slow
def test_async_collectives_match_gloo() -> None:
    check(launch(MOD, "collectives-async", 3, timeout=240))


@pytest.mark.slow
def test_ddp_matches_gloo() -> None:
    check(launch(MOD, "ddp", 2, timeout=240))


@pytest.mark.slow
def test_synchronous_calls_run_on_the_callers_thread_and_asynchronous_ones_on_the_worker() -> None:
    """host.backend._Runner: dist.all_reduce(t) runs where it is called (no worker wake-up, no hand-off back), an
    async_op=True call on the group's worker while the caller does something else, in issue order either way."""
    out = check(launch(MOD, "runner", 2, timeout=120))
    assert all(o.strip().endswith(f"ok {r}") for r, o in enumerate(out)), out


@pytest.mark.slow
def test_dead_peer_raises_on_wait() -> None:
    out = check(launch(MOD, "dead-peer", 2, timeout=60))
    assert "error after" in out[0] and "TransportError" in out[0] and "rank 1" in out[0], out[0]


def test_two_jobs_on_one_host_with_default_settings_coexist(tmp_path) -> None:
    """Issue 46: two 2-rank jobs started at once on this host, neither with DLCP_PORT or DLCP_ADDR, both run to the
    end with gloo's bits; every rank bound its own free port (published through its job's store), so the jobs
    share no address and port, and none took the well-known one."""
    from host import wire

    from .dist_run import finish, spawn

    jobs = [spawn(MOD, "coexist", 2, env={"COEXIST_DIR": str(tmp_path), "COEXIST_JOB": str(j),
                                          "COEXIST_RANKS": "4"}) for j in range(2)]
    outs = [check(finish(procs, timeout=240)) for procs in jobs]
    bound = {}
    for j, out in enumerate(outs):
        for r, o in enumerate(out):
            assert f"ok {r}" in o, (j, r, o)
            line = next(x for x in o.splitlines() if x.startswith(f"bound {r} "))
            bound[(j, r)] = line.split()[2]
    assert len(set(bound.values())) == 4, bound
    assert all(not b.endswith(f":{wire.UDP_PORT}") and b.startswith("127.") for b in bound.values()), bound


def test_a_taken_port_names_the_variables_that_fix_it(monkeypatch) -> None:
    """An address and port another job holds (here: DLCP_PORT set to one this test has bound) is an error that
    names DLCP_PORT and DLCP_ADDR, raised before the rendezvous."""
    import socket

    from host.backend import DlcpBackend, DlcpOptions

    held = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    held.bind(("127.0.0.1", 0))
    port = held.getsockname()[1]
    try:
        opts = DlcpOptions(addr="127.0.0.1", port=port)
        with pytest.raises(RuntimeError, match=rf"address 127.0.0.1:{port} is already in use") as ei:
            DlcpBackend(None, 0, 1, options=opts)  # (no store needed: the bind fails first)
    finally:
        held.close()
    assert "DLCP_PORT" in str(ei.value) and "DLCP_ADDR" in str(ei.value), ei.value


def test_default_port_is_free_on_loopback_and_well_known_elsewhere() -> None:
    """The documented default (``DlcpOptions.port`` None): a port the kernel picks on a loopback address, the
    well-known DLCP port that switches parse on any other."""
    from host import wire
    from host.backend import DlcpOptions, _default_port

    assert DlcpOptions().port is None
    assert _default_port("127.0.0.1") == 0 and _default_port("127.3.4.5") == 0 and _default_port("localhost") == 0
    assert _default_port("10.0.0.1") == wire.UDP_PORT and _default_port("192.168.1.7") == wire.UDP_PORT


def test_debug_detail_wraps_the_backend_and_dlcp_backend_finds_it() -> None:
    """Issue 46: under TORCH_DISTRIBUTED_DEBUG=DETAIL, ``dlcp_backend()`` raised "not a dlcp group" (torch wraps
    the backend in its ProcessGroupWrapper); now it unwraps it, and collectives and the wrapper's checks work."""
    out = check(launch(MOD, "debug-detail", 2, timeout=240, env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}))
    for r, o in enumerate(out):
        assert f"ok {r}" in o and f"mismatch caught {r}" in o, o


def test_abort_tells_the_peers() -> None:
    """``abort()`` of the default group sends the peers a DEAD notice about this rank: a peer's pending receive
    from it fails at once (its peer_timeout is 60 s), naming the abort."""
    out = check(launch(MOD, "abort-tells", 2, timeout=120))
    assert "aborted 0" in out[0] and "ok 1" in out[1] and "recv failed after" in out[1], out


def test_hook_layer_positions_front_first() -> None:
    import torch

    from host.hooks import layer_positions

    m = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU(), torch.nn.Sequential(torch.nn.Linear(3, 3)),
                            torch.nn.Linear(3, 1))
    pos = layer_positions(m)
    assert [pos[id(p)] for p in m.parameters()] == [0, 0, 1, 1, 2, 2]


@pytest.mark.slow
def test_torchrun_launches_dlcp_script(tmp_path) -> None:
    """torchrun (env://) with a script that imports nothing from dlcp: the entry point registers the backend."""
    import subprocess
    import sys

    from .dist_run import free_port

    script = tmp_path / "train.py"
    script.write_text(
        "import torch, torch.distributed as dist\n"
        "dist.init_process_group('dlcp')\n"
        "t = torch.full((1000,), float(dist.get_rank() + 1))\n"
        "dist.all_reduce(t)\n"
        "assert torch.equal(t, torch.full((1000,), 3.0)), t\n"
        "import sys\n"  # one write per line: both ranks share torchrun's stdout, print's pieces interleave
        "sys.stdout.write(f'rank {dist.get_rank()} backend {dist.get_backend()} ok\\n')\n"
        "sys.stdout.flush()\n"
        "dist.destroy_process_group()\n")
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                        "--master-addr", "127.0.0.1", "--master-port", str(free_port()), str(script)],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    for rank in (0, 1):
        assert f"rank {rank} backend dlcp ok" in r.stdout, r.stdout


def test_congestion_control_modes_map_to_transport_parameters(monkeypatch) -> None:
    from host.backend import DlcpOptions, _cc_mode, _cc_params
    from host.transport.cc import FAST_ALPHA
    from host.transport.chunking import payload_capacity

    assert _cc_params(_cc_mode("on"), 9000) is None  # the transport's defaults: ECN and delay marks
    fast = _cc_params(_cc_mode("FAST"), 9000)
    assert fast.fast_alpha == FAST_ALPHA and fast.delay_target is not None and fast.mss == payload_capacity(9000)
    assert _cc_params(_cc_mode("ecn"), 1500).delay_target is None and _cc_params("ecn", 1500).fast_alpha is None
    off = _cc_params(_cc_mode(False), 1500)
    assert off.delay_target is None and off.min_cwnd_pkts == off.init_cwnd_pkts == 1 << 14
    monkeypatch.setenv("DLCP_CC", "fast")
    assert DlcpOptions.from_env().congestion_control == "fast"
    monkeypatch.setenv("DLCP_CC", "vegas")
    with pytest.raises(ValueError, match="DLCP_CC='vegas'"):
        DlcpOptions.from_env()

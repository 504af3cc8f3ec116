"""``dlcpctl apply`` against a live ``dlcp-switch``: diff-based apply versus clear-and-rewrite.

Network: one embedded switch with HOSTS hosts (a /32 each), the default priority maps, drop/mark thresholds on
every (port, priority) slot of the connected ports.

Candidate: ``Network.apply()`` -- read back the managed tables and registers, write only the difference.
Baseline: what an imperative tool that re-runs its script does (p4runtime-shell / simple_switch_CLI style):
read the managed tables to delete every entry, then insert every desired entry and write every desired
register, over the same finsy session code.

Cases: re-applying an unchanged file (the candidate writes nothing), and a file with one threshold changed
(the candidate writes one update). Metric: seconds per apply (lower is better); P4Runtime updates written per
apply are recorded from the switch's own counter (``write_updates``).
"""
from __future__ import annotations

import asyncio
import os
import select
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from finsy.proto import p4r  # noqa: E402
from harness import Report, timed  # noqa: E402

from controller import Network, state  # noqa: E402
from controller.client import SwitchClient, writer_election_id  # noqa: E402
from switch.daemon.mgmt import MgmtClient  # noqa: E402

HOSTS = int(os.environ.get("BENCH_HOSTS", "48"))


def net_text(address: str, extra_threshold: int | None = None) -> str:
    hosts = "".join(f'  h{i}: {{ip: 10.0.{i // 250}.{i % 250 + 1}, mac: "02:00:00:00:{i // 256:02x}:{i % 256:02x}", '
                    f"attach: s1:{i + 1}}}\n" for i in range(HOSTS))
    text = f"switches:\n  s1: {{address: {address}}}\nhosts:\n{hosts}thresholds:\n  - {{drop: 48, mark: 24}}\n"
    if extra_threshold is not None:
        text += f"  - {{port: 1, priority: 0, drop: {extra_threshold}}}\n"
    return text


def start_switch() -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "switch.daemon", "--grpc-server-addr", "127.0.0.1:0",
                             "--log-level", "warn"], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, OMP_NUM_THREADS="1"))
    while True:
        r, _, _ = select.select([proc.stdout], [], [], 60)
        if not r:
            proc.kill()
            raise SystemExit("dlcp-switch did not start within 60 s")
        line = proc.stdout.readline()
        if "listening on" in line:
            return proc, line.rsplit(" ", 1)[1].strip()
        if not line:
            raise SystemExit("dlcp-switch exited")


async def rewrite_all(net: Network) -> None:
    """The baseline: delete every managed entry, then write the whole desired state."""
    program = net.program("s1")
    desired = net.desired("s1")
    async with SwitchClient(net.spec.switches["s1"], p4info=program.p4info, election_id=writer_election_id()) as c:
        await c.ensure_pipeline(program)
        n = c.names
        current = await c.read([p4r.Entity(table_entry=p4r.TableEntry(table_id=n.table_ids[t]))
                                for t in state.MANAGED_TABLES])
        dels = []
        for e in current:
            d = p4r.Entity()
            d.table_entry.table_id = e.table_entry.table_id
            d.table_entry.match.extend(e.table_entry.match)
            d.table_entry.priority = e.table_entry.priority
            dels.append(p4r.Update(type=p4r.Update.DELETE, entity=d))
        await c.write(dels)
        ups = [p4r.Update(type=p4r.Update.INSERT if e.HasField("table_entry") and not e.table_entry.is_default_action
                          else p4r.Update.MODIFY, entity=e)  # default actions and registers always exist
               for e in desired]
        await c.write(ups)


def main() -> None:
    proc, address = start_switch()
    try:
        with tempfile.TemporaryDirectory() as d:
            files = {v: Path(d) / f"net{v}.yaml" for v in (None, 7, 9)}
            for v, p in files.items():
                p.write_text(net_text(address, v))
            mgmt = MgmtClient(address)

            def measured(fn):
                def run():
                    before = mgmt.stats().write_updates
                    m = timed(fn, 1, "applies_per_s")
                    m["updates_written"] = mgmt.stats().write_updates - before
                    return m
                return run

            base = Network.from_file(files[None])
            base.apply(tm=False)
            rep = Report("controller_apply", params={"hosts": HOSTS, "entries": len(base.desired("s1"))})
            rep.compare("re-apply unchanged file",
                        candidate=measured(lambda: base.apply(tm=False)),
                        baseline=measured(lambda: asyncio.run(rewrite_all(base))),
                        metric="seconds", higher_is_better=False,
                        candidate_name="diff apply", baseline_name="clear+rewrite")
            flip = [files[7], files[9]]

            def changed():
                flip.reverse()
                Network.from_file(flip[0]).apply(tm=False)

            def changed_baseline():
                flip.reverse()
                asyncio.run(rewrite_all(Network.from_file(flip[0])))

            rep.compare("apply with one threshold changed", candidate=measured(changed),
                        baseline=measured(changed_baseline), metric="seconds", higher_is_better=False,
                        candidate_name="diff apply", baseline_name="clear+rewrite")
            mgmt.close()
            rep.write()
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()

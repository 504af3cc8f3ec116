"""Checkpoint / resume of DeAR (tuned fusion), DeAR + SparDL and DDP + the SparDL hook across processes: save
after K steps, new processes load and run M more, the parameters equal an uninterrupted K + M run bit for bit
(scenarios in tests/host/resume_worker.py)."""

from __future__ import annotations

import pytest

from .dist_run import check, launch

WORKER = "tests.host.resume_worker"


@pytest.mark.slow
def test_dear_and_spardl_resume_in_new_processes_bit_for_bit(tmp_path) -> None:
    env = {"RESUME_DIR": str(tmp_path)}
    out = check(launch(WORKER, "save", 2, timeout=200, env=env))
    assert all(f"ok save {r}" in o for r, o in enumerate(out)), out
    assert len(list(tmp_path.glob("*-ckpt-*.pt"))) == 6
    out = check(launch(WORKER, "load", 2, timeout=200, env=env))
    for r, o in enumerate(out):
        for case in ("dear-tuned", "dear-spardl", "ddp-spardl-hook"):
            assert f"ok {case} {r}" in o, o

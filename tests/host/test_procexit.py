"""host.procexit: a process ends with the status it asked for, its buffered output and logs written, after its
non-daemon threads; one that would have hung a normal exit is named and fails the status instead."""

from __future__ import annotations

import subprocess
import sys
import time

from tests.host.dist_run import ROOT


def _run(body: str, timeout: float = 60) -> subprocess.CompletedProcess:
    code = "import logging, sys, threading, time\nfrom host.procexit import exit_process\n" + body
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_status_output_and_logs_survive_the_exit() -> None:
    done = _run("sys.stdout.write('no newline, not flushed')\n"
                "h = logging.FileHandler('/dev/stderr'); logging.getLogger().addHandler(h)\n"
                "logging.getLogger().warning('logged')\n"
                "exit_process(7)\n")
    assert done.returncode == 7 and done.stdout == "no newline, not flushed" and "logged" in done.stderr, done


def test_none_is_success_like_sys_exit() -> None:
    assert _run("exit_process(None)").returncode == 0


def test_waits_for_a_finishing_thread() -> None:
    done = _run("def work():\n    time.sleep(1.0); print('thread finished', flush=True)\n"
                "threading.Thread(target=work, name='worker').start()\n"
                "exit_process(0)\n")
    assert done.returncode == 0 and "thread finished" in done.stdout, done


def test_a_thread_that_never_ends_is_named_and_fails_the_exit() -> None:
    t0 = time.monotonic()
    done = _run("threading.Thread(target=lambda: time.sleep(3600), name='stuck-sender').start()\n"
                "threading.Thread(target=lambda: time.sleep(3600), daemon=True).start()\n"
                "exit_process(0, join_timeout=1.0)\n")
    assert done.returncode == 3 and "stuck-sender" in done.stderr, done
    assert time.monotonic() - t0 < 30


def test_thread_pools_left_open_are_stopped_as_a_normal_exit_stops_them() -> None:
    done = _run("from concurrent.futures import ThreadPoolExecutor\n"
                "pool = ThreadPoolExecutor(1, thread_name_prefix='never-shut')\n"
                "print(pool.submit(lambda: 'ran').result(), flush=True)\n"
                "exit_process(0, join_timeout=20)\n")
    assert done.returncode == 0 and done.stdout == "ran\n" and not done.stderr, done

"""BMv2's Thrift CLI (``simple_switch_CLI``): what P4Runtime cannot do on ``simple_switch_grpc``.

BMv2's P4Runtime server (p4lang/PI) answers UNIMPLEMENTED to every register Read and Write ("Register reads are
not supported yet", PI ``proto/frontend/src/device_mgr.cpp``), so on BMv2 the controller reads and writes the
program's registers, and sets its queues, through the Thrift CLI that comes with BMv2, as BMv2's own tutorials do.
One :func:`run_cli` call is one CLI process fed a script of commands on stdin.

The CLI is a Python program that needs the Thrift module and BMv2's own Python packages (installed under the
toolchain's prefix). ``BMV2_CLI_PYTHON`` names the interpreter to run it with (default: the script's own
``#!`` line) and ``BMV2_CLI_PYTHONPATH`` where its packages are (default: none added), so that a virtual
environment's ``python3`` on PATH does not shadow the system's ``python3-thrift``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .errors import TrafficManagerError

__all__ = ["BMV2_CLI", "Bmv2CliError", "cli_available", "run_cli", "register_read", "register_write", "P4cRefused",
           "P4cOutput", "compile_p4c"]

BMV2_CLI = "simple_switch_CLI"


class Bmv2CliError(TrafficManagerError):
    """The CLI is missing, did not finish, or reported an error; the message names the port and the error."""


def cli_available() -> bool:
    return shutil.which(BMV2_CLI) is not None


def _command(thrift_port: int) -> tuple[list[str], dict[str, str]]:
    cli = shutil.which(BMV2_CLI)
    if cli is None:
        raise Bmv2CliError(f"{BMV2_CLI} is not on PATH: BMv2's registers and queues are reached through its Thrift "
                           f"CLI, which comes with BMv2 (behavioral-model)")
    python = os.environ.get("BMV2_CLI_PYTHON")
    env = dict(os.environ)
    extra = os.environ.get("BMV2_CLI_PYTHONPATH")
    if extra:
        env["PYTHONPATH"] = extra
    cmd = ([python] if python else []) + [cli, "--thrift-port", str(thrift_port)]
    return cmd, env


#: what the CLI prints for a failed command ("Error: ...", "Invalid table operation (...)", a Thrift exception,
#: a usage line); a word, so that a name holding one ("Ing.by_error") is not taken for it
_ERROR = re.compile(r"\b(error|invalid)\b|exception|usage:", re.IGNORECASE)


def run_cli(thrift_port: int, commands: list[str], timeout: float = 10.0) -> str:
    """Run ``commands`` in one CLI session on ``thrift_port``; its output. :class:`Bmv2CliError` when the CLI
    fails or any command's answer reports an error (the CLI itself exits 0 then)."""
    cmd, env = _command(thrift_port)
    try:
        done = subprocess.run(cmd, input="\n".join(commands) + "\n", capture_output=True, text=True,
                              timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise Bmv2CliError(f"{BMV2_CLI} --thrift-port {thrift_port} did not finish within {timeout:g} s") from None
    out = done.stdout + done.stderr
    bad = [line.strip() for line in out.splitlines() if _ERROR.search(line)]
    if done.returncode != 0 or bad:
        raise Bmv2CliError(f"{BMV2_CLI} --thrift-port {thrift_port} failed (exit {done.returncode}) on "
                           f"{'; '.join(commands)[:200]}: {'; '.join(bad) or out.strip()[-500:]}")
    return done.stdout


def register_read(thrift_port: int, name: str) -> list[int]:
    """Every cell of register ``name`` (its name in the BMv2 JSON, e.g. ``DlcpIngress.spray_position``)."""
    out = run_cli(thrift_port, [f"register_read {name}"])
    for line in out.splitlines():
        # "RuntimeCmd: drop_threshold= 0, 0, 5, ..." (the prompt is printed before each answer)
        head, sep, values = line.partition("= ")
        if sep and head.split()[-1] == name:
            return [int(v) for v in values.split(",") if v.strip()]
    raise Bmv2CliError(f"{BMV2_CLI} --thrift-port {thrift_port}: no values in the answer to register_read {name}: "
                       f"{out.strip()[-300:]}")


def register_write(thrift_port: int, writes: list[tuple[str, int, int]]) -> None:
    """Write ``(register, index, value)`` cells, all in one CLI session."""
    if writes:
        run_cli(thrift_port, [f"register_write {name} {index} {value}" for name, index, value in writes])


class P4cRefused(Exception):
    """p4c-bm2-ss refused the program (or is not installed); the message is its diagnostics."""


@dataclass(frozen=True)
class P4cOutput:
    """What a ``target: bmv2`` switch is given: the BMv2 JSON (its device config) and p4c's P4Info."""

    json: Path
    p4info: Path


def compile_p4c(program: Path, out_dir: Path, include_dirs: tuple[Path, ...] = ()) -> P4cOutput:
    """``p4c-bm2-ss`` on ``program``: ``<stem>.json`` and ``<stem>.p4info.txtpb`` (``--p4runtime-files``) in
    ``out_dir``."""
    if shutil.which("p4c-bm2-ss") is None:
        raise P4cRefused("p4c-bm2-ss is not on PATH: a BMv2 switch runs p4c's output (build p4c from p4lang's "
                         "sources, docs/development.md)")
    out_dir.mkdir(parents=True, exist_ok=True)
    js, info = out_dir / f"{program.stem}.json", out_dir / f"{program.stem}.p4info.txtpb"
    cmd = ["p4c-bm2-ss", *[f"-I{d}" for d in include_dirs], "--p4runtime-files", str(info), "-o", str(js),
           str(program)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise P4cRefused(f"p4c-bm2-ss refused {program.name}:\n{done.stderr.strip()[-3000:]}")
    return P4cOutput(js, info)

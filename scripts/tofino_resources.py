"""Compile the Tofino twin (p4src/tofino/dlcp_tna.p4) with p4c's open Tofino back end and commit what it reports.

    python scripts/tofino_resources.py            # compile for Tofino 1 and 2, write the two files below
    python scripts/tofino_resources.py --check    # compile, and exit 1 when the committed files differ

Writes
  - ``results/tofino/resources.json``: per target, the compiler's resource summary (MAU stages used of those there
    are, the tables in each stage, SRAM / TCAM / map RAM blocks, stateful and statistics ALUs, gateways, match
    crossbar bytes, VLIW instructions), summed from the back end's ``resources.json`` (``-g``), with the command,
    the compiler's version and the commit that made it; docs/p4-tofino.md shows it (``make report``);
  - ``p4src/tofino/dlcp_tna.p4info.txt`` (Tofino 1) and ``dlcp_t2na.p4info.txt`` (Tofino 2): the twin's P4Info as
    the back end writes it for standard P4Runtime clients (``--p4runtime-force-std-externs``: registers and counters
    as P4Runtime ``Register`` / ``Counter``). ``dlcpctl`` uses the first for a ``target: tofino`` switch
    (docs/controller.md), a Tofino 2 names the second (``p4info:``). The two may differ only in
    ``pkg_info.arch`` (``tna`` / ``t2na``), so every entity and id is the same on both chips; the script refuses
    to write them otherwise.

The compiler is ``$DLCP_P4C_TOFINO``, else ``p4c-barefoot`` on ``PATH``, else
``$P4TOOLS/build/p4c-tofino/backends/tofino/bf-p4c/p4c-barefoot`` (P4TOOLS defaults to /work/p4tools), as
scripts/build-tofino-backend.sh builds it. Without it the script exits 2 saying how to build it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "p4src" / "tofino" / "dlcp_tna.p4"
P4INFO = ROOT / "p4src" / "tofino" / "dlcp_tna.p4info.txt"
RESULTS = ROOT / "results" / "tofino" / "resources.json"
#: Targets compiled, each with its architecture (the twin includes tna.p4 or t2na.p4 by __TARGET_TOFINO__, which
#: --target sets), in the order of the results document.
TARGETS = (("tofino", "tna"), ("tofino2", "t2na"))
#: The committed P4Info of each target.
P4INFOS = {"tofino": P4INFO, "tofino2": ROOT / "p4src" / "tofino" / "dlcp_t2na.p4info.txt"}
COMMAND = "python scripts/tofino_resources.py"
P4TOOLS = Path(os.environ.get("P4TOOLS", "/work/p4tools"))


def include_dirs() -> list[Path]:
    """Where core.p4 and tna.p4 are: ``$DLCP_P4C_TOFINO_INCLUDE`` (``:``-separated), else the p4include folders of
    the source build-tofino-backend.sh built from (a compiler run from its build tree finds no installed ones)."""
    env = os.environ.get("DLCP_P4C_TOFINO_INCLUDE")
    if env:
        return [Path(p) for p in env.split(":") if p]
    src = P4TOOLS / "src" / "p4c-tofino"
    return [d for d in (src / "p4include", src / "backends" / "tofino" / "bf-p4c" / "p4include") if d.is_dir()]


class CompilerMissing(RuntimeError):
    """No p4c-barefoot was found."""


def find_compiler() -> Path:
    """The Tofino back end's compiler binary (see the module docstring for where it is looked for)."""
    env = os.environ.get("DLCP_P4C_TOFINO")
    if env:
        if not Path(env).is_file():
            raise CompilerMissing(f"DLCP_P4C_TOFINO={env}: no such file")
        return Path(env)
    on_path = shutil.which("p4c-barefoot")
    if on_path:
        return Path(on_path)
    built = P4TOOLS / "build" / "p4c-tofino" / "backends" / "tofino" / "bf-p4c" / "p4c-barefoot"
    if built.is_file():
        return built
    raise CompilerMissing("p4c-barefoot not found (DLCP_P4C_TOFINO, PATH, $P4TOOLS/build/p4c-tofino): build it with "
                          "P4TOOLS=... MIRRORS=... bash scripts/build-tofino-backend.sh")


def compiler_version(compiler: Path) -> str:
    out = subprocess.run([str(compiler), "--version"], capture_output=True, text=True, timeout=60)
    return " ".join((out.stdout + out.stderr).split()).strip()


def compile_twin(compiler: Path, target: str, arch: str, outdir: Path, p4info: Path | None = None) -> Path:
    """Compile the twin for one target into ``outdir``; returns the back end's ``resources.json``.

    Raises RuntimeError with the compiler's output when it fails."""
    cmd = [str(compiler), "--target", target, "--arch", arch, "-g", "-o", str(outdir)]
    for d in include_dirs():
        cmd += ["-I", str(d)]
    cmd.append(str(PROGRAM))
    if p4info is not None:
        cmd[1:1] = ["--p4runtime-files", str(p4info), "--p4runtime-force-std-externs"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
    found = sorted(outdir.rglob("resources.json"))
    if not found:
        raise RuntimeError(f"{' '.join(cmd)} wrote no resources.json under {outdir} (was -g honoured?)")
    return found[0]


def _count(section: dict[str, Any] | None, key: str) -> int:
    return len((section or {}).get(key) or [])


def _cells(section: dict[str, Any] | None, rows: str = "nRows", cols: str = "nColumns") -> int:
    section = section or {}
    return int(section.get(rows, 0)) * int(section.get(cols, 0))


def summarize(resources: dict[str, Any]) -> dict[str, Any]:
    """The resource summary of one compile from the back end's ``resources.json`` (schema:
    backends/tofino/compiler_interfaces/schemas/resources_schema.py): per MAU stage the P4 tables placed there and
    the units used of each kind, with the totals over the pipeline and what the pipeline has."""
    mau = resources["resources"]["mau"]
    stages = []
    for st in sorted(mau["mau_stages"], key=lambda s: s["stage_number"]):
        stages.append({
            "stage": st["stage_number"],
            "tables": sorted({t["table_name"] for t in (st.get("logical_tables") or {}).get("ids", [])}),
            "sram": _count(st.get("rams"), "srams"),
            "tcam": _count(st.get("tcams"), "tcams"),
            "map_ram": _count(st.get("map_rams"), "maprams"),
            "stateful_alu": _count(st.get("meter_alus"), "meters"),
            "stats_alu": _count(st.get("statistic_alus"), "stats"),
            "gateway": _count(st.get("gateways"), "gateways"),
            "xbar_bytes": _count(st.get("xbar_bytes"), "bytes"),
            "vliw": _count(st.get("vliw"), "instructions"),
        })
    first = mau["mau_stages"][0] if mau["mau_stages"] else {}
    per_stage = {
        "sram": _cells(first.get("rams")),
        "tcam": _cells(first.get("tcams")),
        "map_ram": _cells(first.get("map_rams"), "nRows", "nUnits"),
        "stateful_alu": int((first.get("meter_alus") or {}).get("nAlus", 0)),
        "stats_alu": int((first.get("statistic_alus") or {}).get("nAlus", 0)),
        "gateway": _cells(first.get("gateways"), "nRows", "nUnits"),
        "xbar_bytes": int((first.get("xbar_bytes") or {}).get("size", 0)),
        "vliw": int((first.get("vliw") or {}).get("size", 0)),
    }
    n_stages = int(mau["nStages"])
    used = [s for s in stages if s["tables"]]
    kinds = list(per_stage)
    return {
        "stages_used": len(used),
        "stages_available": n_stages,
        "tables": {t: [s["stage"] for s in stages if t in s["tables"]] for t in sorted({t for s in stages
                                                                                          for t in s["tables"]})},
        "used": {k: sum(s[k] for s in stages) for k in kinds},
        "available": {k: per_stage[k] * n_stages for k in kinds},
        "share": {k: round(sum(s[k] for s in stages) / (per_stage[k] * n_stages), 4) if per_stage[k] else 0.0
                  for k in kinds},
        "stages": used,
        "compiler_version": resources.get("compiler_version", ""),
    }


def _git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def p4info_but_arch(text: str) -> Any:
    """A P4Info (text format) with ``pkg_info.arch`` cleared: what must be the same on every chip."""
    from finsy.proto import p4i
    from google.protobuf import text_format

    info = text_format.Parse(text, p4i.P4Info())
    info.pkg_info.ClearField("arch")
    return info


def run(compiler: Path, workdir: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """Compile for every target in :data:`TARGETS`: the results document and each target's P4Info text.

    RuntimeError when two targets' P4Info differ in more than ``pkg_info.arch`` (the controller encodes the same
    writes for either chip only if every entity and id is the same)."""
    targets: dict[str, Any] = {}
    p4infos: dict[str, str] = {}
    for target, arch in TARGETS:
        out = workdir / target
        p4info = workdir / f"{target}.p4info.txt"
        res_path = compile_twin(compiler, target, arch, out, p4info)
        targets[target] = {"arch": arch, **summarize(json.loads(res_path.read_text()))}
        p4infos[target] = p4info.read_text()
    first = TARGETS[0][0]
    for target, text in p4infos.items():
        if p4info_but_arch(text) != p4info_but_arch(p4infos[first]):
            raise RuntimeError(f"the twin's P4Info for {target} differs from {first}'s in more than pkg_info.arch "
                               f"(compare {workdir / target}.p4info.txt with {workdir / first}.p4info.txt)")
    doc = {
        "name": "tofino_resources",
        "command": COMMAND,
        "program": PROGRAM.relative_to(ROOT).as_posix(),
        "compiler": compiler_version(compiler),
        "commit": _git_commit(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": platform.node(),
        "targets": targets,
    }
    return doc, p4infos


def _comparable(doc: dict[str, Any]) -> dict[str, Any]:
    """What --check compares: the figures, not who made them when."""
    return {k: v for k, v in doc.items() if k not in ("commit", "time", "host")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when the committed results or P4Info differ")
    ap.add_argument("--keep", type=Path, help="compile into this folder and keep it (default: a temporary one)")
    args = ap.parse_args(argv)
    try:
        compiler = find_compiler()
    except CompilerMissing as e:
        print(f"tofino_resources: {e}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="dlcp-tofino-") as tmp:
        workdir = args.keep or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        doc, p4infos = run(compiler, workdir)
    if args.check:
        stale = []
        if not RESULTS.is_file() or _comparable(json.loads(RESULTS.read_text())) != _comparable(doc):
            stale.append(str(RESULTS.relative_to(ROOT)))
        for target, text in p4infos.items():
            path = P4INFOS[target]
            if not path.is_file() or path.read_text() != text:
                stale.append(str(path.relative_to(ROOT)))
        for s in stale:
            print(f"tofino_resources: {s} differs from what {compiler} makes now (run {COMMAND})", file=sys.stderr)
        return 1 if stale else 0
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    for target, text in p4infos.items():
        P4INFOS[target].write_text(text)
    for target, s in doc["targets"].items():
        print(f"{target}: {s['stages_used']} of {s['stages_available']} stages, SRAM {s['used']['sram']}/"
              f"{s['available']['sram']}, TCAM {s['used']['tcam']}/{s['available']['tcam']}")
    print(f"wrote {RESULTS.relative_to(ROOT)}, " + ", ".join(str(p.relative_to(ROOT)) for p in P4INFOS.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Compare the embedded front end's P4Info with p4c's own, on p4c's test programs.

p4c's source tree holds, for each sample program ``testdata/p4_16_samples/X.p4``, the P4Info that p4c writes for
it (``testdata/p4_16_samples_outputs/X.p4.p4info.txtpb``).  For every v1model sample the embedded front end
accepts, this builds our P4Info and compares it with p4c's, entity by entity and ``type_info``, and prints
how many are equal, how many differ and how (per entity kind: a different set of names, the same names in
another order, or the same names with other contents); ``--show X.p4`` prints the differences of one program.

    python scripts/p4info_vs_p4c.py --p4c /path/to/p4c [--json OUT] [--show X.p4]

A checkout of p4c is enough (no build); nothing here is needed by ``make test``.

The project's own programs (``p4src/dlcp.p4``, ``tests/switch/conformance/*.p4``, ``tests/switch/programs/*.p4``):

    python scripts/p4info_vs_p4c.py --project [--write]

compiles each with ``p4c-bm2-ss`` (on PATH: the toolchain's p4tools.env) and compares its P4Info with the embedded
front end's, ``type_info`` included; ``--write`` stores p4c's P4Info of each program p4c accepts as the reference
``tests/switch/p4c_p4info/<dir>.<name>.p4info.txtpb`` and, in ``index.json``, what p4c said about each it refuses.
``make test`` checks the embedded front end against those references (tests/switch/test_p4info_p4c.py, no p4c
needed); ``make test-bmv2`` against p4c itself.
"""
from __future__ import annotations

import argparse
import difflib
import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from finsy.proto import p4i  # noqa: E402
from google.protobuf import text_format  # noqa: E402

import re  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402

from switch.frontend.check import load_ir  # noqa: E402
from switch.errors import P4Error  # noqa: E402
from switch.backend.p4info import P4InfoBuilder  # noqa: E402

KINDS = ("tables", "actions", "counters", "direct_counters", "meters", "direct_meters", "registers",
         "action_profiles", "digests", "controller_packet_metadata", "value_sets", "externs")


def ours(src: Path) -> p4i.P4Info | None:
    """Our P4Info of ``src``, or None when the embedded front end refuses the program."""
    try:
        info = P4InfoBuilder(load_ir(str(src), [str(src.parent)])).build()
    except (P4Error, RecursionError):
        return None
    return info


def differences(want: p4i.P4Info, got: p4i.P4Info) -> list[str]:
    """How two P4Infos differ, one word per entity kind: KIND:set, KIND:order or KIND:content; type_info:presence
    (one has it, the other not) or type_info:content."""
    out = []
    if want.pkg_info != got.pkg_info:
        out.append("pkg_info")
    if want.HasField("type_info") != got.HasField("type_info"):
        out.append("type_info:presence")
    elif want.type_info != got.type_info:
        out.append("type_info:content")
    for kind in KINDS:
        a, b = getattr(want, kind), getattr(got, kind)
        if a == b:
            continue
        na, nb = [x.preamble.name for x in a], [x.preamble.name for x in b]
        out.append(f"{kind}:{'content' if na == nb else 'order' if sorted(na) == sorted(nb) else 'set'}")
    return out


ROOT = Path(__file__).resolve().parents[1]
REFERENCE_DIR = ROOT / "tests" / "switch" / "p4c_p4info"


def project_programs() -> list[Path]:
    """The project's P4 programs that P4Info is checked for, in a fixed order (files that only hold declarations
    for others to include, with no ``main``, are not programs)."""
    files = [ROOT / "p4src" / "dlcp.p4", *sorted((ROOT / "tests/switch/conformance").glob("*.p4")),
             *sorted((ROOT / "tests/switch/programs").glob("*.p4"))]
    return [f for f in files if re.search(r"\bmain\s*;", f.read_text())]


def include_dirs(program: Path) -> list[Path]:
    """The include directories a project program compiles with (its own folder, p4src/include)."""
    return [program.parent, ROOT / "p4src" / "include"]


def reference_name(program: Path) -> str:
    """``<folder>.<stem>``: the key of a program in the reference index and its reference file's stem."""
    return f"{program.parent.name}.{program.stem}"


def ours_full(program: Path) -> p4i.P4Info:
    """The embedded front end's whole P4Info of a project program (raises its P4Error when refused)."""
    return P4InfoBuilder(load_ir(str(program), [str(d) for d in include_dirs(program)])).build()


def p4c_p4info(program: Path) -> tuple[p4i.P4Info | None, str]:
    """p4c-bm2-ss's P4Info of ``program``, or None and p4c's first error line when it refuses it."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "p4info.txtpb"
        done = subprocess.run(["p4c-bm2-ss", *[f"-I{d}" for d in include_dirs(program)], "--p4runtime-files",
                               str(out), "-o", str(Path(tmp) / "out.json"), str(program)],
                              capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
            first = (errors or done.stderr.strip().splitlines() or ["(no message)"])[0]
            return None, first.replace(str(ROOT) + "/", "")
        return text_format.Parse(out.read_text(), p4i.P4Info()), ""


def text_diff(want: p4i.P4Info, got: p4i.P4Info, n: int = 1) -> str:
    """A unified diff of two P4Infos' text forms (p4c's first)."""
    return "\n".join(difflib.unified_diff(text_format.MessageToString(want).splitlines(),
                                          text_format.MessageToString(got).splitlines(), "p4c", "embedded",
                                          lineterm="", n=n))


def project(write: bool) -> int:
    """Compare every project program's P4Info with p4c's; with ``write``, store p4c's as the references."""
    index: dict[str, str] = {}
    equal, differ, only_p4c, refused = [], [], [], []
    done = subprocess.run(["p4c-bm2-ss", "--version"], capture_output=True, text=True)
    version = " ".join((done.stdout + done.stderr).split())
    header = (f"# written by {version} (--p4runtime-files); regenerate with "
              f"python scripts/p4info_vs_p4c.py --project --write\n")
    for program in project_programs():
        name = reference_name(program)
        want, error = p4c_p4info(program)
        try:
            got = ours_full(program)
        except (P4Error, RecursionError) as e:
            got = None
            if want is not None:
                only_p4c.append(f"{name}: {e}")
        if want is None:
            refused.append(name)
            index[name] = f"p4c-bm2-ss refuses it: {error}"
            continue
        index[name] = "reference"
        if write:
            REFERENCE_DIR.mkdir(parents=True, exist_ok=True)
            (REFERENCE_DIR / f"{name}.p4info.txtpb").write_text(header + text_format.MessageToString(want))
        if got is not None:
            (equal if want == got else differ).append(name)
            if want != got:
                print(f"== {name}: P4Info differs\n{text_diff(want, got)}")
    if write:
        (REFERENCE_DIR / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    print(f"project programs: {len(index)}; refused by p4c-bm2-ss: {len(refused)}; accepted by both: "
          f"{len(equal) + len(differ)}, P4Info equal: {len(equal)}, different: {len(differ)}; accepted only by p4c: "
          f"{len(only_p4c)}")
    for line in only_p4c:
        print(f"  only p4c accepts {line}")
    return 1 if differ else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--project", action="store_true", help="the project's programs against p4c-bm2-ss on PATH")
    ap.add_argument("--write", action="store_true", help="with --project: store p4c's P4Info as the references")
    ap.add_argument("--p4c", type=Path, help="a p4c source tree (its testdata/ is read)")
    ap.add_argument("--json", type=Path, help="write the per-program differences here")
    ap.add_argument("--show", help="print the differences of this sample (e.g. action_profile-bmv2.p4)")
    a = ap.parse_args()
    if a.project:
        return project(a.write)
    if a.p4c is None:
        ap.error("give --p4c DIR (p4c's samples) or --project")
    samples, outputs = a.p4c / "testdata" / "p4_16_samples", a.p4c / "testdata" / "p4_16_samples_outputs"
    refused, equal, differ = [], [], {}
    for ref in sorted(outputs.glob("*.p4info.txtpb")):
        name = ref.name[: -len(".p4info.txtpb")]
        text = ref.read_text()
        src = samples / name
        if 'arch: "v1model"' not in text or not src.exists() or (a.show and name != a.show):
            continue
        want = text_format.Parse(text, p4i.P4Info())
        got = ours(src)
        if got is None:
            refused.append(name)
            continue
        diff = differences(want, got)
        if not diff:
            equal.append(name)
            continue
        differ[name] = diff
        if a.show:
            for kind in KINDS:
                w = "".join(text_format.MessageToString(x) for x in getattr(want, kind)).splitlines()
                g = "".join(text_format.MessageToString(x) for x in getattr(got, kind)).splitlines()
                print("\n".join(difflib.unified_diff(w, g, f"p4c {kind}", f"ours {kind}", lineterm="", n=1)))
    print(f"v1model samples: {len(refused) + len(equal) + len(differ)}; refused by the embedded front end: "
          f"{len(refused)}; accepted: {len(equal) + len(differ)}, P4Info equal to p4c's: {len(equal)}, "
          f"different: {len(differ)}")
    for what, n in Counter(k for v in differ.values() for k in v).most_common():
        print(f"  {what}: {n}")
    if a.json:
        a.json.write_text(json.dumps({"refused": refused, "equal": equal, "differ": differ}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Compare the embedded front end's P4Info with p4c's own, on p4c's test programs.

p4c's source tree holds, for each sample program ``testdata/p4_16_samples/X.p4``, the P4Info that p4c writes for
it (``testdata/p4_16_samples_outputs/X.p4.p4info.txtpb``).  For every v1model sample the embedded front end
accepts, this builds our P4Info and compares it with p4c's, entity by entity (``type_info`` left out), and prints
how many are equal, how many differ and how (per entity kind: a different set of names, the same names in
another order, or the same names with other contents); ``--show X.p4`` prints the differences of one program.

    python scripts/p4info_vs_p4c.py --p4c /path/to/p4c [--json OUT] [--show X.p4]

A checkout of p4c is enough (no build); nothing here is needed by ``make test``.
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

from switch.check import load_ir  # noqa: E402
from switch.errors import P4Error  # noqa: E402
from switch.p4info import P4InfoBuilder  # noqa: E402

KINDS = ("tables", "actions", "counters", "direct_counters", "meters", "direct_meters", "registers",
         "action_profiles", "digests", "controller_packet_metadata", "value_sets", "externs")


def ours(src: Path) -> p4i.P4Info | None:
    """Our P4Info of ``src``, or None when the embedded front end refuses the program."""
    try:
        info = P4InfoBuilder(load_ir(str(src), [str(src.parent)])).build()
    except (P4Error, RecursionError):
        return None
    info.ClearField("type_info")
    return info


def differences(want: p4i.P4Info, got: p4i.P4Info) -> list[str]:
    """How two P4Infos differ, one word per entity kind: KIND:set, KIND:order or KIND:content."""
    out = []
    if want.pkg_info != got.pkg_info:
        out.append("pkg_info")
    for kind in KINDS:
        a, b = getattr(want, kind), getattr(got, kind)
        if a == b:
            continue
        na, nb = [x.preamble.name for x in a], [x.preamble.name for x in b]
        out.append(f"{kind}:{'content' if na == nb else 'order' if sorted(na) == sorted(nb) else 'set'}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--p4c", required=True, type=Path, help="a p4c source tree (its testdata/ is read)")
    ap.add_argument("--json", type=Path, help="write the per-program differences here")
    ap.add_argument("--show", help="print the differences of this sample (e.g. action_profile-bmv2.p4)")
    a = ap.parse_args()
    samples, outputs = a.p4c / "testdata" / "p4_16_samples", a.p4c / "testdata" / "p4_16_samples_outputs"
    refused, equal, differ = [], [], {}
    for ref in sorted(outputs.glob("*.p4info.txtpb")):
        name = ref.name[: -len(".p4info.txtpb")]
        text = ref.read_text()
        src = samples / name
        if 'arch: "v1model"' not in text or not src.exists() or (a.show and name != a.show):
            continue
        want = text_format.Parse(text, p4i.P4Info())
        want.ClearField("type_info")
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

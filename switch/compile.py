"""``python -m switch.compile PROG.p4 [--p4info OUT.p4info.txtpb]``: check a P4 program with the
embedded front end and write its P4Info.  Exit status 1 with ``file:line:col: message`` on error."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .errors import P4Error


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m switch.compile", description=__doc__)
    ap.add_argument("programs", nargs="+", help="P4-16 source files (v1model)")
    ap.add_argument("--p4info", help="output P4Info text file (only with one program); default: "
                                     "PROG.p4info.txtpb next to each program when --out-dir is not given")
    ap.add_argument("--out-dir", help="directory for PROG.p4info.txtpb files")
    ap.add_argument("-I", dest="include", action="append", default=[], help="include directory")
    ap.add_argument("-D", dest="defines", action="append", default=[], help="NAME[=VALUE]")
    ap.add_argument("--python", action="store_true", help="also print the generated Python code")
    a = ap.parse_args(argv)
    if a.p4info and len(a.programs) > 1:
        ap.error("--p4info takes one program; use --out-dir for several")
    defines = dict((d.split("=", 1) + ["1"])[:2] for d in a.defines)
    from .frontend.check import load_ir
    from .backend.codegen import Gen, NotFusable
    from .backend.p4info import P4InfoBuilder, to_text
    status = 0
    for prog in a.programs:
        try:
            p = load_ir(prog, a.include, defines)
            try:
                src = Gen(p).generate()
            except NotFusable:          # as switch.target.Switch does: the list-shape code instead
                src = Gen(p, True, False).generate()
            info = P4InfoBuilder(p).build()
        except P4Error as e:
            print(str(e), file=sys.stderr)
            status = 1
            continue
        except RecursionError:
            print(f"{prog}:1:1: program nesting too deep", file=sys.stderr)
            status = 1
            continue
        out = a.p4info or str(Path(a.out_dir or Path(prog).parent) / (Path(prog).stem + ".p4info.txtpb"))
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(to_text(info))
        if a.python:
            print(src)
        print(f"{prog}: ok -> {out}")
    return status


if __name__ == "__main__":
    sys.exit(main())

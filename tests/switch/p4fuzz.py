"""Mutation fuzzing of the embedded P4 front end: take real programs, mutate them deterministically, compile.

The property (issue 35): whatever the text, compiling it either succeeds or raises the front end's located
error (:class:`switch.errors.P4Error` with a file, a line >= 1 and a column >= 1); never another exception, never
a hang.  Compiling means everything the switch daemon does with a pushed program: preprocess, parse, check,
generate the Python code, build the switch (``switch.target.Switch``).

Mutations work on tokens and lines of the source text (independent of the front end's own lexer): delete,
duplicate or swap tokens and lines, replace a token by one from a pool of P4 keywords, operators and numbers, by
another identifier of the same program, or a number by an extreme one.  Case ``i`` of seed ``s`` is always the
same program, so a failure is reproduced by its (seed, index).

``python tests/switch/p4fuzz.py --seconds 60 [--seed N]`` runs a longer campaign and prints the counts.
"""
from __future__ import annotations

import argparse
import random
import re
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = sorted((ROOT / "p4src").glob("*.p4")) + sorted((Path(__file__).parent / "programs").glob("*.p4")) \
    + sorted(p for p in (Path(__file__).parent / "conformance").glob("*.p4") if p.name != "common.p4")

POOL = ("( ) { } [ ] < > ; : , . = + - * / % & | ^ ~ ! ? @ << >> && || == != ++ &&& .. |+| |-| 0 1 -1 8w255 "
        "0x1 4s-1 return exit transition state select accept reject apply table key actions default_action "
        "entries const if else switch bit int varbit bool header header_union struct extern control parser "
        "action typedef type enum error match_kind tuple default _ next last lastIndex size extract emit "
        "lookahead isValid setValid setInvalid hdr meta #if #endif #define #include").split()
NUMBERS = ("0", "1", "7", "8", "9", "16", "32", "48", "64", "65", "255", "256", "4096", "4097", "65536",
           "4294967296", "99999999999999999999", "0x7fffffff", "1024", "1025")
_TOKEN = re.compile(r"\w+|[^\w\s]")
_IDENT = re.compile(r"[A-Za-z_]\w*")
_NUMBER = re.compile(r"\b\d+\b")


def mutate(src: str, rng: random.Random) -> str:
    """One to three random edits of ``src``."""
    for _ in range(rng.randint(1, 3)):
        toks = [m.span() for m in _TOKEN.finditer(src)]
        if not toks:
            return src
        a, b = toks[rng.randrange(len(toks))]
        k = rng.randrange(10)
        if k == 0:                                   # delete a token
            src = src[:a] + src[b:]
        elif k == 1:                                 # replace a token from the pool
            src = src[:a] + rng.choice(POOL) + src[b:]
        elif k == 2:                                 # duplicate a token
            src = src[:a] + src[a:b] + " " + src[a:]
        elif k == 3:                                 # delete a line
            lines = src.split("\n")
            del lines[rng.randrange(len(lines))]
            src = "\n".join(lines)
        elif k == 4:                                 # copy a line elsewhere
            lines = src.split("\n")
            lines.insert(rng.randrange(len(lines)), lines[rng.randrange(len(lines))])
            src = "\n".join(lines)
        elif k == 5:                                 # swap two tokens
            c, d = toks[rng.randrange(len(toks))]
            if c > b:
                src = src[:a] + src[c:d] + src[b:c] + src[a:b] + src[d:]
        elif k in (6, 7):                            # an identifier becomes another one of the program
            ids = _IDENT.findall(src)
            ms = list(_IDENT.finditer(src))
            m = rng.choice(ms)
            src = src[:m.start()] + rng.choice(ids) + src[m.end():]
        elif k == 8:                                 # a number becomes an extreme one
            ms = list(_NUMBER.finditer(src))
            if ms:
                m = rng.choice(ms)
                src = src[:m.start()] + rng.choice(NUMBERS) + src[m.end():]
        else:                                        # a line becomes a preprocessor line
            lines = src.split("\n")
            i = rng.randrange(len(lines))
            lines[i] = rng.choice(("#if ", "#elif ", "#define X ", "#ifdef ", "#include ", "#undef ")) + lines[i]
            src = "\n".join(lines)
    return src


class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang()


@dataclass
class Result:
    """Counts of one campaign, and every input that broke the property."""

    tried: int = 0
    compiled: int = 0
    located_errors: int = 0
    failures: list[str] = field(default_factory=list)


def campaign(seed: int, cases: int, seconds: float, per_case_s: float = 10.0, min_cases: int = 0) -> Result:
    """Compile mutants ``0 .. cases-1`` of ``seed``: the first ``min_cases`` always, then as many as fit in
    ``seconds``."""
    from switch.errors import P4Error
    from switch.target import Switch
    sources = [(p, p.read_text()) for p in CORPUS]
    res = Result()
    deadline = time.monotonic() + seconds
    old = signal.signal(signal.SIGALRM, _alarm)
    try:
        with tempfile.TemporaryDirectory(prefix="p4fuzz-") as d:
            for i in range(cases):
                if i >= min_cases and time.monotonic() > deadline:
                    break
                rng = random.Random(f"{seed}:{i}")
                orig, text = sources[rng.randrange(len(sources))]
                src = mutate(text, rng)
                path = Path(d) / orig.name
                path.write_text(src)
                res.tried += 1
                signal.setitimer(signal.ITIMER_REAL, per_case_s)
                try:
                    # the includes of the original resolve from its own directory, as for the original
                    Switch(str(path), include_dirs=[str(orig.parent)])
                    res.compiled += 1
                except P4Error as e:
                    if e.loc.line < 1 or e.loc.col < 1 or not e.loc.file:
                        res.failures.append(f"case {seed}:{i} ({orig.name}): unlocated error {e}")
                    else:
                        res.located_errors += 1
                except _Hang:
                    res.failures.append(f"case {seed}:{i} ({orig.name}): no answer within {per_case_s} s")
                except BaseException as e:       # noqa: BLE001 - the property under test
                    if isinstance(e, KeyboardInterrupt):
                        raise
                    tb = traceback.format_exception(type(e), e, e.__traceback__)[-3:]
                    res.failures.append(f"case {seed}:{i} ({orig.name}): {type(e).__name__}: {e}\n{''.join(tb)}")
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        signal.signal(signal.SIGALRM, old)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cases", type=int, default=10**9)
    ap.add_argument("--seconds", type=float, default=60.0)
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    r = campaign(a.seed, a.cases, a.seconds)
    print(f"seed {a.seed}: {r.tried} programs tried, {r.compiled} compiled, {r.located_errors} located errors, "
          f"{len(r.failures)} failures (tracebacks or hangs)")
    for f in r.failures:
        print(f)
    return 1 if r.failures else 0


if __name__ == "__main__":
    sys.exit(main())

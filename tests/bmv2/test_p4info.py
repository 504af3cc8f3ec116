"""P4Info from the embedded front end equals p4c-bm2-ss's for every project program both accept, and the
references ``make test`` checks against (tests/switch/p4c_p4info/) are what this p4c writes."""
from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format
from finsy.proto import p4i

from switch.errors import P4Error

from .conftest import tally
from tests.switch.test_p4info_p4c import INDEX, PROGRAMS, cmp

pytestmark = pytest.mark.bmv2


@pytest.mark.parametrize("program", PROGRAMS, ids=cmp.reference_name)
def test_p4info_against_p4c(p4c_tool, program: Path):
    name = cmp.reference_name(program)
    want, error = cmp.p4c_p4info(program)
    if want is None:
        assert INDEX[name].startswith("p4c-bm2-ss refuses it"), \
            f"p4c refuses {name} ({error}) but the references say {INDEX[name]!r}: regenerate them"
        return
    assert INDEX[name] == "reference", f"p4c accepts {name} now: regenerate the references"
    ref = text_format.Parse((cmp.REFERENCE_DIR / f"{name}.p4info.txtpb").read_text(), p4i.P4Info())
    assert ref == want, f"{name}: the committed reference is not this p4c's P4Info: regenerate it"
    try:
        got = cmp.ours_full(program)
    except P4Error as e:
        pytest.fail(f"p4c accepts {name}, the embedded front end refuses it: {e}")
    same = got == want
    tally("p4info").compare(f"{name} P4Info", "p4c's", "p4c's" if same else cmp.text_diff(want, got)[:1500])
    assert same, f"{name}: P4Info differs from p4c's:\n{cmp.text_diff(want, got)}"

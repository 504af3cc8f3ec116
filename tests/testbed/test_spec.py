"""Run specs: strict validation with key and line, and the bundled examples load."""

from pathlib import Path

import pytest

from testbed.spec import RunSpec, SpecError, load_spec, parse_rate
from testbed.worker import spec_from_json, spec_to_json

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "testbed"


def write(tmp_path, text: str) -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("name", ["demo.yaml", "star2.yaml"])
def test_examples_load(name):
    spec = load_spec(EXAMPLES / name)
    assert isinstance(spec, RunSpec) and spec.workers >= 2


def test_unknown_key_names_key_and_line(tmp_path):
    p = write(tmp_path, "name: x\nworkers: 2\nlearning_rate: 0.1\n")
    with pytest.raises(SpecError) as e:
        load_spec(p)
    assert "learning_rate" in str(e.value) and f"{p}:3" in str(e.value)


def test_unknown_nested_key(tmp_path):
    p = write(tmp_path, "topology:\n  kind: star\n  link: {rate: 10mbit, latency: 5}\n")
    with pytest.raises(SpecError) as e:
        load_spec(p)
    assert e.value.key == "topology.link.latency" and ":3" in e.value.where


def test_bad_values(tmp_path):
    cases = {
        "algorithm: allreduce-magic\n": "algorithm",
        "workers: two\n": "workers",
        "topology: {kind: ring}\n": "topology.kind",
        "topology: {link: {rate: fast}}\n": "topology.link.rate",
        "workers: 3\ntopology: {hosts: 2}\n": "workers",
        "background: [{src: h1, dst: nowhere}]\n": "background[0].dst",
        "loss_bound: 1.5\n": "loss_bound",
        "name: a\nname: b\n": "name",
        "thresholds: {drop: 100}\n": "thresholds.drop",
        "thresholds: {mark: -1}\n": "thresholds.mark",
        "thresholds: {early: 3}\n": "thresholds.early",
    }
    for text, key in cases.items():
        with pytest.raises(SpecError) as e:
            load_spec(write(tmp_path, text))
        assert e.value.key == key, (text, str(e.value))


def test_rates():
    assert parse_rate("100mbit") == 100e6 and parse_rate("1gbit") == 1e9 and parse_rate(5000) == 5000.0
    with pytest.raises(ValueError):
        parse_rate("quick")


def test_json_round_trip():
    spec = load_spec(EXAMPLES / "demo.yaml")
    assert spec_from_json(spec_to_json(spec)) == spec


def test_overrides_are_validated_like_the_file(tmp_path):
    p = write(tmp_path, "workers: 2\n")
    spec = load_spec(p, {"topology": {"kind": "dumbbell", "hosts": 4, "mtu": 9000}, "steps": 7})
    assert spec.topology.kind == "dumbbell" and spec.topology.mtu == 9000 and spec.steps == 7
    with pytest.raises(SpecError) as e:
        load_spec(p, {"topology": {"knd": "star"}})
    assert e.value.key == "topology.knd"

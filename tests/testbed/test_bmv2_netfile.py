"""``switch: bmv2`` in a run spec: the network file the testbed writes gives every switch p4c's output of dlcp.p4
(P4Info and BMv2 JSON) and the Thrift port its ``simple_switch_grpc`` listens on, so that the controller programs
BMv2 switches as it does dlcp-switch (registers and queues through simple_switch_CLI, docs/controller.md). No
BMv2 needed: what the file says is checked through the controller's own loader."""
from pathlib import Path

import pytest
import yaml

from controller import netfile
from controller.bmv2 import P4cOutput
from testbed.netfile import BMV2_THRIFT_BASE, network_yaml
from testbed.spec import load_spec
from testbed.topos import plan

ROOT = Path(__file__).resolve().parents[2]
P4INFO = ROOT / "tests/switch/p4c_p4info/p4src.dlcp.p4info.txtpb"   # p4c's P4Info of dlcp.p4


def test_bmv2_switches_get_p4cs_output_and_thrift_ports(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("topology: {kind: leaf-spine, hosts: 4}\nworkers: 4\nswitch: bmv2\n")
    spec = load_spec(path)
    (tmp_path / "dlcp.json").write_text("{}")
    out = P4cOutput(tmp_path / "dlcp.json", P4INFO)
    text = network_yaml(plan(spec.topology), spec, out)
    doc = yaml.safe_load(text.split("\n", 1)[1])
    assert (doc["p4info"], doc["device_config"]) == (str(P4INFO), str(tmp_path / "dlcp.json"))
    net = netfile.loads(text, "net.yaml", tmp_path)
    assert len(net.switches) == 4
    for s in net.switches.values():
        assert s.target == "bmv2" and s.thrift_port == BMV2_THRIFT_BASE + s.device_id
    assert len({s.thrift_port for s in net.switches.values()}) == 4


def test_bmv2_without_p4cs_output_is_refused(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("switch: bmv2\n")
    spec = load_spec(path)
    with pytest.raises(ValueError, match="switch: bmv2 needs p4c's output"):
        network_yaml(plan(spec.topology), spec)

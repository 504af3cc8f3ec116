# dlcp: every entry point a user or CI needs. `make test` and `make demo` do all set-up themselves.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.dlcp-setup
PYTEST := $(PY) -m pytest

.PHONY: setup test test-fast test-long test-bmv2 test-shutdown-soak test-loss-soak test-loaded test-torch-suite test-cuda bench report demo p4 proto clean help fuzz

help:
	@echo "make demo       run the main job (training over the emulated P4 network, compared with Gloo)"
	@echo "make test       set up and run the whole test suite"
	@echo "make test-fast  the quick subset (no tests marked slow)"
	@echo "make test-long  the training runs to an accuracy or loss claim (marker long; not part of make test)"
	@echo "make test-shutdown-soak  20 runs of the shutdown-under-loss job (no rank may be reported dead)"
	@echo "make test-loss-soak  the nftables loss scenarios at P=2..5, issue 43's two failures 20 times each (root)"
	@echo "make test-bmv2  the embedded target against p4c and BMv2, differential (needs the P4 toolchain: P4TOOLS=dir)"
	@echo "make test-tofino  the Tofino twin through p4c's Tofino back end (needs scripts/build-tofino-backend.sh's p4c-barefoot)"
	@echo "make test-p4runtime-shell  p4runtime-shell (PyPI, own environment) driving dlcp-switch beside dlcpctl"
	@echo "make test-loaded  tests beside a busy process per core (TESTS=paths, CPU_LOAD=per core; default: all, 1)"
	@echo "make test-torch-suite  PyTorch's distributed test suite on gloo and dlcp, side by side (hours)"
	@echo "make test-cuda  the dlcp backend on CUDA tensors (needs a GPU; not part of make test)"
	@echo "make bench      every benchmark, side by side with its baseline -> bench/results/"
	@echo "make fuzz       every fuzz campaign, FUZZ_SECONDS each (default 60) -> results/fuzz.json"
	@echo "make report     regenerate the tables in docs/ and README.md from the committed results/*.json"
	@echo "make p4         compile the P4 programs in p4src/ (P4Info; p4c-bm2-ss too when installed)"
	@echo "make setup      Debian packages + .venv (idempotent, seconds when done)"
	@echo "make proto      regenerate switch/daemon/mgmt_pb2*.py from switch/daemon/mgmt.proto"

# The stamp is rebuilt only when the dependency list, the set-up script or the C extension changes.
setup: $(STAMP)
$(STAMP): pyproject.toml setup.py scripts/setup.sh host/transport/_rxlane.c host/transport/_txlane.c \
		host/transport/_siphash.h host/transport/_tag.h host/transport/_tagkey.h host/transport/_txstep.h \
		host/transport/_sendrun.h host/_elementwise.c switch/daemon/_portio.c
	scripts/setup.sh
	@touch $@

test: setup
	$(PYTEST) tests

test-fast: setup
	$(PYTEST) -m "not slow" tests

# Training runs to an accuracy or loss claim (marker long, 15-35 s each), kept out of `make test` by its 15-minute
# budget (tests/conftest.py deselects them there); each has a shorter test of the same machinery in `make test`.
test-long: setup
	$(PYTEST) -m long tests

# The embedded target against the real P4 toolchain (tests/bmv2, marker bmv2; docs/switch-target.md "Against BMv2"):
# p4c's P4Info, and differential runs of the same programs, P4Runtime writes and frames on BMv2 simple_switch_grpc
# and dlcp-switch. The toolchain (p4c-bm2-ss, simple_switch_grpc, simple_switch_CLI) comes from P4TOOLS's
# p4tools.env (build-p4-toolchain.sh); without it every test fails saying so. Its PYTHONPATH (BMv2's Python
# packages) is handed only to simple_switch_CLI, run by the system python3 that has the Thrift module.
# The counts go to results/bmv2_differential.json. Not part of `make test`.
P4TOOLS ?= /work/p4tools
test-bmv2: setup
	@if [ -f $(P4TOOLS)/p4tools.env ]; then source $(P4TOOLS)/p4tools.env; \
		else echo "make test-bmv2: no $(P4TOOLS)/p4tools.env (build the P4 toolchain, or give P4TOOLS=dir)"; fi; \
	env -u PYTHONPATH BMV2_CLI_PYTHONPATH="$${PYTHONPATH:-}" BMV2_CLI_PYTHON=/usr/bin/python3 \
		$(PYTEST) -m bmv2 tests/bmv2

# The Tofino twin (p4src/tofino/) through p4c's open Tofino back end (tests/tofino/backend_suite.py, marker tofino;
# docs/p4-tofino.md): it compiles for Tofino 1 (tna) and Tofino 2 (t2na), the committed resource summary and both
# P4Infos are the compiler's, dlcpctl's writes encode against each. p4c-barefoot: $$DLCP_P4C_TOFINO, PATH, or
# $$P4TOOLS/build/p4c-tofino (scripts/build-tofino-backend.sh); without it the tests fail saying so. Not part of
# `make test`, which checks the twin without the back end (tests/tofino/test_*.py).
.PHONY: test-tofino
test-tofino: setup
	$(PYTEST) -m tofino tests/tofino/backend_suite.py

# The job ending that used to kill ranks (P=3, 10% loss, all-reduces, barrier, destroy_process_group), 20 runs; make
# test runs it 3 times (tests/host/test_clean_end.py, docs/transport.md "A clean end").
test-shutdown-soak: setup
	DLCP_SHUTDOWN_RUNS=20 $(PYTEST) tests/host/test_clean_end.py -k shutdown_under_loss

# Loss on real links (tests/host/loss_soak.py): rank processes in network namespaces, nftables dropping, blacking out
# and duplicating DLCP datagrams; every scenario at P=2..5, and DeAR at P=5 under loss and blackouts and the P=3
# shutdown under one-way loss 20 times each (DLCP_LOSS_SOAK_RUNS), about half an hour on 2 cores; make test runs each
# scenario once (tests/host/test_loss_scenarios.py). Runs are recorded in build/loss-soak/.
test-loss-soak: setup
	$(PYTEST) -s -m loss_soak tests/host/loss_soak.py

# The tests on a loaded machine: CPU_LOAD busy processes per core run beside them (tests/cpu_load.py), so a timing
# assumption that holds only when the machine is idle fails here. TESTS narrows it to some files.
TESTS ?= tests
CPU_LOAD ?= 1
test-loaded: setup
	$(PYTEST) --cpu-load=$(CPU_LOAD) $(TESTS)

# A second, standard P4Runtime client (p4runtime-shell 0.0.6 from PyPI, in build/p4runtime-shell because it pins
# protobuf < 3.21) driving dlcp-switch beside dlcpctl; also part of `make test`, which builds the environment on first use.
test-p4runtime-shell: setup
	scripts/p4runtime-shell-venv.sh build/p4runtime-shell
	$(PYTEST) -m p4runtime_shell tests/controller/test_p4runtime_shell.py

# PyTorch's DistributedTest suite against gloo and dlcp; both outcomes to results/torch_suite.json (make report renders
# them into docs/torch-suite.md) and build/torch-suite/summary.md.
test-torch-suite: setup
	$(PYTEST) -m torch_suite tests/host/torch_suite_full.py

# The dlcp backend on CUDA tensors: a machine with a GPU (tests/host/cuda_suite.py is not collected by make test).
test-cuda: setup
	$(PYTEST) -m cuda tests/host/cuda_suite.py

bench: setup
	$(PY) bench/run_all.py

# Every fuzz campaign (tests/fuzz/run.py; docs/fuzzing.md): mutated DLCP datagrams into a live transport (tag off,
# outsider, insider), mutated frames into a live switch, mutated P4Runtime requests, mutated P4 programs; FUZZ_SECONDS
# each, seeded by FUZZ_SEED; the counts go to results/fuzz.json, and from there (make report) to docs/fuzzing.md.
# `make test` runs short fixed-seed versions.
FUZZ_SECONDS ?= 60
FUZZ_SEED ?= 1
fuzz: setup
	$(PY) -m tests.fuzz.run --seconds $(FUZZ_SECONDS) --seed $(FUZZ_SEED) --out results/fuzz.json
	$(PY) -m testbed.report

# Every table in docs/ and README.md that quotes a measurement, from the committed results/*.json (testbed.report;
# docs/evaluation.md through testbed.evaluation), and the few computed figures from the code that computes them
# (A²CiD²'s constants). tests/test_report.py fails when a committed table is stale.
report: setup
	$(PY) -m testbed.report

# The main job: DDP over Gloo against the fair baseline (Gloo's TCP in DLCP's class, ECN TCP on every host) vs
# DLCP (DeAR + bounded loss + priorities + spraying), 3 interleaved repetitions each, on the same emulated
# leaf-spine network with competing TCP traffic (examples/testbed/demo.yaml); prints each side's median and
# interval. DEMO_ARGS=--handicapped adds the old baseline (Gloo in queue 0, default TCP), labelled as such.
demo: setup
	$(VENV)/bin/dlcp-testbed demo $(DEMO_ARGS)

# Regenerate the committed gRPC stubs of the switch management service (switch/daemon/mgmt.proto).
proto: setup
	$(PY) -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. switch/daemon/mgmt.proto

# P4Info (and the generated Python) for every program in p4src/ from the embedded target's front end; the BMv2
# JSON too when p4c-bm2-ss is installed, so both targets are checked from the same source.
p4: setup
	$(PY) -m switch.compile p4src/*.p4 --out-dir p4src/build -I p4src/include
	@if command -v p4c-bm2-ss >/dev/null; then for f in p4src/*.p4; do \
		p4c-bm2-ss -I p4src/include --p4runtime-files p4src/build/$$(basename $$f .p4).bmv2.p4info.txtpb \
			-o p4src/build/$$(basename $$f .p4).json $$f || exit 1; done; \
	else echo "make p4: p4c-bm2-ss not installed: BMv2 JSON not built (the embedded target needs none)"; fi

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis bench/results/*.json bench/results/summary.md

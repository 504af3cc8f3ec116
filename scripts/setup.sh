#!/usr/bin/env bash
# One-command set-up for dlcp (called by `make setup`; the Makefile skips it when its stamp is current).
# 1. Debian packages the project needs (installed when root, otherwise named and the set-up fails).
# 2. .venv built from Debian's /usr/bin/python3 with system site packages, so Debian's Mininet (which installs
#    into /usr/lib/python3/dist-packages) imports inside it.
# 3. The project, editable, with its dev extras; then an import check of everything the tests need.
set -euo pipefail
cd "$(dirname "$0")/.."

SYSTEM_PYTHON=/usr/bin/python3
# python3-venv: venv/ensurepip for the system interpreter; mininet: the testbed; ethtool: offloads off on hosts;
# iproute2: ip netns/veth/tc; tcpdump: captures in debugging and tests; iperf3: TCP baseline in benchmarks;
# iputils-ping: the README's quick-start pings across the switch; nftables: loss, blackouts and duplication in the
# loss scenarios' namespaces (tests/host/test_loss_scenarios.py);
# gcc, libc6-dev, python3-dev: `pip install` compiles the transport's fast lanes (host/transport/_rxlane.c, _txlane.c).
# g++, ninja-build: torch.utils.cpp_extension builds the dlcp c10d backend (host/dlcp_c10d.cpp, host/backend_ext.py).
DEB_PACKAGES=(python3 python3-venv python3-dev gcc g++ ninja-build libc6-dev mininet ethtool iproute2 tcpdump iperf3
              iputils-ping openssl nftables)

missing=()
for p in "${DEB_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ]; then
        echo "setup: installing Debian packages: ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -q "${missing[@]}" >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q "${missing[@]}" >/dev/null; }
    else
        echo "setup: missing Debian packages: ${missing[*]}" >&2
        echo "setup: run as root, or: sudo apt-get install ${missing[*]}" >&2
        exit 1
    fi
fi

if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv from $SYSTEM_PYTHON (with system site packages, for Mininet)"
    "$SYSTEM_PYTHON" -m venv --system-site-packages .venv
fi
echo "setup: installing dlcp (editable) and its pinned dependencies"
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'
.venv/bin/python - <<'PY'
import importlib, sys
for name in ("torch", "finsy", "scapy", "pyroute2", "numpy", "grpc", "host", "host.transport._rxlane",
             "host.transport._txlane", "switch", "controller", "testbed"):
    importlib.import_module(name)
import mininet.net  # noqa: E402  the real Mininet, not our testbed directory
assert "dist-packages" in mininet.net.__file__, mininet.net.__file__
import torch
print(f"setup: ok (python {sys.version.split()[0]}, torch {torch.__version__}, mininet {mininet.net.__file__})")
PY
# The dlcp backend's C++ part, built against this torch now rather than by the first job (cached in torch's
# extension directory; a changed source is rebuilt on first use).
echo "setup: building the dlcp c10d backend (host/dlcp_c10d.cpp)"
.venv/bin/python -m host.backend_ext >/dev/null

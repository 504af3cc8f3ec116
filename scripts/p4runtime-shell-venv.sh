#!/usr/bin/env bash
# The virtual environment of p4runtime-shell 0.0.6 (PyPI) for tests/controller/test_p4runtime_shell.py: a second,
# standard P4Runtime client. It has its own environment because it pins protobuf < 3.21 and p4runtime 1.4.1,
# which the project's .venv (protobuf 6, finsy) cannot hold. Idempotent: seconds when already there.
set -euo pipefail
DIR="${1:-build/p4runtime-shell}"
STAMP="$DIR/.p4runtime-shell-0.0.6"
if [[ -f "$STAMP" ]]; then exit 0; fi
rm -rf "$DIR"
python3 -m venv "$DIR"
"$DIR/bin/pip" install --quiet --disable-pip-version-check p4runtime-shell==0.0.6
"$DIR/bin/python" -c "import p4runtime_sh.shell"
touch "$STAMP"
echo "p4runtime-shell 0.0.6 in $DIR"

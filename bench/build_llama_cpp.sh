#!/usr/bin/env bash
# Builds llama.cpp from the llama-cpp-python source distribution on PyPI (the only
# registry this project reaches), with native CPU flags, and converts the default
# model to GGUF F32 and BF16 with the converter that sdist carries.
#
#   bench/build_llama_cpp.sh [HF_MODEL_DIR]
#
# Cached under ~/.cache/hubzoo/llama.cpp-<version>-<sha256 of the sdist>/ (build
# and binaries) and ~/.cache/hubzoo/gguf/<model>-<sha of the sdist>-{f32,bf16}.gguf.
# Prints the cache directory on its last line. Re-running is a no-op once built.
set -euo pipefail

VERSION=0.3.36 # pinned: the llama.cpp this sdist vendors is the peer we report
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
CACHE="${HUBZOO_CACHE:-$HOME/.cache/hubzoo}"
mkdir -p "$CACHE/downloads"

SDIST="$CACHE/downloads/llama_cpp_python-$VERSION.tar.gz"
if [[ ! -f "$SDIST" ]]; then
  tmp="$(mktemp -d)"
  "$PY" -m pip download "llama-cpp-python==$VERSION" --no-deps --no-binary :all: \
    -d "$tmp" >&2
  mv "$tmp/llama_cpp_python-$VERSION.tar.gz" "$SDIST"
  rm -rf "$tmp"
fi
SHA="$(sha256sum "$SDIST" | cut -c1-12)"
# NO_AMX=1: a second build with AMX off, in its own folder. On an AMX host
# (Xeon, Debian's GCC 12) the vendored ggml-cpu AMX kernels die of SIGILL at
# their first tile load in any quantized product of more than one row
# (prefill, batched decode): the tile config they build on the stack is not
# what _tile_loadconfig receives (llama.cpp pull 26954, open). Its decode at
# batch 1 does run there, and faster than without AMX, so bench/quant.py
# times both builds on such a host. Explicit -mno-amx-* win over
# -march=native in GCC.
NO_AMX_FLAGS=""
DIR="$CACHE/llama.cpp-$VERSION-$SHA"
if [[ "${NO_AMX:-0}" == 1 ]]; then
  NO_AMX_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  DIR="$CACHE/llama.cpp-noamx-$VERSION-$SHA"
fi
SRC="$DIR/src"
BIN="$DIR/bin"

TOOLS=(llama-bench llama-batched-bench llama-quantize llama-perplexity llama-server)
missing=0
for t in "${TOOLS[@]}"; do [[ -x "$BIN/$t" ]] || missing=1; done
if [[ $missing == 1 ]]; then
  # A configured build is reused (a tool added later builds incrementally).
  if [[ ! -f "$DIR/build/build.ninja" ]]; then
    rm -rf "$SRC"
    mkdir -p "$SRC"
    tar xzf "$SDIST" -C "$SRC" --strip-components=3 \
      "llama_cpp_python-$VERSION/vendor/llama.cpp"
  fi
  # (Re)configured each time a tool is missing: cheap, and it turns on what a
  # tree configured for fewer tools lacks (the server).
  cmake -S "$SRC" -B "$DIR/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=ON -DGGML_OPENMP=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
    -DBUILD_SHARED_LIBS=OFF -DCMAKE_C_FLAGS="$NO_AMX_FLAGS" -DCMAKE_CXX_FLAGS="$NO_AMX_FLAGS" >&2
  nice -n 10 cmake --build "$DIR/build" -j "${JOBS:-2}" --target "${TOOLS[@]}" >&2
  mkdir -p "$BIN"
  for t in "${TOOLS[@]}"; do cp "$DIR/build/bin/$t" "$BIN/"; done
fi

MODEL="${1:-$ROOT/models/SmolLM2-135M-Instruct}"
if [[ -d "$MODEL" ]]; then
  name="$(basename "$MODEL")"
  mkdir -p "$CACHE/gguf"
  for t in f32 bf16; do
    out="$CACHE/gguf/$name-$SHA-$t.gguf"
    if [[ ! -f "$out" ]]; then
      PYTHONPATH="$SRC/gguf-py" "$PY" "$SRC/convert_hf_to_gguf.py" "$MODEL" \
        --outtype "$t" --outfile "$out.tmp" >&2
      mv "$out.tmp" "$out"
    fi
  done
fi
echo "$DIR"

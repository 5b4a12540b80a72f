#!/usr/bin/env bash
# Builds llama.cpp's own C++ tools — the peer edgespec is compared with — from the
# llama.cpp sources vendored in the pinned llama-cpp-python sdist, so both run the same
# kernels: llama-speculative-simple (prompt lookup: --spec-type ngram-simple / ngram-mod)
# llama-completion (plain decoding), llama-batched-bench (many sequences per decode,
# the peer of `generate --parallel`) and llama-server (json_schema with prompt lookup,
# the peer of structured output; built without its web UI and without HTTPS). Only those
# targets are built (~10 min on 2 cores).
# Prints the bin directory. Usage: bash benchmarks/peers/build_peer_tools.sh [DEST]
set -euo pipefail
VERSION=0.3.36
DEST="${1:-${XDG_CACHE_HOME:-$HOME/.cache}/edgespec/peer-llama.cpp-$VERSION}"
BIN="$DEST/build/bin"
if [ -x "$BIN/llama-speculative-simple" ] && [ -x "$BIN/llama-completion" ] && [ -x "$BIN/llama-batched-bench" ] \
   && [ -x "$BIN/llama-server" ]; then
  echo "$BIN"; exit 0
fi
mkdir -p "$DEST"
if [ ! -f "$DEST/src/CMakeLists.txt" ]; then
  tmp=$(mktemp -d)
  python3 -m pip download --quiet --no-deps --no-binary :all: -d "$tmp" "llama-cpp-python==$VERSION" >&2
  tar -xzf "$tmp"/llama_cpp_python-$VERSION.tar.gz -C "$tmp"
  rm -rf "$DEST/src"
  mv "$tmp/llama_cpp_python-$VERSION/vendor/llama.cpp" "$DEST/src"
  rm -rf "$tmp"
fi
# as .ci/run builds llama-cpp-python: no AMX where a VM reports it without enabling it
if [ "$(uname -m)" = x86_64 ] && grep -qw amx_tile /proc/cpuinfo; then
  export CFLAGS="${CFLAGS:-} -mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  export CXXFLAGS="${CXXFLAGS:-} -mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
fi
cmake -S "$DEST/src" -B "$DEST/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=ON >&2
cmake --build "$DEST/build" -j "${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
  --target llama-speculative-simple llama-completion llama-batched-bench llama-server >&2
echo "$BIN"

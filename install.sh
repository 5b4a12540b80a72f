#!/bin/sh
# edgespec's install (the README's command): llama-cpp-python, pinned in pyproject.toml,
# built for this machine, then whatever pip arguments follow, e.g. '.[models]'.
#
#   sh install.sh [--rebuild] [--dry-run] [PIP_ARGS...]
#
# It installs into the Python that `python3` is (the activated virtualenv), or $PYTHON.
#
# llama-cpp-python builds llama.cpp from source for the CPU it is built on (-march=native).
# Where an x86-64 CPU lists Intel AMX (amx_tile in /proc/cpuinfo), the build leaves AMX
# out: some virtual machines list it without enabling it, and its kernels then end the
# process with "Illegal instruction" at the first decode (seen on a Xeon under
# Firecracker). The machines edgespec is for have no AMX; without it llama.cpp runs its
# AVX-512/AVX2 kernels.
#
# pip's own wheel cache ignores CFLAGS and CMAKE_ARGS (it would hand back a wheel built
# with other flags), so the wheel is built once into a cache of ours, keyed by the version
# and the flags: ${XDG_CACHE_HOME:-~/.cache}/edgespec/wheels/llama_cpp_python-VERSION[-rpc][-noamx][-HASH]
# (-rpc: CMAKE_ARGS=-DGGML_RPC=on; HASH: any other CMAKE_ARGS, CFLAGS or CXXFLAGS given).
#
#   --rebuild   build the wheel again even if the cache has one
#   --dry-run   print the flags and the cache folder, build and install nothing
#
# EDGESPEC_CPUINFO names the file read instead of /proc/cpuinfo (for the tests).
set -eu

ROOT=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
rebuild=0
dry_run=0
while [ $# -gt 0 ]; do
  case $1 in
    --rebuild) rebuild=1 ;;
    --dry-run) dry_run=1 ;;
    --) shift; break ;;
    *) break ;;
  esac
  shift
done

say() { echo "install.sh: $*" >&2; }

VERSION=$(sed -n 's/.*"llama-cpp-python==\([0-9][0-9.]*\)".*/\1/p' "$ROOT/pyproject.toml" | head -n 1)
if [ -z "$VERSION" ]; then
  say "no llama-cpp-python==VERSION pin found in $ROOT/pyproject.toml"
  exit 1
fi

# The cache key: the caller's flags as given, before ours are added.
given="CMAKE_ARGS=${CMAKE_ARGS:-}|CFLAGS=${CFLAGS:-}|CXXFLAGS=${CXXFLAGS:-}"
tag=""
other_cmake=${CMAKE_ARGS:-}
case " ${CMAKE_ARGS:-} " in
  *" -DGGML_RPC=on "* | *" -DGGML_RPC=ON "*)
    tag="-rpc"
    other_cmake=$(printf '%s\n' " ${CMAKE_ARGS:-} " | sed 's/ -DGGML_RPC=[oO][nN] / /g' | tr -s ' ' | sed 's/^ //; s/ $//')
    ;;
esac

machine=$(uname -m)
cpuinfo=${EDGESPEC_CPUINFO:-/proc/cpuinfo}
noamx=""
case $machine in
  x86_64 | amd64 | AMD64)
    if [ -r "$cpuinfo" ] && grep -qw amx_tile "$cpuinfo"; then
      noamx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
      tag="$tag-noamx"
    fi
    ;;
esac

if [ -n "$other_cmake" ] || [ -n "${CFLAGS:-}" ] || [ -n "${CXXFLAGS:-}" ]; then
  tag="$tag-$(printf '%s' "$given" | cksum | cut -d ' ' -f 1)"
fi

if [ -n "$noamx" ]; then
  CFLAGS="${CFLAGS:+$CFLAGS }$noamx"
  CXXFLAGS="${CXXFLAGS:+$CXXFLAGS }$noamx"
  export CFLAGS CXXFLAGS
fi

WHEELS="${XDG_CACHE_HOME:-$HOME/.cache}/edgespec/wheels/llama_cpp_python-$VERSION$tag"

if [ "$dry_run" = 1 ]; then
  echo "version=$VERSION"
  echo "machine=$machine"
  echo "CMAKE_ARGS=${CMAKE_ARGS:-}"
  echo "CFLAGS=${CFLAGS:-}"
  echo "CXXFLAGS=${CXXFLAGS:-}"
  echo "wheels=$WHEELS"
  exit 0
fi

wheel() {
  for w in "$WHEELS"/llama_cpp_python-"$VERSION"-*.whl; do
    if [ -f "$w" ]; then
      echo "$w"
      return 0
    fi
  done
  return 1
}

if [ "$rebuild" = 1 ]; then
  rm -f "$WHEELS"/llama_cpp_python-"$VERSION"-*.whl
fi
if ! wheel >/dev/null; then
  say "building llama-cpp-python $VERSION from source${noamx:+ without Intel AMX (this CPU lists amx_tile)}${CMAKE_ARGS:+ with CMAKE_ARGS=$CMAKE_ARGS}: a few minutes, once (cached in $WHEELS)"
  mkdir -p "$WHEELS"
  build=$(mktemp -d "$WHEELS/.build.XXXXXX")
  trap 'rm -rf "$build"' EXIT
  "$PY" -m pip wheel --no-cache-dir --no-deps "llama-cpp-python==$VERSION" -w "$build"
  for w in "$build"/llama_cpp_python-"$VERSION"-*.whl; do
    mv "$w" "$WHEELS"/ # a finished wheel only: an interrupted build leaves none behind
  done
  rm -rf "$build"
  trap - EXIT
fi
WHEEL=$(wheel)
say "installing $WHEEL"
"$PY" -m pip install --force-reinstall --no-deps "$WHEEL"
"$PY" -m pip install "$WHEEL" "$@" # its dependencies, and what was asked for

#!/usr/bin/env bash
# Prepare what the GPU machine cannot fetch (it has no network): run HERE, on a machine
# that reaches PyPI, from the repository root:
#
#     bash benchmarks/gpu/prepare.sh [--check-build]
#
# It writes benchmarks/gpu/carry/ (ignored by git; the device tool's `carry` list names it):
#   llama_cpp_python-0.3.36-cuda-src.tar.gz  the llama-cpp-python 0.3.36 sdist cut down to what
#                                            a CUDA (or CPU) build of the library needs: no
#                                            models/, docs/, tests, examples, tools, web UI,
#                                            mtmd, or backends other than CPU and CUDA
#   wheels/*.whl                             the pure-Python wheels the GPU image lacks
#                                            (gguf, diskcache); everything else edgespec and
#                                            gguf need (numpy, typer, rich, psutil, jinja2,
#                                            huggingface-hub, pyyaml, tqdm, requests) is there
# and prints the folder's size, which must stay under the tool's 64 MiB.
#
# --check-build also builds the trimmed sdist for the CPU in a throwaway venv and imports
# it (about 4 minutes on 2 cores): proof that nothing the build needs was cut.
set -euo pipefail

LLAMA_VERSION=0.3.36
GGUF_VERSION=0.19.0
DISKCACHE_VERSION=5.6.3

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
carry="$here/carry"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
PY="${PYTHON:-python3}"

mkdir -p "$carry/wheels"
rm -f "$carry"/wheels/*.whl "$carry"/llama_cpp_python-*.tar.gz

# 1. the wheels the GPU image lacks (pure Python: any platform tag resolves them)
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 -d "$carry/wheels" \
    "gguf==$GGUF_VERSION" "diskcache==$DISKCACHE_VERSION"

# 2. the sdist, trimmed (SDIST=path reuses one already downloaded). pip prepares an
#    sdist's metadata in an isolated build env: this takes a minute or two.
sdist="${SDIST:-}"
if [ -z "$sdist" ]; then
    "$PY" -m pip download -q --no-deps --no-binary :all: -d "$work" "llama-cpp-python==$LLAMA_VERSION"
    sdist="$work/llama_cpp_python-$LLAMA_VERSION.tar.gz"
fi
"$PY" - "$sdist" "$carry/llama_cpp_python-$LLAMA_VERSION-cuda-src.tar.gz" <<'PYEOF'
"""Copy the sdist, keeping only what CMake needs for a CPU or CUDA build without mtmd."""
import re
import sys
import tarfile

src, dst = sys.argv[1], sys.argv[2]
L = "vendor/llama.cpp/"
KEEP_TOP = {"CMakeLists.txt", "pyproject.toml", "README.md", "LICENSE.md", "PKG-INFO"}
KEEP_DIRS = ("llama_cpp/", L + "cmake/", L + "include/", L + "src/", L + "common/", L + "vendor/",
             L + "licenses/", L + "ggml/cmake/", L + "ggml/include/",
             L + "ggml/src/ggml-cpu/", L + "ggml/src/ggml-cuda/")
KEEP_FILES = {L + "CMakeLists.txt", L + "LICENSE", L + "ggml/CMakeLists.txt"}
# files straight inside ggml/src/ (its backend folders other than cpu and cuda are dropped)
GGML_SRC_FILE = re.compile(re.escape(L) + r"ggml/src/[^/]+$")


def keep(rel: str) -> bool:
    return (rel in KEEP_TOP or rel in KEEP_FILES or rel.startswith(KEEP_DIRS)
            or bool(GGML_SRC_FILE.match(rel)))


n_in = n_out = 0
with tarfile.open(src) as tin, tarfile.open(dst, "w:gz", compresslevel=9) as tout:
    for m in tin:
        n_in += 1
        root, _, rel = m.name.partition("/")
        if m.isdir() or not rel or not keep(rel):
            continue
        if "/tests/" in rel or rel.endswith((".md", ".txt")) and "CMakeLists" not in rel and rel not in KEEP_TOP:
            continue
        tout.addfile(m, tin.extractfile(m) if m.isfile() else None)
        n_out += 1
print(f"trimmed sdist: kept {n_out} of {n_in} entries -> {dst}")
PYEOF

# what travels (the tool refuses more than 64 MiB together with the working tree)
du -sh "$carry"/* "$carry"/wheels/* | sed 's/^/  /'
total=$(du -sb "$carry" | cut -f1)
echo "carry folder: $((total / 1024)) KiB (limit for the whole trip: 65536 KiB)"
[ "$total" -lt $((48 * 1024 * 1024)) ] || { echo "carry folder too large" >&2; exit 1; }

if [ "${1:-}" = "--check-build" ]; then
    # Build the trimmed sdist for the CPU exactly as run.sh builds it for CUDA, minus CUDA.
    "$PY" -m venv "$work/venv"
    "$work/venv/bin/pip" install -q "scikit-build-core[pyproject]>=0.9.2" numpy typing-extensions jinja2 \
        "$carry"/wheels/diskcache-*.whl
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
        "$work/venv/bin/pip" install --no-deps --no-index --no-build-isolation \
        "$carry/llama_cpp_python-$LLAMA_VERSION-cuda-src.tar.gz"
    "$work/venv/bin/python" -c "import llama_cpp; print('built and imported llama_cpp', llama_cpp.__version__)"
fi

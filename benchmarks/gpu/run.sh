#!/usr/bin/env bash
# The whole GPU check in one command, for the lent NVIDIA H200 (no network there). Run from
# the repository root with benchmarks/gpu/carry/ present (bash benchmarks/gpu/prepare.sh makes
# it here; the device tool's `carry` takes it along):
#
#     bash benchmarks/gpu/run.sh
#
# 1. installs the carried wheels (gguf, diskcache) into /tmp/edgespec-site;
# 2. starts writing the synthetic Qwen2.5 0.5B, 1.5B and 7B models (synth_gguf.py) in the
#    background, while it
# 3. builds llama-cpp-python 0.3.36 with CUDA for this GPU only (sm_90) from the trimmed sdist;
# 4. installs edgespec from this checkout (--no-deps);
# 5. runs measure.py under what is left of the time budget, then to_profile.py.
#
# Everything lands in $OUT (default ./gpu-out), five files (the tool returns at most eight):
# gpu_results.json (written after every phase, so a run cut short still returns data),
# h200.toml (the profile made from it), run.log (steps, tool versions, nvidia-smi, small
# logs), build.log (its last 2 MB) and measure.log. Budgets, in seconds:
# TOTAL_S (default 420) for the whole script, BUILD_S (default 300) for the build.
#
# SMOKE=1 rehearses the script on a CPU machine whose $PYTHON already has llama_cpp: no
# build, the tiny synthetic model in every role, small measurement settings. (With a CPU
# wheel split into carry/cuda-wheel/ and REQUIRE_GPU=0 it rehearses the carried-wheel path.)
set -uo pipefail

T0=$(date +%s)
TOTAL_S=${TOTAL_S:-420}
BUILD_S=${BUILD_S:-300}
OUT=${OUT:-$PWD/gpu-out}
PY=${PYTHON:-python3}
HERE=benchmarks/gpu
CARRY=$HERE/carry
SITE=${SITE:-/tmp/edgespec-site}
MODELS=${MODELS_DIR:-/tmp/edgespec-models}
RESULTS=$OUT/gpu_results.json
mkdir -p "$OUT" "$SITE" "$MODELS"
export PYTHONPATH=$SITE PYTHONUNBUFFERED=1
if [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi

elapsed() { echo $(( $(date +%s) - T0 )); }
log() { echo "[run.sh +$(elapsed)s] $*" | tee -a "$OUT/run.log"; }
# a results file that says why nothing was measured (measure.py overwrites it when it runs)
fail() {
    log "FAILED: $1"
    "$PY" - "$RESULTS" "$1" "$2" <<'EOF'
import json, sys
path, why, logf = sys.argv[1:4]
try:
    tail = open(logf, encoding="utf-8", errors="replace").read()[-6000:]
except OSError:
    tail = ""
json.dump({"schema": 1, "tool": "benchmarks/gpu/run.sh", "complete": False, "failed": why, "log_tail": tail},
          open(path, "w"), indent=1)
EOF
    tail -c 3000 "$2"
    exit 1
}

# a small log's content goes into run.log
keep() { { echo "----- $1"; cat "$1"; } >> "$OUT/run.log" 2>&1; rm -f "$1"; }
TMPL=$(mktemp -d)

log "start on $(hostname): $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
{ nvidia-smi; nvcc --version; cmake --version; "$PY" --version; command -v "$PY";
  "$PY" -m pip show scikit-build-core numpy 2>/dev/null | grep -E '^(Name|Version)'; } > "$TMPL/tools.txt" 2>&1
keep "$TMPL/tools.txt"

ls "$CARRY"/llama_cpp_python-*-cuda-src.tar.gz "$CARRY"/wheels/gguf-*.whl >/dev/null 2>&1 \
    || fail "benchmarks/gpu/carry/ is missing: run benchmarks/gpu/prepare.sh and name the folder in carry" "$OUT/run.log"

# 1. wheels
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$CARRY"/wheels/*.whl \
    > "$TMPL/pip.log" 2>&1 || fail "installing the carried wheels" "$TMPL/pip.log"
keep "$TMPL/pip.log"

# 2. the models, in the background (numpy and disk; the build below takes the cores)
if [ "${SMOKE:-0}" = 1 ]; then SHAPES=${SHAPES:-"tiny tiny tiny"}; fi
SHAPES=${SHAPES:-"qwen2.5-0.5b qwen2.5-1.5b qwen2.5-7b"}  # the roles 0.5B, 1.5B, 7B
"$PY" "$HERE/synth_gguf.py" "$MODELS" $(echo $SHAPES | tr ' ' '\n' | sort -u) > "$TMPL/models.log" 2>&1 &
GEN=$!
read -r F05 F15 F7 <<< "$(for s in $SHAPES; do printf '%s ' "$MODELS/$s-synthetic-q4_k_m.gguf"; done)"

# 3. llama-cpp-python with CUDA, sm_90 only. f16-q8_0 is the K/V cache pair of edgespec's
#    batch-invariant kernels (llama.py); without its FlashAttention instance CUDA converts
#    K and V to f16 on every call.
build_wheel() {  # into $WHEELS; hands the wheel back in $OUT/cuda-wheel/ for a later run
    log "building llama-cpp-python (CUDA, sm_90; budget ${BUILD_S} s)"
    export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
    export CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90-real -DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF \
-DGGML_CUDA_FA_QUANTS=q4_0-q4_0,q8_0-q8_0,f16-f16,bf16-bf16,f16-q8_0 ${EXTRA_CMAKE_ARGS:-}"
    timeout "$BUILD_S" "$PY" -m pip wheel --no-deps --no-index --no-build-isolation --no-cache-dir -w "$WHEELS" \
        "$CARRY"/llama_cpp_python-*-cuda-src.tar.gz > "$OUT/build.log" 2>&1
    local rc=$?
    if [ $rc -ne 0 ]; then
        kill "$GEN" 2>/dev/null
        fail "building llama-cpp-python (exit $rc$([ $rc -eq 124 ] && echo ': over BUILD_S'), see build.log)" \
            "$OUT/build.log"
    fi
    # in parts under the tool's 16 MiB a file, three at most; carried back in
    # benchmarks/gpu/carry/cuda-wheel/, they spare a rerun the build
    local w
    w=$(ls "$WHEELS"/*.whl)
    if [ "$(stat -c %s "$w")" -le $(( 45 * 1024 * 1024 )) ]; then
        mkdir -p "$OUT/cuda-wheel" && split -b 15M -a 2 "$w" "$OUT/cuda-wheel/$(basename "$w").part-"
    fi
}

if [ "${SMOKE:-0}" = 1 ]; then
    log "SMOKE: no build, using $("$PY" -c 'import llama_cpp; print(llama_cpp.__file__)')"
    MEASURE_ARGS=${MEASURE_ARGS:-"--n-gpu-layers 0 --repeats 2 --max-tokens 16 --prompts 1 --spec-repeats 1 --ks 1,2 --long-position 300 --n-ctx 512"}
else
    WHEELS=$(mktemp -d)
    part=$(ls "$CARRY"/cuda-wheel/*.whl.part-aa 2>/dev/null | head -1)
    if [ -n "$part" ]; then  # a wheel an earlier run built and handed back
        cat "${part%.part-aa}".part-* > "$WHEELS/$(basename "${part%.part-aa}")"
        log "using the carried CUDA wheel $(basename "${part%.part-aa}")"
    else
        build_wheel
    fi
    "$PY" -m pip install -q --no-deps --no-index --no-cache-dir --target "$SITE" "$WHEELS"/*.whl \
        >> "$OUT/build.log" 2>&1 || fail "installing the llama-cpp-python wheel" "$OUT/build.log"
    "$PY" -c "import llama_cpp; assert llama_cpp.llama_supports_gpu_offload() or '${REQUIRE_GPU:-1}' == '0', \
'this build cannot offload'" >> "$OUT/build.log" 2>&1 \
        || fail "the built llama_cpp does not import or cannot offload" "$OUT/build.log"
    log "llama-cpp-python with CUDA installed"
fi

# 4. edgespec itself
if ! "$PY" -m pip install -q --no-deps --no-index --no-build-isolation --no-cache-dir --target "$SITE" . \
        > "$TMPL/pip-edgespec.log" 2>&1; then
    # no wheel-building setuptools there: lay the pure-Python package out as its wheel would
    log "pip could not build edgespec (see below); copying the package instead"
    mkdir -p "$SITE/edgespec" && cp -r edgespec/. "$SITE/edgespec/" \
        || fail "installing edgespec" "$TMPL/pip-edgespec.log"
fi
keep "$TMPL/pip-edgespec.log"

wait "$GEN" || fail "writing the synthetic models" "$TMPL/models.log"
log "models written"
keep "$TMPL/models.log"

# 5. the measurements, under what is left (30 s kept for to_profile and the copy back)
LEFT=$(( TOTAL_S - $(elapsed) - 30 ))
log "measuring (budget ${LEFT} s)"
# run from outside the checkout so that the installed edgespec is the one imported; llama.cpp's
# own log (offload, kernels, CUDA graphs) goes to measure.log with the progress
(cd /tmp && EDGESPEC_LLAMA_VERBOSE=${EDGESPEC_LLAMA_VERBOSE:-1} timeout $(( LEFT + 60 )) "$PY" "$OLDPWD/$HERE/measure.py" --out "$RESULTS" --budget-s "$LEFT" \
    --model "qwen2.5-0.5b=$F05" --model "qwen2.5-1.5b=$F15" --model "qwen2.5-7b=$F7" \
    --pair qwen2.5-0.5b:qwen2.5-1.5b --pair qwen2.5-0.5b:qwen2.5-7b --pair qwen2.5-1.5b:qwen2.5-7b \
    --spec-model qwen2.5-1.5b ${MEASURE_ARGS:-}) 2>&1 | tee "$OUT/measure.log"
log "measure.py exit ${PIPESTATUS[0]}"

"$PY" "$HERE/to_profile.py" "$RESULTS" --name h200 --out "$OUT/h200.toml" > "$TMPL/to_profile.log" 2>&1 \
    && log "profile written: h200.toml" || log "to_profile failed"
keep "$TMPL/to_profile.log"
[ -f "$OUT/build.log" ] && tail -c 2000000 "$OUT/build.log" > "$OUT/build.log.tmp" && mv "$OUT/build.log.tmp" "$OUT/build.log"
log "done"

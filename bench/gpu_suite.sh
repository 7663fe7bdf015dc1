#!/usr/bin/env bash
# Everything that needs an NVIDIA GPU, in one go: install the packages, run the
# plugin tests with CUDA, then the RMSNorm benchmark and the dispatch benchmark.
#
#   bash bench/gpu_suite.sh OUT_DIR [coop] [persist] [claunch] [cluster] [tests] [coretests] [bench] [explore] [stability] [wins] [longrows] [inductor] [harness] [addressing] [weight] [wshift] [default] [space] [body] [gluon] [flush] [placement] [persistrows] [tma] [cold] [agree] [plan] [autobuild] [native] [dispatch] [dispatch_torchcheck] [overhead] [overhead_torchcheck]
#
# No network is needed: the three packages are built from this checkout
# (setuptools must be installed); wheels under .whl/ (e.g. liger-kernel) are
# installed too when present. Results land in OUT_DIR: suite.log, pytest.log,
# rmsnorm.{json,md,png}, explore.json, dispatch.json.
set -uo pipefail
OUT_DIR=${1:?usage: gpu_suite.sh OUT_DIR [stages...]}
shift
STAGES=${*:-tests bench dispatch}
mkdir -p "$OUT_DIR"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
SITE=$(mktemp -d)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
exec > >(tee -a "$OUT_DIR/suite.log") 2>&1
echo "== $(date -u) on $(hostname); stages: $STAGES"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv || true

if ls "$ROOT"/.whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$ROOT"/.whl/*.whl || exit 1
fi
"$PY" -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --target "$SITE" \
  "$ROOT" "$ROOT/plugins/cuda" "$ROOT/plugins/rmsnorm" || exit 1
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -c "import torch, triton, flyautotune as fat; from flyautotune.tuning import fastpath; print('torch', torch.__version__, 'triton', triton.__version__, 'plugins', sorted(fat.plugin_manager().plugin_infos), 'C hit path', fastpath.native_type())"

status=0
# probe SCRIPT MD [ARGS...]: a bench/ script writing into OUT_DIR, its printout also kept as OUT_DIR/MD
probe() {
  local script=$1 md=$2
  shift 2
  "$PY" "$ROOT/bench/$script" --out "$OUT_DIR" "$@" | tee "$OUT_DIR/$md" || status=1
}
for stage in $STAGES; do
  case $stage in
    coop)
      echo "== the cooperative split's barrier (a child process with a deadline); stops the suite if it fails"
      (cd "$ROOT" && "$PY" -m pytest -q -p no:cacheprovider -rs plugins/rmsnorm/tests/test_coop_gpu.py 2>&1 \
        | tee "$OUT_DIR/pytest_coop.log"; exit "${PIPESTATUS[0]}") || { echo "== coop failed: stopping"; exit 1; } ;;
    persist)
      echo "== the persistent split's barrier (a child process with a deadline); stops the suite if it fails"
      (cd "$ROOT" && "$PY" -m pytest -q -p no:cacheprovider -rs plugins/rmsnorm/tests/test_persist_gpu.py 2>&1 \
        | tee "$OUT_DIR/pytest_persist.log"; exit "${PIPESTATUS[0]}") || { echo "== persist failed: stopping"; exit 1; } ;;
    claunch)
      echo "== the direct C launch (claunch) on the GPU"
      (cd "$ROOT" && "$PY" -m pytest -q -p no:cacheprovider -rs plugins/rmsnorm/tests/test_claunch.py 2>&1 \
        | tee "$OUT_DIR/pytest_claunch.log") || status=1 ;;
    tests)
      echo "== tests"
      XDIST=$("$PY" -c "import xdist" 2>/dev/null && echo "-n 8" || true)
      # TESTS_K narrows the run to the tests a change touches (pytest's -k expression)
      (cd "$ROOT" && "$PY" -m pytest -q -p no:cacheprovider -rs --durations=10 $XDIST ${TESTS_K:+-k "$TESTS_K"} \
        plugins/cuda/tests plugins/rmsnorm/tests tests/test_timing.py 2>&1 | tee "$OUT_DIR/pytest.log") || status=1 ;;
    coretests)
      echo "== core tests that have GPU cases (streams, fast path, CLI on a GPU)"
      (cd "$ROOT" && "$PY" -m pytest -q -p no:cacheprovider -rs tests/test_streams.py tests/test_fast_path.py tests/test_tcheck.py \
        tests/test_autotune_select.py tests/test_search_decision.py tests/test_output_check_triton.py tests/test_build_names_triton.py tests/test_cli_rmsnorm.py 2>&1 \
        | tee "$OUT_DIR/pytest_core.log") || status=1 ;;
    overhead)
      echo "== autotune layer host overhead"
      "$PY" "$ROOT/bench/overhead.py" | tee "$OUT_DIR/overhead.md" || status=1 ;;
    bench)
      echo "== bench"
      "$PY" "$ROOT/bench/rmsnorm.py" --out "$OUT_DIR" ${BENCH_ARGS:-} || status=1 ;;
    explore)
      echo "== bench + explore"
      "$PY" "$ROOT/bench/rmsnorm.py" --out "$OUT_DIR" --explore ${BENCH_ARGS:-} || status=1 ;;
    stability)
      echo "== stability: five forced searches per shape in fresh processes, winners in graph replay"
      "$PY" "$ROOT/bench/stability.py" --out "$OUT_DIR" --profile ${STABILITY_SHAPES:+--shapes "$STABILITY_SHAPES"} | tee "$OUT_DIR/stability.md" || status=1 ;;
    wins)
      echo "== wins: every candidate of the space in graph replay against the search's pick"
      "$PY" "$ROOT/bench/stability.py" --out "$OUT_DIR" --wins "${WINS_SHAPES:-256x8192:bf16,256x8192:fp32,4096x8192:bf16,32x4096:bf16,4096x4096:bf16,65536x1024:bf16,8192x16384:bf16,1024x65536:bf16,4096x1000:bf16,32x3000:bf16,262144x256:bf16,1x65536:bf16}" \
        | tee "$OUT_DIR/wins.md" || status=1 ;;
    cluster)
      echo "== the cluster body (COOP=3, CuTe DSL): every SPLIT x threads it takes, against QuACK and the space"
      probe cluster_probe.py cluster_probe.md ${CLUSTER_ARGS:-} ;;
    inductor)
      echo "== torch.compile's generated kernels and launch configs for short-row shapes"
      "$PY" "$ROOT/bench/inductor_code.py" --out "$OUT_DIR" ${INDUCTOR_SHAPES:+--shapes "$INDUCTOR_SHAPES"} \
        | tee "$OUT_DIR/inductor.md" || status=1 ;;
    longrows)
      echo "== long rows: every candidate of the space against QuACK, graph replay"
      "$PY" "$ROOT/bench/long_rows.py" --out "$OUT_DIR" ${LONG_ROWS_SHAPES:+--shapes "$LONG_ROWS_SHAPES"} \
        | tee "$OUT_DIR/long_rows.md" || status=1 ;;
    addressing)
      echo "== row addressing (WIDE, PACKED) for the tuned config of each shape"
      probe addressing_probe.py addressing.md ${ADDRESSING_ARGS:-} ;;
    weight)
      echo "== the weight's load issued with x's in a one-row body, against the plain body (latency-bound shapes)"
      probe weight_probe.py weight_probe.md ${WEIGHT_ARGS:-} ;;
    wshift)
      echo "== rows off the 16-byte grid: the weight read from shifted copies (vectors), against the body as shipped"
      probe wshift_probe.py wshift_probe.md ${WSHIFT_ARGS:-} ;;
    default)
      echo "== the zero-search default against the space's split and whole-row configs"
      probe default_probe.py default_probe.md ${DEFAULT_ARGS:-} ;;
    space)
      echo "== every config of the space next to the peers, and the search's pick"
      probe space_probe.py space_probe.md ${SPACE_ARGS:-} ;;
    body)
      echo "== one whole-row body written as Inductor writes it (knob by knob) and persistent cp.async variants, against ours and the peers"
      probe body_probe.py body_probe.md ${BODY_ARGS:-} ;;
    gluon)
      echo "== QuACK's short-row kernel written in Gluon (one warp a row, x through cp.async or registers), against QuACK and ours"
      probe gluon_probe.py gluon_probe.md ${GLUON_ARGS:-} ;;
    flush)
      echo "== the L2 state before a timed replay: the search's timing against the bench's, per config"
      probe flush_probe.py flush_probe.md ${FLUSH_ARGS:-} ;;
    persistrows)
      echo "== persistent programs walking row tiles (weight loaded once, next tile prefetched) against ours and the peers"
      probe persist_rows_probe.py persist_rows_probe.md ${PERSIST_ROWS_ARGS:-} ;;
    tma)
      echo "== row tiles copied by the tensor memory accelerator (a probe body) at the copy-speed shapes"
      probe tma_probe.py tma_probe.md ${TMA_ARGS:-} ;;
    placement)
      echo "== where the input copies lie: one shape's configs over fresh sets of copies and at chosen offsets"
      probe placement_probe.py placement_probe.md ${PLACEMENT_ARGS:-} ;;
    cold)
      echo "== a search's first timing from cold compiles: compile pool on, off, drained first"
      probe cold_probe.py cold_probe.md ${COLD_ARGS:-} ;;
    harness)
      echo "== the timing harness: GB/s against calls per graph, and the kernels' own durations"
      probe harness_probe.py harness.md ${HARNESS_ARGS:-} ;;
    agree)
      echo "== agreement: two gloo ranks tune one key inside fat.distributed"
      "$PY" "$ROOT/bench/agree_gpu.py" --out "$OUT_DIR" | tee "$OUT_DIR/agree.md" || status=1 ;;
    plan)
      echo "== a plan of 8 RMSNorm keys, serially on this GPU"
      (cd "$OUT_DIR" && cp "$ROOT/bench/plans/rmsnorm_h200.toml" . && FLYAUTOTUNE_CACHE_DIR="$OUT_DIR/plan-store" \
        "$PY" -m flyautotune plan rmsnorm_h200.toml --serial) 2>&1 | tee "$OUT_DIR/plan.log" || status=1 ;;
    autobuild)
      echo "== the compiled tensor check built by the first cache hit, in the background (an empty build folder); then dispatch in a new process"
      NATIVE_DIR=$(mktemp -d)
      FLYAUTOTUNE_NATIVE_DIR=$NATIVE_DIR "$PY" - <<'PYEOF' || status=1
import time, torch
from flyautotune.tuning import tcheck
from flyautotune_rmsnorm import rmsnorm_autotuned
x = torch.randn(4, 4096, device="cuda", dtype=torch.bfloat16)
w = torch.rand(4096, device="cuda", dtype=torch.bfloat16) + 0.5
t = time.perf_counter()
rmsnorm_autotuned(x, w); rmsnorm_autotuned(x, w); torch.cuda.synchronize()
print(f"first two calls {time.perf_counter() - t:.2f} s; background build: {tcheck._background}; {tcheck.status()}")
lock = tcheck.side_files(tcheck.build_path())["lock"]
while lock.exists():
    time.sleep(0.2)
print(f"the build finished {time.perf_counter() - t:.1f} s after the first call: {tcheck.status()}")
PYEOF
      FLYAUTOTUNE_NATIVE_DIR=$NATIVE_DIR "$PY" -m flyautotune native || status=1
      FLYAUTOTUNE_NATIVE_DIR=$NATIVE_DIR "$PY" "$ROOT/bench/dispatch.py" --out "$OUT_DIR/autobuild" || status=1 ;;
    native)
      echo "== the compiled tensor check (flyautotune native build), for every later stage of this run"
      "$PY" -m flyautotune native build || status=1 ;;
    dispatch)
      echo "== dispatch"
      "$PY" "$ROOT/bench/dispatch.py" --out "$OUT_DIR" || status=1 ;;
    dispatch_torchcheck)
      echo "== dispatch with torch's TensorGuards as the hit's tensor check (FLYAUTOTUNE_TENSOR_CHECK=torch)"
      FLYAUTOTUNE_TENSOR_CHECK=torch "$PY" "$ROOT/bench/dispatch.py" --out "$OUT_DIR/torchcheck" || status=1 ;;
    overhead_torchcheck)
      echo "== autotune layer host overhead with torch's TensorGuards as the tensor check"
      FLYAUTOTUNE_TENSOR_CHECK=torch "$PY" "$ROOT/bench/overhead.py" | tee "$OUT_DIR/overhead_torchcheck.md" || status=1 ;;
    *) echo "unknown stage $stage"; status=2 ;;
  esac
done
echo "== done (status $status) $(date -u)"
exit $status

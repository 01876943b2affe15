#!/usr/bin/env bash
# The prepared device check (tests/gpu/README.md): one run on a lent GPU machine, everything it prints under $OUT.
#   run: bash tests/gpu/device_check.sh        (the fixtures travel in tests/fixtures: nothing to carry)
# Each step has its own time limit so that the whole ends inside one device call (10 min), and a failing step
# does not stop the next. STEPS picks steps (default: env bench bench-plain gpu-tests bench-rest profile, at most
# 590 s: one call; cpu-tests, the CPU compile tests on the machine's torch, needs more than a call has left and is asked
# for by name); GPU_TESTS_S, BENCH_S, BENCH_PLAIN_S, BENCH_REST_S, PROFILE_S and CPU_TESTS_S override their limits,
# BENCH_SAMPLERS the bench step's rows; bench-ouro (asked for by name, BENCH_OURO_S) benches Ouro-1.4B's shapes. Measured on an
# H200 (docs/gpu.md, 2026-11-28): gpu-tests 255 s, bench 123 s (with LoopSpec), bench-rest 58 s, bench-ouro 180 s.
set -u -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}.
OUT=${OUT:-/tmp/recdiff-device}; mkdir -p "$OUT"
STEPS=${STEPS:-env bench bench-plain gpu-tests bench-rest profile}
DEFAULT_SAMPLERS="static r=32,diffusion fixed r'=4,diffusion defaults,static r=8,speculative 4×4"
BENCH_SAMPLERS=${BENCH_SAMPLERS:-$DEFAULT_SAMPLERS}
# no hydra on the device machine: its pytest plugin is absent there; here, keep it from loading
PYTEST="python3 -m pytest -p no:hydra_pytest -p no:cacheprovider -p tests.gpu.live_report -v -o console_output_style=classic"
# a test that hangs fails alone (pytest-timeout, where installed) instead of taking the step's limit
python3 -c "import pytest_timeout" 2>/dev/null && PYTEST="$PYTEST --timeout=150"
step() { [[ " $STEPS " == *" $1 "* ]]; }
run() {  # run NAME LIMIT_S CMD...: the step's output in $OUT/NAME.log, its exit status and time in $OUT/summary.txt
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  export LIVE_REPORT="$OUT/$name-failures.txt"
  echo "=== $name: $*" | tee -a "$OUT/summary.txt"
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$OUT/$name.log"
  local rc=$?
  echo "=== $name: exit $rc after $((SECONDS - t0)) s (limit $limit s)" | tee -a "$OUT/summary.txt"
}
if step env; then
  { nvidia-smi; python3 -c "import sys, torch, transformers, numpy, safetensors; print(sys.version); print('torch',
    torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__, 'numpy', numpy.__version__,
    'safetensors', safetensors.__version__); print(torch.cuda.get_device_name(0))"; nproc
    python3 -c "from recdiff import fused; print('fused kernels (recdiff/fused.py):', fused.available('cuda'))"
  } > "$OUT/env.txt" 2>&1
  cat "$OUT/env.txt"
fi
# the benchmark first: its figures come back even where a test step runs to its limit
step bench && run bench ${BENCH_S:-150} python3 -m recdiff.bench --models huginn --device cuda --prompts 3 --max-new-tokens 32 \
  --samplers "$BENCH_SAMPLERS"
# the retrofitted families at their real shapes (random bf16 weights): the static and diffusion rows
step bench-families && run bench-families ${BENCH_FAMILIES_S:-90} python3 -m recdiff.bench --models tinyllama,llama-3.2,olmo-2 \
  --device cuda --prompts 3 --max-new-tokens 32 --samplers "static r=32,diffusion fixed r'=4,diffusion defaults"
# Ouro-1.4B's shapes (no input injection, an exit gate; random bf16 weights): static and LoopSpec at r=32
step bench-ouro && run bench-ouro ${BENCH_OURO_S:-200} python3 -m recdiff.bench --models ouro-1.4b --device cuda \
  --prompts 3 --max-new-tokens 32 --samplers "static r=32,loopspec K=4"
# the same two bound rows with each layer's elementwise work unfused (recdiff/fused.py off): the fusion's effect
step bench-plain && RECDIFF_FUSE=0 run bench-plain ${BENCH_PLAIN_S:-90} python3 -m recdiff.bench --models huginn \
  --device cuda --prompts 3 --max-new-tokens 32 --samplers "static r=32,diffusion fixed r'=4"
step gpu-tests && run gpu-tests ${GPU_TESTS_S:-250} $PYTEST tests/gpu -rA -n 8 --dist loadgroup
# random weights need not converge: the adaptive row may run to its cap, so it runs apart, under its own limit
step bench-rest && run bench-rest ${BENCH_REST_S:-40} python3 -m recdiff.bench --models huginn --device cuda --prompts 3 \
  --max-new-tokens 32 --samplers "${BENCH_REST_SAMPLERS:-adaptive ε=0.03}"
step profile && python3 -m recdiff.bench --help 2>/dev/null | grep -q -- --profile && run profile ${PROFILE_S:-60} python3 -m \
  recdiff.bench --models huginn --device cuda --prompts 2 --max-new-tokens 16 --profile \
  --samplers "static r=32,diffusion defaults"
step cpu-tests && run cpu-tests ${CPU_TESTS_S:-100} $PYTEST tests/engine tests/model tests/base tests/samplers/test_ar_parity.py tests/samplers/test_diffusion_parity.py tests/samplers/test_diffusion_by_hand.py tests/samplers/test_sampling.py -rfE
cat "$OUT/summary.txt"

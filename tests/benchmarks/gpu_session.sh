#!/bin/bash
# One GPU-machine session: environment, gpu tests, CUDA test folders, local deploy + selftest, kernel timings, full suite.
#   OUT=/some/folder [STEPS=gpu,selftest,bench,full] bash tests/benchmarks/gpu_session.sh   (from the repo root)
# Not yet run on a GPU (docs/hardware.md). Missing Python packages travel as wheels in .whl/.
set -u
export PYTHONUNBUFFERED=1 COLUMNS=200
T0=$(date +%s)
step() { echo; echo "=== [$(( $(date +%s) - T0 ))s] $*"; }

# Wheels into /tmp/site; a .pth puts it first on sys.path for every python3 (the local target's child
# processes drop PYTHONPATH, so PYTHONPATH alone would not reach the release's own runtime).
if [ -z "${SKIP_INSTALL:-}" ] && [ -d .whl ]; then
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
SP=$(python3 -c 'import site; print(site.getsitepackages()[0])')
echo "import sys; sys.path.insert(0, '/tmp/site')" > "$SP/00_tmpsite.pth" || exit 3
fi

# Patched files (to confirm a fix on a machine that only gets the main checkout): .gpufix/tree/<repo path> replaces it.
if [ -d .gpufix/tree ]; then (cd .gpufix/tree && find . -type f | sed 's|^\./||') | while read -r f; do cp -v ".gpufix/tree/$f" "$f"; done; fi

step environment
{
  date -u; uname -a; nvidia-smi; nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total,clocks.sm,clocks.mem,clocks.max.sm,persistence_mode --format=csv
  nvcc --version; cmake --version | head -1; g++ --version | head -1; which python3; python3 --version
  python3 - <<'EOF'
import importlib.metadata as md
for p in ("cuda-bindings", "cuda-python", "nvidia-cuda-nvrtc", "nvidia-cuda-runtime", "cupy-cuda13x", "torch", "numpy", "opencv-python-headless", "onnxruntime", "onnx", "pydantic", "pytest", "tensorrt", "tensorrt-lean"):
    try: print(f"{p}=={md.version(p)}")
    except md.PackageNotFoundError: print(f"{p}: not installed")
from cuda.bindings import driver as cu
from sdk.gpu.nvrtc import nvrtc_version
cu.cuInit(0); print("cuDriverGetVersion", cu.cuDriverGetVersion()[1], "NVRTC", nvrtc_version())
import torch; print("torch sees", torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0), "cuda", torch.version.cuda)
EOF
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

if [ "${STEPS:-all}" = all ] || [[ "${STEPS}" == *gpu* ]]; then
step "pytest -m gpu"
timeout 240 python3 -m pytest -m gpu -v -rs --continue-on-collection-errors -p no:cacheprovider 2>&1 | tee "$OUT/pytest_gpu.log" | grep -E "PASSED|FAILED|SKIPPED|ERROR|passed|failed|sm_|median" | tail -40
step "pytest tests/plugins_cuda tests/sdk/gpu"
timeout 240 python3 -m pytest tests/plugins_cuda tests/sdk/gpu -v -rs -s -p no:cacheprovider 2>&1 > "$OUT/pytest_cuda_dirs.log"; tail -25 "$OUT/pytest_cuda_dirs.log"
fi

if [ "${STEPS:-all}" = all ] || [[ "${STEPS}" == *selftest* ]]; then
step "deploy --target local + selftest"
export SDK_STATE_DIR=/tmp/sdkstate
{
  timeout 200 python3 -c "from tools.cli import deploy_main; deploy_main()" --target local pipelines/pedestrian.yaml --frames 30 --report-dir /tmp/report; echo "deploy rc=$?"
  ls -R /tmp/sdkstate/targets/local/releases/*/kernels
  timeout 120 python3 -c "from tools.cli import main; main()" selftest --target local; echo "selftest rc=$?"
  cd /tmp/sdkstate/targets/local/current 2>/dev/null || cd "$(ls -d /tmp/sdkstate/targets/local/releases/* | head -1)"
  env -u PYTHONPATH timeout 120 python3 -B -m sdk selftest --release . ; echo "raw selftest rc=$?"
  cd - >/dev/null
} > "$OUT/selftest.log" 2>&1
tail -40 "$OUT/selftest.log"
fi

if [ "${STEPS:-all}" = all ] || [[ "${STEPS}" == *bench* ]]; then
step "bench"
B=/tmp/ppbuild
{ cmake -S plugins_cuda -B $B -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build $B -j 16 >/dev/null && cat $B/preprocess.json && cat $B/preprocess.sm_87.ptxas.txt
  timeout 200 python3 tests/benchmarks/bench_cuda_device.py $B "$OUT"; echo "bench rc=$?"; } > "$OUT/bench.log" 2>&1
tail -30 "$OUT/bench.log"
fi

if [ "${STEPS:-all}" = all ] || [[ "${STEPS}" == *full* ]]; then
step "full suite"
timeout "${FULL_TIMEOUT:-250}" python3 -m pytest -q -rs -n 16 -p no:cacheprovider 2>&1 > "$OUT/pytest_full.log"; tail -30 "$OUT/pytest_full.log"
fi
step done

#!/bin/bash
# The real run on a single 2x H200 host (docs/examples/h200x2/), in one go, from the repository root:
#   1. nccl-tests built with the site's recipe (tools/build-nccl-tests --site local-gpu);
#   2. pytest suites/ --site=local-gpu, and a baseline proposal from that run
#      (site-configs/local-gpu.baselines.yaml: p05, lower -8%; sizes below 64 MiB, latency-bound, get
#      lower -75%; keys whose busbw is below 0.1 GB/s get none, nccl-tests prints it to 0.01);
#   3. pytest suites/ --site=local-gpu again, judged against the proposal;
#   4. benchmarks/fidelity.py (standalone nccl-tests vs through the suite, 3 alternating repeats, vs the
#      PyTorch fallback).
# The host has no package registry: the package's missing dependencies come as wheels in .whl/
# (benchmarks/README.md). Results go to $OUT (default ./h200x2-out): the second run's report.html,
# junit.xml and results.json, the proposal, fidelity.md/.json, the log, and runs.tgz (every run dir).
set -u
# NVLink multicast stays off in every process (docs/gpu-host.md); the site's env repeats these.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/h200x2-out}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD/src
else
  export PYTHONPATH=$PWD/src
fi
REPORTS=$PWD/reports
run() { echo "=== $* ($(date -u +%T))"; local t0=$SECONDS; "$@"; local rc=$?; echo "=== rc=$rc in $((SECONDS - t0)) s"; return $rc; }
{
  run nvidia-smi --query-gpu=index,name,driver_version,pci.bus_id --format=csv,noheader
  run nvidia-smi topo -m
  run nvidia-smi nvlink -s
  run python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.device_count(), torch.cuda.nccl.version())"
  run sh -c 'command -v make nvcc g++; nvcc --version | tail -2; ls -d /usr/local/cuda* 2>&1 | head -3'
  run timeout 240 tools/build-nccl-tests --site local-gpu --jobs 32 || exit 1
  # One NCCL for nccl-tests and PyTorch: the pip package's, which both were built against. nccl-tests'
  # binaries have no RPATH: without this they load the image's /lib/x86_64-linux-gnu/libnccl.so.2 (2.28.3).
  nccl_lib=$(python3 -c "import importlib.util as u; print(next(iter(u.find_spec('nvidia.nccl').submodule_search_locations)))")/lib
  echo "LD_LIBRARY_PATH was: ${LD_LIBRARY_PATH:-}"; ldd third_party/nccl-tests/build/all_reduce_perf | grep nccl
  export LD_LIBRARY_PATH=$nccl_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  ldd third_party/nccl-tests/build/all_reduce_perf | grep nccl
  run timeout 200 python3 -m pytest suites/ --site=local-gpu -q -rs --reports-dir="$REPORTS"
  first=$(readlink -f "$REPORTS/local-gpu/latest")
  run python3 -m clusteraccept.judge.propose "$first/results.json" site-configs/local-gpu.baselines.yaml --small-lower -0.75 --min-ref 0.1
  run timeout 200 python3 -m pytest suites/ --site=local-gpu -q --reports-dir="$REPORTS"
  second=$(readlink -f "$REPORTS/local-gpu/latest")
  echo "first run: $first; second run: $second"
  for f in report.html junit.xml results.json; do cp "$second/$f" "$OUT/$f"; done
  cp site-configs/local-gpu.baselines.yaml "$OUT/"
  run timeout 420 python3 benchmarks/fidelity.py --site local-gpu --repeats 3 --work "$REPORTS/fidelity" --out "$OUT/fidelity.md"
} 2>&1 | tee "$OUT/log.txt"
tar czf "$OUT/runs.tgz" -C "$REPORTS" --exclude='*.pkl' local-gpu fidelity 2>/dev/null
ls -la "$OUT"

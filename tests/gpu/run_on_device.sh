#!/usr/bin/env bash
# The GPU checks, on an accelerator machine whose image has torch + transformers but not Pion's
# own dependencies: those travel as wheels in .whl/ (docs/dev/gpu-checks.md). Writes its
# logs and results under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/pion-gpu-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/device.txt"
python3 -c "import sys, torch, transformers; print(sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())" | tee -a "$OUT/device.txt"
echo "== pytest tests/gpu (CUDA models)"
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu 2>&1 | tail -15 | tee "$OUT/gpu_tests.txt"
echo "== bench_ttft on cuda: demo model"
timeout 170 python3 benchmarks/bench_ttft.py --device cuda --lengths 2049 --codecs auto,auto@socket,fp16 --runs 5 \
  --out-dir "$OUT" 2>"$OUT/bench_demo.err" | tail -8
echo "== bench_ttft on cuda: Llama-3.2-1B shape"
timeout 200 python3 benchmarks/bench_ttft.py --device cuda --model builtin:llama-3.2-1b-shape --lengths 2049 \
  --codecs auto,auto@socket --runs 5 --out-dir "$OUT/l1b" 2>"$OUT/bench_l1b.err" | tail -8
tail -n 3 "$OUT/bench_demo.err" "$OUT/bench_l1b.err"

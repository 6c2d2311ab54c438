#!/usr/bin/env bash
# Every measurement of docs/gpu.md and docs/training-speed.md in one go, on a CUDA host with >= 16
# cores (an H100 host here).  Each CPU training is pinned to 2 cores (taskset) to stand for the
# 2-core deployment target; seven of them run side by side on cores 0-13, the GPU work on 14-15.
#
#   scripts/gpu_check.sh DATA_DIR OUT_DIR [BASELINE_CHECKOUT] [MINILM_CONFIG_JSON]
#
# DATA_DIR holds routerbench-partial/, routellm-evals/mmlu/ and zeroeval/; BASELINE_CHECKOUT is a
# checkout of the code to compare against (its trainings and evals run beside this one's);
# MINILM_CONFIG_JSON enables the transformer-encoder speed rows (random weights, speed only).
set -u
DATA=$(realpath "$1"); OUT=$(realpath -m "$2"); BASE=${3:+$(realpath "$3")}; MINILM=${4:+$(realpath "$4")}
NEW=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PROTEUS_SHARED_DATA=$DATA PROTEUS_CACHE_DIR=${PROTEUS_CACHE_DIR:-$OUT/cache}
declare -A DATASETS=([rb]=routerbench-partial [mmlu]=routellm-evals/mmlu [zeroeval]=zeroeval)

proteus() {  # CODE_DIR CORES ARGS...: the proteus CLI of that checkout, pinned to CORES
  local code=$1 cores=$2; shift 2
  (cd "$code" && PYTHONPATH=$code${PYTHONPATH:+:$PYTHONPATH} taskset -c "$cores" python -m litellm_proteus.cli "$@")
}

train_and_eval() {  # NAME CODE_DIR CORES DATASET [TRAIN FLAGS...]: wall time, peak RSS, then proteus eval
  local name=$1 code=$2 cores=$3 data=$DATA/${DATASETS[$4]}; shift 4
  local start=$(date +%s%N)
  proteus "$code" "$cores" train --data "$data" --out "$OUT/$name" --quiet "$@" > "$OUT/$name.train.json" 2> "$OUT/$name.train.log"
  echo "$name train rc=$? wall_ms=$(( ($(date +%s%N) - start) / 1000000 ))" >> "$OUT/summary.txt"
  proteus "$code" "$cores" eval --artifact "$OUT/$name" --data "$data" --out "$OUT/$name-eval" --device cpu --quiet \
    > "$OUT/$name.eval.log" 2>&1
  echo "$name eval rc=$?" >> "$OUT/summary.txt"
}

echo "== $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader); $(nproc) cores; $(python -c 'import torch;print("torch", torch.__version__)')" > "$OUT/summary.txt"
# warm the embedding cache once per data set (the figures are warm-cache trainings)
for d in rb mmlu zeroeval; do
  proteus "$NEW" 0-13 train --data "$DATA/${DATASETS[$d]}" --out "$OUT/warm-$d" --device cpu --steps 1 --perf-epochs 1 \
    --oof-folds 2 --boost-steps 0 --quiet > /dev/null 2> "$OUT/warm-$d.log" &
done
wait
rm -rf "$OUT"/warm-*/

# CPU: this checkout vs the baseline, 2 cores each, side by side
train_and_eval rb-new "$NEW" 0,1 rb --device cpu &
train_and_eval mmlu-new "$NEW" 2,3 mmlu --device cpu &
train_and_eval zeroeval-new "$NEW" 4,5 zeroeval --device cpu &
if [ -n "$BASE" ]; then
  train_and_eval rb-base "$BASE" 6,7 rb --device cpu &
  train_and_eval mmlu-base "$BASE" 8,9 mmlu --device cpu &
  train_and_eval zeroeval-base "$BASE" 10,11 zeroeval --device cpu &
fi
train_and_eval rb-new-s1 "$NEW" 12,13 rb --device cpu --parallel-sessions 1 --steps 3000 &  # one session: the paper loop

# GPU (cores 14-15): the tests, a training, the decision-path benchmarks
(cd "$NEW" && PYTHONPATH=$NEW${PYTHONPATH:+:$PYTHONPATH} taskset -c 14,15 python -m pytest -q -p no:cacheprovider tests/device) > "$OUT/pytest-device.log" 2>&1
echo "pytest tests/device rc=$? $(tail -1 "$OUT/pytest-device.log")" >> "$OUT/summary.txt"
start=$(date +%s%N)
proteus "$NEW" 14,15 train --data "$DATA/routerbench-partial" --out "$OUT/rb-cuda" --device cuda --quiet > "$OUT/rb-cuda.train.json" 2> "$OUT/rb-cuda.train.log"
echo "rb-cuda train rc=$? wall_ms=$(( ($(date +%s%N) - start) / 1000000 ))" >> "$OUT/summary.txt"
bench() {  # NAME ARGS...
  local name=$1; shift
  proteus "$NEW" 14,15 bench --skip-proxy --skip-concurrency --batches 1,128 --tokens 32,128,512 --out "$OUT/bench-$name" "$@" \
    > "$OUT/bench-$name.log" 2>&1
  echo "bench $name rc=$?" >> "$OUT/summary.txt"
}
bench static-cuda --device cuda
bench static-cpu --device cpu --threads 2
if [ -n "$MINILM" ]; then
  (cd "$NEW" && PYTHONPATH=$NEW${PYTHONPATH:+:$PYTHONPATH} python scripts/transformer_artifact.py "$MINILM" "$OUT/tf-artifact") >> "$OUT/summary.txt" 2>&1
  bench tf-cuda-fp16 --device cuda --artifact "$OUT/tf-artifact" --precision fp16
  bench tf-cuda-bf16 --device cuda --artifact "$OUT/tf-artifact" --precision bf16
  bench tf-cuda-fp32 --device cuda --artifact "$OUT/tf-artifact" --precision fp32
fi
wait
cat "$OUT/summary.txt"

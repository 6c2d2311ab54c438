#!/usr/bin/env bash
# The parallel-sessions grid of docs/training-speed.md (learning rates scaled by sqrt(S); 1,500 or
# 3,000 batches), each CPU training pinned to 2 cores, seven side by side; then the CUDA tests, a
# CUDA training and the transformer-encoder speed rows of docs/gpu.md on cores 14-15.
#   scripts/ppo_sessions_grid.sh DATA_DIR OUT_DIR MINILM_CONFIG_JSON
set -u
DATA=$(realpath "$1"); OUT=$(realpath -m "$2"); NEW=$(cd "$(dirname "$0")/.." && pwd); MINILM=$(realpath "$3"); mkdir -p $OUT
export PYTHONUNBUFFERED=1 PROTEUS_SHARED_DATA=$DATA
declare -A DATASETS=([rb]=routerbench-partial [mmlu]=routellm-evals/mmlu [zeroeval]=zeroeval)
proteus() { local code=$1 cores=$2; shift 2; (cd "$code" && PYTHONPATH=$code${PYTHONPATH:+:$PYTHONPATH} taskset -c "$cores" python -m litellm_proteus.cli "$@"); }
te() { local name=$1 cores=$2 data=$DATA/${DATASETS[$3]}; shift 3
  local start=$(date +%s%N)
  proteus $NEW "$cores" train --data "$data" --out "$OUT/$name" --quiet "$@" > "$OUT/$name.train.json" 2> "$OUT/$name.train.log"
  echo "$name train rc=$? wall_ms=$(( ($(date +%s%N) - start) / 1000000 )) $*" >> "$OUT/summary.txt"
  proteus $NEW "$cores" eval --artifact "$OUT/$name" --data "$data" --out "$OUT/$name-eval" --device cpu --quiet > "$OUT/$name.eval.log" 2>&1
  echo "$name eval rc=$?" >> "$OUT/summary.txt"; }
for d in rb mmlu zeroeval; do proteus $NEW 0-13 train --data "$DATA/${DATASETS[$d]}" --out "$OUT/warm-$d" --device cpu --steps 1 --perf-epochs 1 --oof-folds 2 --boost-steps 0 --quiet > /dev/null 2>&1 & done; wait; rm -rf $OUT/warm-*
te rb-s8 0,1 rb --device cpu --parallel-sessions 8 --steps 3000 &
te rb-s16 2,3 rb --device cpu --parallel-sessions 16 --steps 3000 &
te rb-s16-half 4,5 rb --device cpu --parallel-sessions 16 --steps 1500 &
te rb-s4 6,7 rb --device cpu --parallel-sessions 4 --steps 3000 &
te mmlu-s16 8,9 mmlu --device cpu --parallel-sessions 16 --steps 3000 &
te zeroeval-s16 10,11 zeroeval --device cpu --parallel-sessions 16 --steps 3000 &
te rb-s8-half 12,13 rb --device cpu --parallel-sessions 8 --steps 1500 &
(cd $NEW && PYTHONPATH=$NEW${PYTHONPATH:+:$PYTHONPATH} taskset -c 14,15 python -m pytest -q -p no:cacheprovider tests/device) > $OUT/pytest-device.log 2>&1
echo "pytest rc=$? $(tail -1 $OUT/pytest-device.log)" >> $OUT/summary.txt
te rb-cuda-s16 14,15 rb --device cuda --parallel-sessions 16 --steps 3000
(cd $NEW && PYTHONPATH=$NEW${PYTHONPATH:+:$PYTHONPATH} python scripts/transformer_artifact.py "$MINILM" $OUT/tf-artifact) >> $OUT/summary.txt 2>&1
for p in fp16 bf16 fp32; do proteus $NEW 14,15 bench --skip-proxy --skip-concurrency --batches 1,128 --tokens 32,128,512 --out $OUT/bench-tf-$p --device cuda --artifact $OUT/tf-artifact --precision $p > $OUT/bench-tf-$p.log 2>&1; echo "bench tf $p rc=$?" >> $OUT/summary.txt; done
wait; cat $OUT/summary.txt

#!/usr/bin/env bash
# The GPU checks, run on the `device` tool's machine with .gpu/run carried (scripts/device_kit.py
# packs it; the earlier calls left the model's other pieces in /root/kit). Joins the model, then
# runs tests/gpu and the CUDA benchmarks, each under its own time limit, so that one failing or
# slow step still leaves the others' results in $OUT (logs and JSON).
#
#   bash scripts/gpu_check.sh            on the GPU machine
#   KIT_DEVICE=cpu bash scripts/gpu_check.sh   a dry run of the same steps on a CPU (tests/gpu skip)
set -u
KIT=${KIT:-/root/kit}
RUN=${RUN:-.gpu/run}
OUT=${OUT:-/tmp/gpu-out}
PY=${PY:-python3}
DEVICE=${KIT_DEVICE:-cuda}
export SPECSCRIBE_HOME=${SPECSCRIBE_HOME:-/tmp/specscribe-home} PYTHONUNBUFFERED=1
mkdir -p "$OUT" "$SPECSCRIBE_HOME/models"
step() {  # step NAME SECONDS COMMAND...: stdout+stderr to $OUT/NAME.log, exit status and time in $OUT/steps.txt
  local name=$1 limit=$2 start=$SECONDS
  shift 2
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  echo "$name rc=$? ${SECONDS}s-${start}s" | tee -a "$OUT/steps.txt"
}

# the model: pieces 1..N from /root/kit or the carried folder, in order
for k in $(seq 1 50); do
  piece=$(ls "$KIT/model.part$k" "$RUN/model.part$k" 2>/dev/null | head -1)
  [ -n "$piece" ] || break
  cat "$piece"
done | tar -x -C "$SPECSCRIBE_HOME/models" || { echo "model pieces missing or broken"; exit 1; }
ln -sfn "$PWD/$RUN/clips" "$SPECSCRIBE_HOME/clips"
# the package as `pip install -e .` maps it (specscribe.models is ./models ...); a copy of the tree
for d in models pipeline web; do ln -sfn "../$d" "specscribe/$d"; done
for w in "$RUN"/wheels/*.whl; do $PY -m zipfile -e "$w" /tmp/kit-site; done
export PYTHONPATH="$PWD:$PWD/$RUN/site:/tmp/kit-site"

{ nvidia-smi -L 2>&1; $PY -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.is_available())'
  ls -l "$SPECSCRIBE_HOME/models"/*; nproc; } >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

step gpu_tests 170 $PY -m pytest -v -p no:cacheprovider tests/gpu
if [ "$DEVICE" = cuda ]; then
  TYPES=float16,bfloat16,float32 SECTIONS=pass_ms,throughput,kernels
else  # the dry run: small sizes, the CPU's types
  TYPES=bfloat16 SECTIONS=pass_ms,throughput ROWS=1,4 SEQS=1,4 BATCHES=1,2 BATCH_ARGS=--no-physics
fi
step bench_engines 170 $PY scripts/bench_engines.py --device "$DEVICE" --out "$OUT/bench_engines_$DEVICE.json" \
  --sections "$SECTIONS" --compute-types "$TYPES" --repeat 2 \
  --rows "${ROWS:-1,4,16,64}" --seqs "${SEQS:-1,4,16}" --prompts 4,120 --batches "${BATCHES:-1,4,16}"
step bench_batch 150 $PY scripts/bench_batch.py --device "$DEVICE" --no-fw --out "$OUT/bench_batch_$DEVICE.json" \
  --repeat 2 --batch-sizes 16,1 --variant "nodraft=--draft none" ${BATCH_ARGS:-}
tail -n 3 "$OUT"/*.log

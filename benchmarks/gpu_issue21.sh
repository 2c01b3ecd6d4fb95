#!/usr/bin/env bash
# Issue 21's runs on the lent H200, in the order they were made (benchmarks/RESULTS.md has the
# figures). Needs the GPU stack in /tmp/site (../shared/tools/gpu_stack.py: five transfers, then
# `python3 .gpu_stack/assemble.py`). Each part is one device call of at most 10 minutes:
#
#   bash benchmarks/gpu_issue21.sh demo     # vllm_engine.py beside the demo on hf, then the demo on vllm
#   bash benchmarks/gpu_issue21.sh product  # product_step.py on both engines + convert and load
#   bash benchmarks/gpu_issue21.sh vllm     # vllm_engine.py beside the demo on vllm, then product_step.py on vllm
#
# Every step has its own time limit, so one that hangs or fails leaves the others' figures;
# logs and JSON go to $OUT (at most 8 files come back: one summary, the JSONs, one tarball).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/logs
export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
export OUT
SUMMARY=$OUT/summary_$1.txt
say() { echo "[$(date +%T)] $*" | tee -a "$SUMMARY"; }

step() {  # step NAME SECONDS COMMAND...: run with a limit, log, record the exit code
    local name=$1 limit=$2
    shift 2
    say "start $name (limit ${limit}s): $*"
    local t0=$SECONDS
    timeout --signal=INT --kill-after=20 "$limit" "$@" >"/tmp/logs/$name.log" 2>&1
    local rc=$?
    say "end $name rc=$rc in $((SECONDS - t0))s"
    tail -n 25 "/tmp/logs/$name.log" | sed "s/^/  $name| /" >>"$SUMMARY"
    return $rc
}

# the demo as a user with one GPU runs it: the only override is the GPU count (and the engine)
DEMO=(env RFT_DEMO_DIR=/tmp/demo python3 -m rft_core.cli run --config examples/demo/grpo_demo.yaml
    cluster.gpu_per_node=1)

eval_figures() {  # held-out accuracy per eval of each demo run, from its monitor files
    python3 - <<'EOF' | tee -a "$SUMMARY"
import glob, json
for path in sorted(glob.glob("checkpoints/demo/**/monitor/*_metrics.jsonl", recursive=True)):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    keys = sorted({k for r in rows for k in r if k.startswith("eval/") and k.endswith("/mean")})
    for k in keys:
        vals = [(r.get("step"), round(r[k], 3)) for r in rows if k in r]
        print(path, k, vals)
    for k in ("time/sync_weight", "time/rollout", "time/train_step"):
        vals = [r[k] for r in rows if k in r]
        if vals:
            print(path, k, "n", len(vals), "median", round(sorted(vals)[len(vals) // 2], 4))
EOF
}

nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv | tee -a "$SUMMARY"
python3 -c "import torch, transformers, vllm, ray; print('torch', torch.__version__, 'transformers', transformers.__version__, 'vllm', vllm.__version__, 'ray', ray.__version__)" 2>&1 | tail -1 | tee -a "$SUMMARY"

case "$1" in
demo)
    # the vLLM adapter against vllm.LLM.generate + weight sync, beside the demo on the hf engine
    # (the demo's tiny model needs ~1 GB; vllm_engine.py takes half the GPU)
    step vllm_engine 260 python3 benchmarks/vllm_engine.py --repeats 3 --json "$OUT/vllm_engine.json" &
    engine_pid=$!
    (step init_demo 90 python3 -m rft_core.cli init-demo --out /tmp/demo &&
        step demo_hf 250 "${DEMO[@]}" explorer.rollout_model.engine_type=hf name=grpo_demo_hf) &
    demo_pid=$!
    wait $engine_pid $demo_pid
    # what is left of the call's budget (BUDGET seconds from this script's start, default 530)
    step demo_vllm $((${BUDGET:-530} - SECONDS)) "${DEMO[@]}" explorer.rollout_model.engine_type=vllm name=grpo_demo_vllm
    eval_figures
    tar czf "$OUT/logs_demo.tgz" --exclude='global_step_*' -C /tmp logs -C "$PWD" checkpoints/demo
    ;;
vllm)
    # round 2 (after the flashinfer fix): the vLLM adapter against vllm.LLM.generate and weight
    # sync, beside the demo on the vllm engine (its vLLM share lowered to 0.3 so the two fit the
    # GPU together; the demo's figures are accuracy, not speed), then the 1.5B product run on
    # vllm alone (the benchmark's step was measured in the hf product command)
    cap=$((${BUDGET:-540} - 20))
    step vllm_engine $((cap < 240 ? cap : 240)) python3 benchmarks/vllm_engine.py --repeats 2 --json "$OUT/vllm_engine.json" &
    engine_pid=$!
    (step init_demo 90 python3 -m rft_core.cli init-demo --out /tmp/demo &&
        step demo_vllm $((cap - SECONDS)) "${DEMO[@]}" explorer.rollout_model.engine_type=vllm \
            explorer.rollout_model.gpu_memory_utilization=0.3 name=grpo_demo_vllm) &
    demo_pid=$!
    wait $engine_pid $demo_pid
    eval_figures
    left=$((${BUDGET:-540} - SECONDS))
    if [ "$left" -ge 240 ]; then
        step product_vllm "$left" python3 benchmarks/product_step.py \
            --engines vllm --steps 10 --workdir /tmp/ps --skip-benchmark
    else
        say "product_vllm not run: ${left}s of the call's budget left (a run takes ~250 s)"
    fi
    tar czf "$OUT/logs_vllm.tgz" --exclude='global_step_*' --exclude='synthetic' \
        -C /tmp logs ps -C "$PWD" checkpoints/demo
    ;;
product)
    step product_step $((${BUDGET:-560} - 20)) python3 benchmarks/product_step.py --engines hf,vllm --steps 12 \
        --workdir /tmp/ps --convert
    tar czf "$OUT/logs_product.tgz" --exclude='global_step_*' --exclude='synthetic' -C /tmp logs ps
    ;;
esac
say done

#!/usr/bin/env bash
# main as it is, call 3 of 3: the DiT shapes beside FlashAttention-4 and cuDNN SDPA, two rounds in one process each
# (scripts/gpu/attention_variants.sh: each backend in turn, CUDA-graph replays), then fused_post / FA-only at P = 1,
# M = 8192 and 16384, in three rounds. flash_attn.cute must import. ROUNDS (default 2) and P1_ROUNDS (default 3)
# set the rounds.
#   XSTAGE_BUILD=build RESULTS=<dir> bash results/h100/attention/2026-12-07-main-state/call3.sh   (from the repository root)
set -u
source scripts/gpu/env.sh
B=$XSTAGE_BUILD; O=$(mktemp -d); R=${RESULTS:-.}; mkdir -p "$R"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,power.limit,driver_version --format=csv > $O/gpu.txt 2>&1
log() { echo "[$SECONDS s] $*" | tee -a $O/log.txt; tar cJf $R/call3.tar.xz -C $O . ; }
python3 -c "import flash_attn.cute.interface" 2>/dev/null; log "fa4 importable rc=$?"
for r in $(seq 1 ${ROUNDS:-2}); do
  OUT=$O/r$r REPS=16 timeout 220 bash scripts/gpu/attention_variants.sh main=$B > /dev/null 2>&1; log "round $r rc=$?"
done
for r in $(seq 1 ${P1_ROUNDS:-3}); do
  [ $SECONDS -gt 540 ] && { log "time guard at p1 round $r"; break; }
  timeout 40 $X attention ulysses bench --gpus 1 --seqlens 8192,16384 --heads 4,12 --head-dims 64,128 --store-path tma \
    --trials 5 --replays 3 --out $O/p1_r$r.json > $O/p1_r$r.log 2>&1; log "p1 round $r rc=$?"
done
xz -9 $O/*.log 2>/dev/null; log done

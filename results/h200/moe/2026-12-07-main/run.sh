#!/usr/bin/env bash
# main on one H200, MoE at EP = 1: the full check (16 cases x bf16, fp8 x every implementation against float64), the
# DeepSeek-V3-like layer beside the Triton fused MoE of inference servers (scripts/gpu/moe_triton.sh: the two tools in
# turn, layer by layer), then the same layer at 1024, 4096 and 8192 tokens: the unfused loop, every fixed schedule and
# `auto`, with the plain read of the same expert weights (--hbm-reference), each implementation warmed for 1 s before
# its trials (--warm-each).
#   XSTAGE_BUILD=build RESULTS=<dir> bash results/h200/moe/2026-12-07-main/run.sh   (from the repository root)
set -u
source scripts/gpu/env.sh
O=$(mktemp -d); R=${RESULTS:-.}; mkdir -p "$R"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,power.limit,driver_version --format=csv > $O/gpu.txt 2>&1
log() { echo "[$SECONDS s] $*" | tee -a $O/log.txt; tar cJf $R/moe.tar.xz -C $O . ; }
timeout 150 $X moe check --gpus 1 --out $O/check.json > $O/check.log 2>&1; log "moe check rc=$? :: $(tail -n1 $O/check.log)"
OUT=$O/triton timeout 260 bash scripts/gpu/moe_triton.sh > /dev/null 2>&1; log "triton rc=$?"
for t in 4096 8192 1024; do
  [ $SECONDS -gt 520 ] && { log "time guard at $t tokens"; break; }
  timeout 100 $X moe bench --gpus 1 --config configs/moe_triton_compare.json --filter "/t$t/" --hbm-reference --warm-each --warmup-ms 1000 --trials 10 \
    --impl unfused-loop,megamoe-wave,megamoe-wave-pipelined,megamoe-interleaved,megamoe-auto --out $O/ds$t.json > $O/ds$t.log 2>&1
  log "deepseek-v3-like $t tokens rc=$?"
done
xz -9 $O/*.log 2>/dev/null; log done

#!/usr/bin/env bash
# main as it is, MoE at EP = 1: the full check (16 cases x bf16, fp8 x every implementation against float64), the
# DeepSeek-V3-like layer beside the Triton fused MoE of inference servers (scripts/gpu/moe_triton.sh, one round: the
# two tools in turn, layer by layer), and the same layer at 4096 tokens (the grid's one token count for it at EP = 1):
# the unfused loop, every fixed schedule and `auto`, with the plain weight read (--hbm-reference).
#   XSTAGE_BUILD=build RESULTS=<dir> bash results/h100/moe/2026-12-07-main-state/call4.sh   (from the repository root)
set -u
source scripts/gpu/env.sh
O=$(mktemp -d); R=${RESULTS:-.}; mkdir -p "$R"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,power.limit,driver_version --format=csv > $O/gpu.txt 2>&1
log() { echo "[$SECONDS s] $*" | tee -a $O/log.txt; tar cJf $R/call4.tar.xz -C $O . ; }
timeout 150 $X moe check --gpus 1 --out $O/check.json > $O/check.log 2>&1; log "moe check rc=$? :: $(tail -n1 $O/check.log)"
OUT=$O/triton timeout 260 bash scripts/gpu/moe_triton.sh > /dev/null 2>&1; log "triton rc=$?"
for t in 4096; do
  [ $SECONDS -gt 500 ] && { log "time guard at $t tokens"; break; }
  timeout 90 $X moe bench --gpus 1 --filter "deepseek-v3:h7168-i2048-e256-k8/t$t/balanced" --hbm-reference --trials 10 \
    --impl unfused-loop,megamoe-wave,megamoe-wave-pipelined,megamoe-interleaved,megamoe-auto --out $O/ds$t.json > $O/ds$t.log 2>&1
  log "deepseek-v3 $t tokens rc=$?"
done
xz -9 $O/*.log 2>/dev/null; log done

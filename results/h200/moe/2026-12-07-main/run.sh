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
# The five configurations where the 2026-12-02 run measured `auto` 4-9% faster than the same variant before it
# (results/cpu/2026-12-07-moe-trial-drift/): auto, the variant, auto, the variant, in one process each.
while read -r list filter dtype twin extra; do
  [ $SECONDS -gt 540 ] && { log "time guard at the order runs"; break; }
  timeout 60 $X moe bench --gpus 1 --config configs/$list.json --filter "$filter" --dtype $dtype $extra \
    --impl megamoe-auto,$twin,megamoe-auto,$twin --out $O/order_${list}_${twin}_$dtype.json > $O/order_${list}_${twin}_$dtype.log 2>&1
  log "order $list $filter $dtype rc=$?"
done <<'LIST'
moe_grid deepseek-v3:h7168-i2048-e256-k8/t4096/balanced bf16 megamoe-wave
moe_grid h1152-i4608-e8-k2/t2048/balanced bf16 megamoe-wave
moe_grid h4096-i14336-e8-k2/t8192/skewed fp8 megamoe-interleaved --cluster-m 2
moe_heldout h2048-i1408-e64-k6/t1024/balanced bf16 megamoe-interleaved
moe_heldout2 h1536-i512-e40-k8/t1536/balanced bf16 megamoe-wave
LIST
xz -9 $O/*.log 2>/dev/null; log done

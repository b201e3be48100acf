#!/usr/bin/env bash
# main beside FlashAttention-4 and cuDNN (two rounds), the checks, fused / FA-only at P = 1, Nsight Compute at two d = 64
# shapes. FlashAttention-4 must import (flash_attn.cute). XSTAGE_BUILD: the build (default build).
set -u
B=${XSTAGE_BUILD:-build}
O=$(mktemp -d); R=${RESULTS:-.}
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,power.limit --format=csv > $O/gpu.txt 2>&1
log() { echo "[$SECONDS s] $*" | tee -a $O/log.txt; tar cJf $R/run.tar.xz -C $O . ; }
python3 -c "import flash_attn.cute.interface" 2>/dev/null; log "fa4 importable rc=$?"
timeout 60 $B/xstage attention ulysses check --virtual-ranks 2 --device-timeout-s 5 --out $O/ulysses_check_v2.json \
  > $O/ulysses_check_v2.log 2>&1; log "ulysses check P=2 rc=$?"
for r in 1 2; do
  OUT=$O/r$r REPS=16 XSTAGE_BUILD=$B timeout 200 bash scripts/gpu/attention_variants.sh main=$B > /dev/null 2>&1; log "round $r rc=$?"
done
timeout 40 $B/xstage attention ulysses bench --gpus 1 --seqlens 8192,16384 --heads 4,12 --head-dims 64,128 \
  --store-path tma --trials 5 --replays 3 --out $O/p1.json > $O/p1.log 2>&1; log "p1 rc=$?"
[ $SECONDS -lt 400 ] && { OUT=$O/profile SHAPES="1,16384,12,64;2,4250,24,64" BACKENDS=xstage,fa4 XSTAGE_BUILD=$B timeout 170 \
  bash scripts/gpu/attention_profile.sh > /dev/null 2>&1; log "profile rc=$?"; }
xz -9 $O/*.log 2>/dev/null
log done

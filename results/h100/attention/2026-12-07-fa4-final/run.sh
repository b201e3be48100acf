#!/usr/bin/env bash
# main beside FlashAttention-4 and cuDNN, two rounds, after the checks. FlashAttention-4 must import (flash_attn.cute).
#   XSTAGE_BUILD=<build dir> RESULTS=<dir> bash run.sh
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
xz -9 $O/*.log 2>/dev/null
log done

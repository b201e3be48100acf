#!/usr/bin/env bash
# Both builds beside FlashAttention-4 and cuDNN in one process, in turn (two rounds, the builds listed in both orders);
# the held-out shapes (merge build: off, auto, always); the fused epilogue against FA-only at P = 1.
#   MAIN=<main's build dir> MERGE=<the merge build's dir> RESULTS=<dir> bash call3.sh   (flash_attn.cute importable)
set -u
A=${MAIN:-build-main}; B=${MERGE:-build}
O=$(mktemp -d); R=${RESULTS:-.}
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,power.limit --format=csv > $O/gpu.txt 2>&1
log() { echo "[$SECONDS s] $*" | tee -a $O/log.txt; tar cJf $R/call3.tar.xz -C $O . ; }
python3 -c "import flash_attn.cute.interface" 2>/dev/null; log "fa4 importable rc=$?"
OUT=$O/r1 REPS=16 timeout 220 bash scripts/gpu/attention_variants.sh main=$A merge=$B > /dev/null 2>&1; log "round 1 rc=$?"
OUT=$O/r2 REPS=16 timeout 220 bash scripts/gpu/attention_variants.sh merge=$B main=$A > /dev/null 2>&1; log "round 2 rc=$?"
for s in 1,24576,16,128 1,12288,24,64 1,49152,8,128 2,16384,10,128 1,40960,5,64 2,8192,24,64 1,20480,6,64 1,6144,32,64; do
  IFS=, read Bt Mq H Dh <<< "$s"
  [ $SECONDS -gt 500 ] && { log "time guard at held-out $s"; break; }
  $B/xstage attention bench --key-splits off,auto,always --batch $Bt --seqlens $Mq --heads $H --head-dims $Dh --trials 10 \
    --out $O/held_${Bt}x${Mq}x${H}x${Dh}.json > /dev/null 2>> $O/held_errors.log || log "held-out $s failed"
done
log "held-out shapes"
for r in 1 2; do
  [ $SECONDS -gt 550 ] && { log "time guard at p1 r$r"; break; }
  timeout 40 $B/xstage attention ulysses bench --gpus 1 --seqlens 8192,16384 --heads 4,12 --head-dims 64,128 \
    --store-path tma --trials 5 --replays 3 --out $O/p1_r$r.json > $O/p1_r$r.log 2>&1; log "p1 r$r rc=$?"
done
xz -9 $O/*.log 2>/dev/null
log done

#!/usr/bin/env bash
# The split tail on an H200: checks, then main's build (split) and the build before it (no split) beside
# FlashAttention-4 and cuDNN in one process, in turn, two rounds in both listing orders; the held-out shapes of the
# H100 run (off, auto, always); the fused epilogue against FA-only at P = 1.
#   SPLIT=<build dir of main> NOSPLIT=<build dir of 82c048b> RESULTS=<dir> bash run.sh
# FlashAttention-4 must import (flash_attn.cute) for its column; without it the run goes on with cuDNN only.
set -u
S=${SPLIT:-build}; U=${NOSPLIT:-build-nosplit}
O=$(mktemp -d); R=${RESULTS:-.}
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,power.limit --format=csv > $O/gpu.txt 2>&1
cp "$0" $O/run.sh
log() { echo "[$SECONDS s] $*" | tee -a $O/log.txt; tar cJf $R/run.tar.xz -C $O . ; }
python3 -c "import flash_attn.cute.interface" 2>/dev/null; log "fa4 importable rc=$?"
timeout 60 $S/xstage attention ulysses check --virtual-ranks 2 --device-timeout-s 5 --out $O/ulysses_check_v2.json \
  > $O/ulysses_check_v2.log 2>&1; log "ulysses check P=2 rc=$?"
timeout 90 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $S/xstage attention check --quick \
  --seed 5 > $O/memcheck.log 2>&1; log "memcheck rc=$?"
# each round also runs `xstage attention check` (47 cases) with each build
OUT=$O/r1 REPS=16 timeout 280 bash scripts/gpu/attention_variants.sh split=$S nosplit=$U > /dev/null 2>&1; log "round 1 rc=$?"
OUT=$O/r2 REPS=16 timeout 280 bash scripts/gpu/attention_variants.sh nosplit=$U split=$S > /dev/null 2>&1; log "round 2 rc=$?"
for s in 1,24576,16,128 1,12288,24,64 1,49152,8,128 2,16384,10,128 1,40960,5,64 2,8192,24,64 1,20480,6,64 1,6144,32,64; do
  IFS=, read B Mq H Dh <<< "$s"
  [ $SECONDS -gt 470 ] && { log "time guard at held-out $s"; break; }
  $S/xstage attention bench --key-splits off,auto,always --batch $B --seqlens $Mq --heads $H --head-dims $Dh --trials 10 \
    --out $O/held_${B}x${Mq}x${H}x${Dh}.json > /dev/null 2>> $O/held_errors.log || log "held-out $s failed"
done
log "held-out shapes"
for r in 1 2; do
  [ $SECONDS -gt 530 ] && { log "time guard at p1 r$r"; break; }
  timeout 40 $S/xstage attention ulysses bench --gpus 1 --seqlens 8192,16384 --heads 4,12 --head-dims 64,128 \
    --store-path tma --trials 5 --replays 3 --out $O/p1_r$r.json > $O/p1_r$r.log 2>&1; log "p1 r$r rc=$?"
done
xz -9 $O/*.log 2>/dev/null
log done

#!/usr/bin/env bash
# Checks: both builds' `xstage attention check` (the split cases' errors compared; main's is skipped where MAIN has no
# build), the merge build's Ulysses check at two virtual ranks and compute-sanitizer on its quick cases.
#   MAIN=<main's build dir> MERGE=<the merge build's dir> RESULTS=<dir> bash call1.sh
set -u
A=${MAIN:-build-main}; B=${MERGE:-build}
O=$(mktemp -d); R=${RESULTS:-.}
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,power.limit --format=csv > $O/gpu.txt 2>&1
log() { echo "[$SECONDS s] $*" | tee -a $O/log.txt; tar cJf $R/call1.tar.xz -C $O . ; }
for b in main merge; do
  if [ $b = main ]; then X=$A/xstage; else X=$B/xstage; fi
  [ -x $X ] || { log "no $X: $b's check skipped"; continue; }
  timeout 60 $X attention check --seed 11 --out $O/check_$b.json > $O/check_$b.log 2>&1; log "attention check $b rc=$?"
done
timeout 90 $B/xstage attention ulysses check --virtual-ranks 2 --device-timeout-s 5 --out $O/ulysses_check_v2.json \
  > $O/ulysses_check_v2.log 2>&1; log "ulysses check P=2 rc=$?"
for tool in memcheck racecheck synccheck; do
  timeout 120 compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 $B/xstage attention check --quick \
    --seed 5 > $O/$tool.log 2>&1; log "$tool rc=$?"
done
xz -9 $O/*.log 2>/dev/null
log done

# run29: the fused fp8 kernel's error on the 1- and 3-token check cases (run28's check failure), and the final
# check at the final code. Binaries in build: xstage (final), xstage_fe423c1 (run23's code).
source scripts/gpu/env.sh
S=16984830432639385814  # run28's check seed
echo "== fe423c1 (run23's code), seed $S"
build/xstage_fe423c1 moe check --gpus 2 --seed $S --cases k5-empty-experts-i128 --dtype fp8 --impl megamoe-wave,megamoe-interleaved,unfused-loop
echo "== final code, seed $S"
build/xstage moe check --gpus 2 --seed $S --cases k5-empty-experts-i128 --dtype fp8 --impl megamoe-wave,megamoe-interleaved,unfused-loop
for i in $(seq 1 12); do
  echo "== final code, fresh seed $i"
  build/xstage moe check --gpus 2 --cases k5-empty-experts-i128,k3-one-token --dtype fp8 --impl megamoe-wave
done
echo "== final code: the whole check"
build/xstage moe check --gpus 2 --out "$OUT/check.json"

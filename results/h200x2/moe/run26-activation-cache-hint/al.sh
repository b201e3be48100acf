source scripts/gpu/env.sh
mkdir -p $OUT/al
SEED=1234567
F="deepseek-v3:h7168-i2048-e256-k8/t4096/balanced/bf16,h7168-i2048-e256-k8/t8192/balanced/fp8,h4096-i14336-e8-k2/t8192/balanced,h4096-i1536-e128-k8/t8192/balanced"
for round in 1 2; do for b in xstage xstage_al; do
  echo "== round $round $b"
  build/$b moe bench --gpus 2 --impl megamoe-wave,megamoe-wave-pipelined,megamoe-interleaved --filter "$F" --seed $SEED --out $OUT/al/r$round-$b.json 2>&1 | grep -v "rank 0 kernel"
done; done

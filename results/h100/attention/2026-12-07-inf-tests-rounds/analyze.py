"""Paired rounds of variant 1 against 0: d_r = ratio(1) - ratio(0) per point and round, in points (x100)."""
import glob, json, os, re, statistics as st, sys

root = sys.argv[1]
ratios = {}  # (grid, key, k, r) -> ratio
for f in glob.glob(os.path.join(root, "*_k*_r*.json")):
    grid, k, r = re.match(r"(p1|v\d)_k(\d)_r(\d+)\.json", os.path.basename(f)).groups()
    for p in json.load(open(f))["results"]:
        for path, field in (("tma", "fused_tma_over_FA_median_of_trials"), ("st_global", "fused_st_global_over_FA_median_of_trials"),
                            ("both", "layer_fused_both_over_FA_median_of_trials")):
            key = (grid, path, p["heads"], p["seqlen"], p["head_dim"], p["tile_b_m"])
            if p.get(field) is not None:
                ratios[key + (int(k), int(r))] = p[field]
points = sorted({k[:6] for k in ratios})
rounds = sorted({k[7] for k in ratios})
print(f"rounds: {rounds}")
print("grid path heads M d b_m | main median | var1 median | median d_r | d_r<0 rounds | d_r per round")
for pt in points:
    pairs = [(ratios.get(pt + (0, r)), ratios.get(pt + (1, r))) for r in rounds]
    pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
    if not pairs:
        continue
    d = [100 * (b - a) for a, b in pairs]
    wg = "2wg" if pt[5] == 128 else "3wg"
    print(f"{pt[0]} {pt[1]:9s} {pt[2]:2d} {pt[3]:5d} {pt[4]:3d} {wg} | {st.median(a for a, _ in pairs):.4f} | "
          f"{st.median(b for _, b in pairs):.4f} | {st.median(d):+.2f} | {sum(x < 0 for x in d)}/{len(d)} | "
          + " ".join(f"{x:+.1f}" for x in d))

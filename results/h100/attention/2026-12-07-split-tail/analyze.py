"""The split tail's runs: per DiT shape and round, the new build's auto over off (in one process, in turn: the median of
the per-trial ratios) and each over main's build (separate processes); the grid's auto over off; the check's cases."""
import glob, json, os, re, statistics, sys
d = sys.argv[1]
rows = {}
for f in sorted(glob.glob(os.path.join(d, "dit_*.json"))):
    b, r, shape = re.match(r"dit_(new|main)_r(\d)_(.*)\.json", os.path.basename(f)).groups()
    pts = json.load(open(f))["points"]
    e = rows.setdefault((shape, r), {})
    if b == "main":
        e["main"] = pts[0]["time_ms"]
    else:
        for p in pts:
            e[p["key_split"]] = p["time_ms"]
            if p["key_split"] == "auto":
                e["auto/off"] = p["speed_vs_first_median_of_trials"]
                e["tail"] = p["split_tail_tiles"]
                e["tflops"] = p["tflops"]
print(f"{'shape B x M x H x d':24} r  tail  TFLOP/s  off/auto(in turn)  main/off  main/auto")
for (shape, r), e in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1])):
    if "auto" not in e:
        print(shape, r, "incomplete", e); continue
    vs_main = f"{e['main']/e['off']:8.3f}  {e['main']/e['auto']:9.3f}" if "main" in e else f"{'-':>8}  {'-':>9}"
    print(f"{shape:24} {r}  {e['tail']:4}  {e['tflops']:7.1f}  {e['auto/off']:17.3f}  {vs_main}")
g = os.path.join(d, "grid.json")
if os.path.exists(g):
    print("\ngrid: d heads M tail  off/auto(in turn)  TFLOP/s auto")
    for p in json.load(open(g))["points"]:
        if p["key_split"] == "auto":
            print(f"  {p['head_dim']:3} {p['heads']:3} {p['seqlen']:6} {p['split_tail_tiles']:4}  {p['speed_vs_first_median_of_trials']:.3f}  {p['tflops']:.1f}")
c = os.path.join(d, "attention_check.json")
if os.path.exists(c):
    j = json.load(open(c))
    cs = j["cases"]
    print(f"\ncheck: {sum(1 for x in cs if x.get('passed'))}/{len(cs)} passed; split cases:")
    for x in cs:
        if "split" in x["case"] or "4608" in x["case"] or "4250" in x["case"]:
            print("  ", x["case"], x.get("passed"), x.get("rel_l2"), x.get("lse_max_abs"))

# The split's own cost in key-block steps: at every point the launcher split, the steps the wave arithmetic says the
# tail saves ((N + 2) - ceil(R·N/G): a tile's N key blocks and two of its own, against the CTA's share of the tail)
# less the steps it saved as timed (off - auto over one step's time, off / (waves · (N + 2))).
def split_cost(p, off_ms, sms):
    bm, bn = (int(x) for x in re.match(r"b_m=(\d+) b_n=(\d+)", p["tile"]).groups())
    m, n_keys = p["seqlen"], -(-p["seqlen"] // bn)
    tiles = p["batch"] * p["heads"] * -(-m // bm)
    waves = -(-tiles // sms)
    tail = p["split_tail_tiles"]
    step = off_ms / (waves * (n_keys + 2))
    saved = off_ms * (1 - 1 / p["speed_vs_first_median_of_trials"]) / step
    return n_keys, (n_keys + 2) - -(-tail * n_keys // sms), saved

print("\nthe split's cost: shape  N  model's saving  timed saving  cost (steps)")
sources = sorted(glob.glob(os.path.join(d, "dit_new_*.json"))) + ([g] if os.path.exists(g) else [])
for f in sources:
    j = json.load(open(f))
    sms = j["gpu"]["sm_count"]
    off = {(p["batch"], p["seqlen"], p["heads"], p["head_dim"]): p["time_ms"] for p in j["points"] if p["key_split"] == "off"}
    for p in j["points"]:
        if p["key_split"] != "auto" or p["split_tail_tiles"] == 0:
            continue
        n_keys, model, saved = split_cost(p, off[(p["batch"], p["seqlen"], p["heads"], p["head_dim"])], sms)
        print(f"  [{p['batch']}, {p['seqlen']}, {p['heads']}, {p['head_dim']}]  {n_keys:4}  {model:6}  {saved:8.1f}  {model - saved:6.1f}")

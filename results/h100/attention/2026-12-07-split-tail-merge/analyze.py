"""The split tail's merge runs (README.md here): call1's checks (the split cases' errors, main's build against the
merge build's), call2's split modes per build (auto / off and always / off in one process, in turn; the split's cost
in key-block steps per point), call3's held-out shapes and the fused epilogue against FA-only at P = 1; held_out's
shapes with main's build.
    python3 analyze.py merge1/      (a run's folder: its call*.tar.xz or held_out.tar.xz are unpacked into a temporary one)"""
import glob, json, os, re, sys, tarfile, tempfile

run = sys.argv[1]
d = tempfile.mkdtemp()
for t in glob.glob(os.path.join(run, "*.tar.xz")):
    name = os.path.basename(t)[: -len(".tar.xz")]
    with tarfile.open(t) as tf:
        tf.extractall(os.path.join(d, "call3" if name == "held_out" else name), filter="data")


def load(path):
    with open(path) as f:
        return json.load(f)


# call1: every case of both builds' checks; a split case's errors equal in both builds means equal outputs.
c1 = os.path.join(d, "call1")
if os.path.isdir(c1):
    checks = {b: load(os.path.join(c1, f"check_{b}.json")) for b in ("main", "merge") if os.path.exists(os.path.join(c1, f"check_{b}.json"))}
    for b, j in checks.items():
        cs = j["cases"]
        print(f"check {b}: {sum(1 for x in cs if x.get('passed'))}/{len(cs)} passed")
    if len(checks) == 2:
        same = differ = 0
        for a, b in zip(checks["main"]["cases"], checks["merge"]["cases"]):
            keys = ("rel_l2", "lse_max_abs")
            if all(a.get(k) == b.get(k) for k in keys):
                same += 1
            else:
                differ += 1
                print("  differs:", a["case"], [(a.get(k), b.get(k)) for k in keys])
        print(f"  cases with the same errors in both builds: {same} of {same + differ}")


def split_cost(p, off_ms, sms):
    """Steps the wave arithmetic says the tail saves ((N + 2) - ceil(R·N/G)) and the steps it saved as timed."""
    bm, bn = (int(x) for x in re.match(r"b_m=(\d+) b_n=(\d+)", p["tile"]).groups())
    n_keys = -(-p["seqlen"] // bn)
    tiles = p["batch"] * p["heads"] * -(-p["seqlen"] // bm)
    waves = -(-tiles // sms)
    step = off_ms / (waves * (n_keys + 2))
    saved = off_ms * (1 - 1 / p["speed_vs_first_median_of_trials"]) / step
    return n_keys, (n_keys + 2) - -(-p["split_tail_tiles"] * n_keys // sms), saved


def modes(files, label):
    print(f"\n{label}: shape  build  round  mode  tail  N  speed-up over off (in turn)  model's saving  timed  cost (steps)")
    for f in files:
        m = re.match(r"(?:dit|grid|held)_?(main|merge)?_?r?(\d)?_?(.*)\.json", os.path.basename(f))
        j = load(f)
        sms = j["gpu"]["sm_count"]
        off = {(p["batch"], p["seqlen"], p["heads"], p["head_dim"]): p["time_ms"] for p in j["points"] if p["key_split"] == "off"}
        for p in j["points"]:
            if p["key_split"] == "off":
                continue
            key = (p["batch"], p["seqlen"], p["heads"], p["head_dim"])
            s = f"  {str(list(key)):22} {m.group(1) or 'merge':5} {m.group(2) or '-':1} {p['key_split']:6} {p['split_tail_tiles']:4}"
            if p["split_tail_tiles"]:
                n_keys, model, saved = split_cost(p, off[key], sms)
                s += f" {n_keys:4} {p['speed_vs_first_median_of_trials']:7.3f} {model:6} {saved:7.1f} {model - saved:6.1f}"
            else:
                s += f" {'':4} {p['speed_vs_first_median_of_trials']:7.3f}"
            print(s)


c2 = os.path.join(d, "call2")
if os.path.isdir(c2):
    modes(sorted(glob.glob(os.path.join(c2, "dit_*.json")), key=lambda f: (re.sub(r"dit_\w+?_r\d_", "", f), f)), "call2 DiT shapes")
    modes(sorted(glob.glob(os.path.join(c2, "grid_*.json"))), "call2 grid")
c3 = os.path.join(d, "call3")
if os.path.isdir(c3):
    held = sorted(glob.glob(os.path.join(c3, "held_*.json")), key=lambda f: (re.sub(r"_r\d", "", f), f))
    modes(held, "held-out shapes")
    for f in sorted(glob.glob(os.path.join(c3, "p1_r*.json"))):
        print(f"\n{os.path.basename(f)}: fused / FA-only at P = 1")
        for p in load(f)["results"]:
            print(f"  {p['heads']:3} x {p['seqlen']:6} x {p['head_dim']:3}  fused (TMA) / FA-only {p['fused_tma_over_FA_median_of_trials']:.3f}")

# call3's rounds: main's build (the split by the launcher's rule) against FlashAttention-4 and cuDNN, ratio of the
# medians of the same run; the geometric mean over the nine shapes.
for r in ("r1", "r2"):
    t = os.path.join(d, "call3", r, "attention_variants.tar.xz")
    if not os.path.exists(t):
        continue
    x = os.path.join(d, "call3", r + "_x")
    with tarfile.open(t) as tf:
        tf.extractall(x, filter="data")
    pts = load(os.path.join(x, "bench.json"))["points"]
    by = {}
    for p in pts:
        by.setdefault(p["shape"], {})[p["backend"]] = p
    print(f"\ncall3 {r}: shape [B, M, H, d]  main TFLOP/s  merge/main  main/FA4  main/cuDNN")
    logs = []
    for shape, b in by.items():
        m = b["xstage:main"]
        row = f"  {shape:24} [{m['batch']}, {m['seqlen']}, {m['heads']}, {m['head_dim']}]  {m['tflops']:6.0f}"
        row += f"  {m['time_ms'] / b['xstage:merge']['time_ms']:.3f}  {b['fa4']['time_ms'] / m['time_ms']:.3f}  {b['cudnn']['time_ms'] / m['time_ms']:.3f}"
        logs.append(b["fa4"]["time_ms"] / m["time_ms"])
        print(row)
    g = 1.0
    for v in logs:
        g *= v
    print(f"  geometric mean main/FA4 {g ** (1 / len(logs)):.3f}")

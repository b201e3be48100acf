"""run.tar.xz of this folder: the combine kernel's duration under Nsight Compute per build, each build's always / off
(in one process, in turn) per shape and round with the split's cost in key-block steps (the steps the wave arithmetic
says the tail saves, less those it saved as timed), and the variants' table.    python3 analyze.py run.tar.xz"""
import csv, io, json, re, sys, tarfile

tf = tarfile.open(sys.argv[1])
files = {m.name.lstrip("./"): m for m in tf.getmembers() if m.isfile()}
read = lambda name: io.TextIOWrapper(tf.extractfile(files[name]))
for b in ("main", "new"):
    rows = [r for r in csv.reader(read(f"ncu_{b}.csv")) if len(r) > 10]
    times = [float(dict(zip(rows[0], r))["Metric Value"].replace(",", "")) / 1e3 for r in rows[1:]
             if dict(zip(rows[0], r))["Metric Name"] == "gpu__time_duration.sum"]
    print(f"combine kernel, {b}: " + " ".join(f"{t:.1f}" for t in times) + " us (SD3-1024, Nsight Compute)")
print("\nshape  build round  always/off  N  model's saving  timed  cost (steps)")
for name in sorted(n for n in files if n.startswith("dit_")):
    b, r, shape = re.match(r"dit_(main|new)_r(\d)_(.*)\.json", name).groups()
    j = json.load(read(name))
    sms = j["gpu"]["sm_count"]
    off = next(p["time_ms"] for p in j["points"] if p["key_split"] == "off")
    p = next(p for p in j["points"] if p["key_split"] == "always")
    bm, bn = (int(x) for x in re.match(r"b_m=(\d+) b_n=(\d+)", p["tile"]).groups())
    n = -(-p["seqlen"] // bn)
    waves = -(-(p["batch"] * p["heads"] * -(-p["seqlen"] // bm)) // sms)
    step = off / (waves * (n + 2))
    saved = off * (1 - 1 / p["speed_vs_first_median_of_trials"]) / step
    model = (n + 2) - -(-p["split_tail_tiles"] * n // sms)
    print(f"  {shape:16} {b:4} {r}  {p['speed_vs_first_median_of_trials']:.3f}  {n:4} {model:4} {saved:6.1f} {model - saved:5.1f}")
tv = tarfile.open(fileobj=tf.extractfile(files["variants/attention_variants.tar.xz"]))
print("\n" + next(io.TextIOWrapper(tv.extractfile(m)).read() for m in tv.getmembers() if m.name.endswith("summary.md")))

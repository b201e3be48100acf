"""run.tar.xz of this folder: each build's check, and its always / off (one process, in turn) per shape and round.
    python3 analyze.py run.tar.xz"""
import io, json, re, sys, tarfile

tf = tarfile.open(sys.argv[1])
files = {m.name.lstrip("./"): m for m in tf.getmembers() if m.isfile()}
read = lambda name: io.TextIOWrapper(tf.extractfile(files[name]))
for b in ("main", "new"):
    cases = json.load(read(f"check_{b}.json"))["cases"]
    print(f"check {b}: {sum(1 for c in cases if c.get('passed'))} of {len(cases)} passed")
checks = [json.load(read(f"check_{b}.json"))["cases"] for b in ("main", "new")]
same = sum(1 for a, b in zip(*checks) if (a.get("rel_l2"), a.get("lse_max_abs")) == (b.get("rel_l2"), b.get("lse_max_abs")))
print(f"cases with the same errors in both builds: {same} of {len(checks[0])}")
print("\nshape  build round  always/off")
for name in sorted((n for n in files if n.startswith("dit_")), key=lambda n: (re.sub(r"dit_\w+?_r\d_", "", n), n)):
    b, r, shape = re.match(r"dit_(main|new)_r(\d)_(.*)\.json", name).groups()
    p = next(p for p in json.load(read(name))["points"] if p["key_split"] == "always")
    print(f"  {shape:16} {b:4} {r}  {p['speed_vs_first_median_of_trials']:.3f}")

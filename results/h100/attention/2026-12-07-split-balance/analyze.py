"""Nsight Compute's per-kernel metrics from run.tar.xz: duration, grid, per-SM active cycles (min / avg / max) over
elapsed cycles, instructions, and the SM clock they imply.    python3 analyze.py run.tar.xz"""
import collections, csv, io, sys, tarfile

with tarfile.open(sys.argv[1]) as tf:
    for member in sorted(tf.getmembers(), key=lambda m: m.name):
        if not member.name.endswith(".csv"):
            continue
        rows = [r for r in csv.reader(io.TextIOWrapper(tf.extractfile(member))) if len(r) > 10]
        header, by = rows[0], collections.OrderedDict()
        for r in rows[1:]:
            d = dict(zip(header, r))
            key = (d["ID"], "combine" if "combine" in d["Kernel Name"] else "forward")
            by.setdefault(key, {})[d["Metric Name"]] = float(d["Metric Value"].replace(",", ""))
        print(member.name)
        for (i, kind), m in by.items():
            el = m["sm__cycles_elapsed.avg"]
            line = f"  {i:>2} {kind:8} {m['gpu__time_duration.sum'] / 1e3:8.1f} us  {el / m['gpu__time_duration.sum']:.3f} GHz"
            if "sm__cycles_active.min" in m:
                line += (f"  grid {m['launch__grid_size']:4.0f}  active min/avg/max {m['sm__cycles_active.min'] / el:.3f} "
                         f"{m['sm__cycles_active.avg'] / el:.3f} {m['sm__cycles_active.max'] / el:.3f}  "
                         f"inst {m['smsp__inst_executed.sum'] / 1e6:.1f} M")
            else:
                line += f"  active/elapsed {m['sm__cycles_active.avg'] / el:.3f}"
            print(line)

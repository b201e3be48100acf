"""Per forward kernel present in both builds: its key-block loop (sass_stats.wgmma_loop) in build A and in build B,
the share of opcodes in the same order, the whole kernel's instruction count, and the opcodes whose counts differ (B - A).

    python3 loop_compare.py A B [REGEX]   (run from the repository root; cuobjdump on PATH)
"""
import sys, re
sys.path.insert(0, "tools/kernels")
import sass_stats as s
a = s.functions([sys.argv[1]]); b = s.functions([sys.argv[2]])
pat = sys.argv[3] if len(sys.argv) > 3 else "AllToAll"
for name in sorted(n for n in a if re.search(pat, n) and n in b):
    la, lb = s.wgmma_loop(a[name]), s.wgmma_loop(b[name])
    short = re.sub(r"E+vNT_6ParamsE$", "", re.sub(r".*FlashFwdTileConfigI", "", name))
    diff = s.loop_difference(la, lb)
    print(f"{short}  loop {len(la)} -> {len(lb)}  same order {s.same_order(la, lb):.3f}  kernel {len(a[name])} -> {len(b[name])}  {diff}")

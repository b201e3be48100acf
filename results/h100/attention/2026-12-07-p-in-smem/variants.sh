#!/usr/bin/env bash
# Compiled only (no GPU): two forms of the patch that the README says were left behind, each against the patch as it
# is, from one translation unit each with the build's own nvcc command (BUILD: a configured build of main, default
# build/, built; cuobjdump on PATH). Prints, per form, the 192-row d = 64 plain kernel's key-block loop (as
# tools/kernels/sass_stats.py finds it: its instructions, spills and R2UR) or the d = 128 plain kernel's TMA store
# source offsets (its output staging in shared memory); and the same of main's build for comparison.
#   per_thread_pv   O += P V's operands partitioned per thread instead of per warpgroup
#   empty_member    P's buffer as an empty [[no_unique_address]] member where P stays in registers
#
#   bash results/h100/attention/2026-12-07-p-in-smem/variants.sh > variants.txt
set -eu
cd "$(dirname "$0")/../../../.."
F=results/h100/attention/2026-12-07-p-in-smem BUILD=${BUILD:-build}
[ -f "$BUILD/compile_commands.json" ] || { echo "variants.sh: no $BUILD/compile_commands.json: build main there first (BUILD=dir)" >&2; exit 2; }
command -v cuobjdump >/dev/null || { echo "variants.sh: cuobjdump is not on PATH (it comes with the CUDA toolkit)" >&2; exit 2; }
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
cp -r src tests "$W/"; xz -dc "$F/p-in-smem.patch.xz" | patch -s -d "$W" -p1
compile() {  # TU (generated file name) OUT: the build's command with the patched sources
  python3 - "$BUILD/compile_commands.json" "$1" "$W/src" "$2" <<'PY' > "$W/cmd"
import json, shlex, sys
e = [e for e in json.load(open(sys.argv[1])) if e["file"].endswith("generated/" + sys.argv[2])][0]
args = shlex.split(e["command"]); args[args.index("-o") + 1] = sys.argv[4]
print("cd " + shlex.quote(e["directory"]) + " && " + " ".join(shlex.quote(a.replace("-I" + e["file"].split("/build/")[0] + "/src", "-I" + sys.argv[3])) for a in args))
PY
  bash "$W/cmd"
}
tma_store_offsets() {  # the shared-memory offsets added to the storage base for the TMA stores' sources
  cuobjdump -sass "$1" 2>/dev/null | grep -B40 UTMASTG | grep -oE "UIADD3 UR[0-9]+, UR[0-9]+, 0x[0-9a-f]+, URZ" |
    awk '{print $4}' | tr -d , | sort -u | tr '\n' ' '; echo
}
loop_stats() {  # the 192-row d = 64 plain kernel: its key-block loop's instructions, spills and R2UR, the kernel's spills
  python3 - "$1" <<'PY'
import sys
sys.path.insert(0, "tools/kernels")
import sass_stats as s
funcs = s.functions([sys.argv[1]])
body = funcs[s.pick(funcs, "EpilogueStoreTma")]
loop = s.wgmma_loop(body)
ops = [s.opcode(i) for i in loop]
print(f"loop {len(loop)} instructions, {sum(o.startswith(('STL', 'LDL')) for o in ops)} spill (STL/LDL), "
      f"{ops.count('R2UR')} R2UR; kernel {s.spills(body)} spill instructions")
PY
}
M=$W/src/attention/mainloop_sm90.hpp
O=$(dirname "$(find "$BUILD/src/attention" -name flash_fwd_kHdim64Rows192.cu.o | head -n 1)")
echo "== main: 192-row d = 64 loop"; loop_stats "$O/flash_fwd_kHdim64Rows192.cu.o"
echo "== main: d = 128 TMA store sources"; tma_store_offsets "$O/flash_fwd_kHdim128Rows128.cu.o"
echo "== the patch: 192-row d = 64 loop"; compile flash_fwd_kHdim64Rows192.cu "$W/a.o"
loop_stats "$W/a.o"
echo "== the patch: d = 128 TMA store sources"; compile flash_fwd_kHdim128Rows128.cu "$W/b.o"; tma_store_offsets "$W/b.o"
cp "$M" "$W/orig"
sed -i 's/get_thread_slice(kPInSmem ? (cutlass::canonical_warp_group_idx() - 1) \* 128 : thread_idx)/get_thread_slice(thread_idx)/' "$M"
grep -q "get_thread_slice(thread_idx);" "$M"
echo "== per_thread_pv: 192-row d = 64 loop"; compile flash_fwd_kHdim64Rows192.cu "$W/c.o"
loop_stats "$W/c.o"
cp "$W/orig" "$M"
python3 - "$M" <<'PY'
import sys
p = sys.argv[1]; s = open(p).read()
old = "  using SharedStorage = std::conditional_t<kPInSmem, SharedStorageWithP, SharedStorageCommon>;"
assert old in s
s = s.replace(old, """  struct NoP {};
  struct SharedStorage : SharedStorageCommon {
    [[no_unique_address]] std::conditional_t<kPInSmem, typename SharedStorageWithP::PBuffer, NoP> p;
  };""")
s = s.replace("""  struct SharedStorageWithP : SharedStorageCommon {
    alignas(1024) cute::array_aligned<Element, cute::cosize_v<SmemLayoutP>, 1024> p;
  };""", """  struct SharedStorageWithP {
    struct PBuffer {
      alignas(1024) cute::array_aligned<Element, cute::cosize_v<SmemLayoutP>, 1024> p;
      CUTE_DEVICE Element* data() { return p.data(); }
    };
  };""")
open(p, "w").write(s)
PY
echo "== empty_member: d = 128 TMA store sources (the output staging is at 0x30400 and 0x34400 of 230400 bytes)"
compile flash_fwd_kHdim128Rows128.cu "$W/d.o"; tma_store_offsets "$W/d.o"

#!/usr/bin/env bash
# The tools under tools/ still work on what results/ keeps: each case runs CPU tools on committed runs (xz-compressed
# files, run archives) and, where results/ holds a report a tool wrote, checks that the tool writes it again from the
# committed raw files (the command line it records left out). Nothing is written into the source tree.
#
#   tests/repo/tools_test.sh CASE SOURCE_DIR PYTHON [XSTAGE]
#     CASE    compile | help | calibration | moe_table | moe_fig8 | moe_auto_eval | moe_rule_sensitivity |
#             moe_predictions | moe_traces | moe_storer | moe_power | attention | ulysses | torch_vs_cli | sass_stats |
#             moe_ab | moe_routing_rule | energy | timing | seeds | gpu_scripts | gpu_scripts_dry
#     PYTHON  an interpreter with matplotlib (and torch, for `help`): the project's, scripts/requirements.txt
#     XSTAGE  the built binary (moe_rule_sensitivity, moe_storer and moe_routing_rule run `xstage plan moe`; seeds and
#             gpu_scripts and gpu_scripts_dry call it with the GPU scripts' arguments)
set -euo pipefail

case_name=${1:?usage: tools_test.sh CASE SOURCE_DIR PYTHON}
src=$(cd "${2:?usage: tools_test.sh CASE SOURCE_DIR PYTHON}" && pwd)
py=${3:?usage: tools_test.sh CASE SOURCE_DIR PYTHON}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/xstage-tools-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export PYTHONDONTWRITEBYTECODE=1 MPLBACKEND=Agg
cd "$src"

fail() { echo "tools_test $case_name: FAIL: $*" >&2; exit 1; }
run() { "$py" "$@" > "$tmp/stdout" 2> "$tmp/stderr" || { cat "$tmp/stderr" >&2; fail "exit $? from ${*}"; }; }
# text FILE: a committed file's text, compressed or not, as the tools read it.
text() { "$py" -c 'import sys; sys.path.insert(0, "tools"); from common import results; sys.stdout.write(results.read_text(sys.argv[1]))' "$1"; }
# same_report WRITTEN COMMITTED [LINE]: equal, but for the given line (the command the report records).
same_report() {
  local skip=${3:+${3}d}
  diff <(sed "${skip:-}" "$1") <(text "$2" | sed "${skip:-}") > "$tmp/diff" || { head -n 20 "$tmp/diff" >&2; fail "$1 differs from $2"; }
}
has() { grep -q -- "$2" "$1" || fail "no '$2' in the output"; }

moe=results/h200x2/moe
retune=results/h200/moe/2026-12-01-retune
case "$case_name" in
  compile)  # every tool and example at least compiles
    PYTHONPYCACHEPREFIX=$tmp/pycache "$py" -m py_compile $(find tools examples -name '*.py') ||
      fail "a tool or example does not compile" ;;
  help)  # every tool answers --help (the GPU ones import torch and, from python/, xstage)
    for tool in $(find tools -mindepth 2 -name '*.py' ! -path 'tools/common/*' | sort); do
      PYTHONPATH=$src/python "$py" "$tool" --help > /dev/null 2> "$tmp/stderr" || { cat "$tmp/stderr" >&2; fail "$tool --help"; }
    done ;;
  calibration)  # Fig. 3 and the fit summary from the committed calibration (samples.csv.xz)
    d=results/h200x2/calibration/full
    run tools/calibration/plot.py --samples $d/samples.csv.xz --platform $d/platform.json --summary --out "$tmp/plots"
    for path in st_global_16B tma_bulk; do has "$tmp/stdout" "^\[$path\]"; done
    for path in st_global_16B tma_bulk; do
      for fig in fig3 fig3a fig3b fig3c fig3d; do [ -s "$tmp/plots/${fig}_$path.png" ] || fail "no ${fig}_$path.png"; done
    done ;;
  moe_table)
    run tools/moe/table.py $moe/run44-final/moe.tar.xz
    has "$tmp/stdout" "^fused faster on [0-9]* of [0-9]*;" ;;
  moe_fig8)
    run tools/moe/fig8.py $moe/run44-final/moe.tar.xz --out "$tmp/fig8"
    [ -s "$tmp/fig8/fig8.png" ] || fail "no fig8.png"
    same_report "$tmp/fig8/fig8.md" $moe/fig8/fig8.md 3 ;;
  moe_auto_eval)  # run44 (2 GPUs, its committed plan) and the one-GPU grid the rule is tuned on (its grid's folder)
    run tools/moe/auto_eval.py $moe/run44-final/moe.tar.xz $moe/predictions/grid-plan.json.xz --out "$tmp/auto"
    same_report "$tmp/auto/evaluation.md" $moe/auto-rule/evaluation.md 3
    same_report "$tmp/auto/audit-vs-measured.md" $moe/auto-rule/audit-vs-measured.md
    run tools/moe/auto_eval.py $retune $retune/auto-rule/grid-plan.json.xz --folder moe_grid --out "$tmp/retune"
    same_report "$tmp/retune/evaluation.md" $retune/auto-rule/evaluation.md 3 ;;
  moe_rule_sensitivity)  # `xstage plan moe` with one rule constant changed at a time, scored on the one-GPU grid
    xstage=${4:?moe_rule_sensitivity needs the xstage binary}
    run tools/moe/rule_sensitivity.py "$xstage" configs/moe_grid.json $retune --folder moe_grid --ranks 1 --out "$tmp/sensitivity.md"
    same_report "$tmp/sensitivity.md" $retune/auto-rule/sensitivity.md 3 ;;
  moe_routing_rule)  # the routing-aware tree fitted on the one-GPU grid of 2026-12-02, scored on its held-out lists
    xstage=${4:?moe_routing_rule needs the xstage binary}
    r=results/h200/moe/2026-12-02-retune
    for l in grid heldout heldout2 heldout3; do
      "$xstage" plan moe --grid configs/moe_$l.json --ranks 1 --choose --json > "$tmp/$l-plan.json" || fail "xstage plan moe ($l)"
    done
    run tools/moe/routing_rule.py $r/moe_schedules.tar.xz --fit moe_grid "$tmp/grid-plan.json" \
      --score moe_heldout "$tmp/heldout-plan.json" --score moe_heldout2 "$tmp/heldout2-plan.json" \
      --score moe_heldout3 "$tmp/heldout3-plan.json" --out "$tmp/routing_rule.md"
    same_report "$tmp/routing_rule.md" $r/routing-rule/routing_rule.md 3 ;;
  moe_predictions)
    run tools/moe/predictions.py $moe/predictions/heldout-plan.json.xz --out "$tmp/heldout.md"
    same_report "$tmp/heldout.md" $moe/predictions/heldout.md 3 ;;
  moe_traces)  # the one committed per-tile trace, alone in a folder as `xstage moe bench --trace` leaves them
    mkdir "$tmp/trace" && cp results/h200/moe/2026-12-01-trace-ep1/trace_*.json.xz "$tmp/trace/"
    run tools/moe/trace_figures.py "$tmp/trace" --out "$tmp/figures"
    [ -s "$tmp/figures/fig10.png" ] && [ -s "$tmp/figures/table2.md" ] || fail "no fig10.png / table2.md"
    run tools/moe/trace_vs_audit.py "$tmp/trace" results/h200/moe/predictions-ep1/heldout-plan.json.xz
    has "$tmp/stdout" "h4096-i256-e64-k8/t6144/balanced/bf16 | wave"
    # A trace with the storer's phase stamps (one CTA at 1 cycle/ns, one tile): phases.md per warp, in µs.
    mkdir "$tmp/phases"
    "$py" - "$tmp/phases/trace_x.json" <<'PY'
import json, sys
names = ["staged", "loaded", "issued", "drained", "released"]
doc = {"config": "x", "impl": "megamoe-expert-wave W=1 128x256", "rank": 0,
       "columns": {"drains": names + [n + "_w1" for n in names]},
       "ctas": [{"anchors": [0, 0, 10**6, 10**6], "tiles": [[2, 0, 0, 900, 1000, 0]],
                 "drains": [[1000, 2000, 5000, 6000, 6500, 1000, 1500, 4500, 5500, 6000]]}]}
json.dump(doc, open(sys.argv[1], "w"))
PY
    run tools/moe/trace_figures.py "$tmp/phases" --out "$tmp/phases-out"
    has "$tmp/phases-out/phases.md" "| x | expert-wave | warp 0 | 1.00 / 1.00 | 3.00 / 3.00 | 1.00 / 1.00 | 0.50 / 0.50 | 5.00 / 5.00 | 1 |"
    has "$tmp/phases-out/phases.md" "| x | expert-wave | warp 1 | 0.50 / 0.50 | 3.00 / 3.00 | 1.00 / 1.00 | 0.50 / 0.50 | 4.50 / 4.50 | 1 |"
    has "$tmp/phases-out/tiles.md" "| x | expert-wave | 1000 | 0.00 | nan / nan | 0.9 / 0.10 | nan | 0 | 0.0 | 1 |"
    # A trace with the Linear-1 epilogue's phase stamps (one CTA at 2 cycles/ns, two L1 tiles, one L2 tile):
    # l1_epilogue.md in µs, the L2 tile's zeros left out; tiles.md reads the longer tile records as before.
    mkdir "$tmp/l1"
    "$py" - "$tmp/l1/trace_y.json" <<'PY'
import json, sys
doc = {"config": "y", "impl": "megamoe-interleaved D=9 128x256", "rank": 0,
       "columns": {"tiles": ["stage", "row", "mainloop_start", "mainloop_end", "epilogue_end", "staging_wait",
                             "l1_stored", "l1_fenced"], "drains": ["staged", "issued", "drained"]},
       "ctas": [{"anchors": [0, 0, 10**6, 2 * 10**6],
                 "tiles": [[1, 0, 0, 2000, 12000, 0, 6000, 8000], [1, 1, 12000, 14000, 26000, 0, 20000, 22000],
                           [2, 0, 26000, 28000, 30000, 0, 0, 0]],
                 "drains": [[30000, 31000, 32000]]}]}
json.dump(doc, open(sys.argv[1], "w"))
PY
    run tools/moe/trace_figures.py "$tmp/l1" --out "$tmp/l1-out"
    has "$tmp/l1-out/l1_epilogue.md" "| y | interleaved | 2.50 / 3.00 | 1.00 / 1.00 | 2.00 / 2.00 | 5.50 / 6.00 | 2 |"
    has "$tmp/l1-out/tiles.md" "| y | interleaved | 1000 | 0.00 | 1.0 / 5.50 | 1.0 / 1.00 | 0.00 | 0 | 0.0 | 1 |"
    [ ! -e "$tmp/phases-out/l1_epilogue.md" ] || fail "l1_epilogue.md from a trace without its stamps"
    # Where the consumers' time goes at few rows per expert, again from the committed traces.
    run tools/moe/trace_figures.py results/h200/moe/2026-12-01-small-batch-trace/traces --out "$tmp/small"
    same_report "$tmp/small/tiles.md" results/h200/moe/2026-12-01-small-batch-trace/tiles.md ;;
  seeds)  # the GPU scripts' fresh seeds are ones `xstage ... --seed` takes (0 to 2^63 - 1), drawn in one place
    xstage=${4:?seeds needs the xstage binary}
    # shellcheck disable=SC1091  # env.sh: the GPU scripts' shared set-up (no GPU needed to source it)
    seeds=$(source scripts/gpu/env.sh && for _ in $(seq 64); do fresh_seed; done)
    "$py" - "$seeds" <<'PY' || fail "fresh_seed drew a seed outside 0..2^63-1, or the same one every time"
import sys
s = [int(x) for x in sys.argv[1].split()]
sys.exit(0 if len(s) == 64 and all(0 <= x < 2**63 for x in s) and len(set(s)) > 1 else 1)
PY
    # The CLI takes the largest a seed can be; GPUs hidden, so it then stops for want of one (exit 3), not at --seed (2).
    rc=0; CUDA_VISIBLE_DEVICES="" "$xstage" moe bench --gpus 1 --seed 72057594037927935 > "$tmp/out" 2>&1 || rc=$?
    [ "$rc" = 3 ] || { cat "$tmp/out" >&2; fail "xstage moe bench --seed 2^56 - 1: exit $rc, not 3 (no GPU)"; }
    ! grep -n "urandom" scripts/gpu/*.sh | grep -v "^scripts/gpu/env.sh:" || fail "a GPU script draws its own seed" ;;
  gpu_scripts)  # the GPU scripts (which CI cannot run) still parse, and every option they give xstage or a tool is one it takes
    xstage=${4:?gpu_scripts needs the xstage binary}
    for f in scripts/*.sh scripts/gpu/*.sh; do bash -n "$f" 2> "$tmp/syntax" || { cat "$tmp/syntax" >&2; fail "$f does not parse"; }; done
    PYTHONPATH=$src/python "$py" - "$xstage" scripts/gpu/*.sh <<'PY' || fail "a GPU script gives a command an option it does not take (above)"
import re, subprocess, sys
xstage, scripts = sys.argv[1], sys.argv[2:]
OPTION = re.compile(r"(?<![\w-])--[a-zA-Z][\w-]*")
# A call: xstage (as $X or a build's xstage) with its subcommand words, or a tool under tools/; then its arguments.
CALL = re.compile(r'(?:"\$X"|/xstage")(?P<sub>(?:\s+[a-z][a-z-]*)+)(?P<args>.*)|python3 (?P<tool>tools/\S+\.py)(?P<targs>.*)')
helps, bad, calls = {}, [], {"xstage": 0, "tools": 0}
for path in scripts:
    for line in open(path).read().replace("\\\n", " ").splitlines():  # continuations joined
        line = line.split(" #", 1)[0]
        for call in CALL.finditer(line):
            if call.group("tool"):
                key, command, usage, args = call.group("tool"), [sys.executable, call.group("tool")], None, call.group("targs")
                calls["tools"] += 1
            else:
                key = "xstage " + " ".join(call.group("sub").split())
                command, usage, args = [xstage, *call.group("sub").split()], f"Usage: {key} ", call.group("args")
                calls["xstage"] += 1
            if key not in helps:
                out = subprocess.run([*command, "--help"], capture_output=True, text=True)
                ok = out.returncode == 0 and (usage is None or usage in out.stdout)
                helps[key] = set(OPTION.findall(out.stdout)) if ok else None
            if helps[key] is None:
                bad.append(f"{path}: {key}: no such command (its --help failed)")
                continue
            # The options up to the end of this call (a pipe, a redirect, ||, && or ; ends it).
            for opt in OPTION.findall(re.split(r"\s(?:\|\|?|&&|;|>>?|2>)", args)[0]):
                if opt not in helps[key]:
                    bad.append(f"{path}: {key} {opt}")
if calls["xstage"] < 20 or calls["tools"] < 10:
    bad.append(f"only {calls} calls found in {len(scripts)} GPU scripts: the pattern no longer finds them")
print("\n".join(bad) or f"{calls['xstage']} xstage and {calls['tools']} tool calls in {len(scripts)} GPU scripts, "
      "every option known", file=sys.stderr if bad else sys.stdout)
sys.exit(1 if bad else 0)
PY
    ;;
  gpu_scripts_dry)  # the GPU scripts run where no GPU is visible, xstage behind a wrapper that logs each call: every
    # xstage command they give passes xstage's argument checks (it stops at "no GPU", exit 3), and each bad-input check
    # (expect_status, scripts/gpu/env.sh) wants the status xstage gives that input
    xstage=${4:?gpu_scripts_dry needs the xstage binary}
    build=$(cd "$(dirname "$xstage")" && pwd) fake=$tmp/build
    mkdir -p "$fake/tests"
    for f in "$build"/* "$build"/tests/*; do [ -f "$f" ] && [ -x "$f" ] && ln -s "$f" "$fake/${f#"$build"/}"; done
    rm "$fake/xstage"
    cat > "$fake/xstage" <<WRAPPER
#!/usr/bin/env bash
"$build/xstage" "\$@"; rc=\$?
printf '%s\t%s\t%s\n' "\$rc" "\${XSTAGE_EXPECTED_STATUS:-}" "\$*" >> "$tmp/calls.tsv"
exit \$rc
WRAPPER
    chmod +x "$fake/xstage"
    for s in attention calibrate moe moe_ab moe_power moe_schedules moe_storer moe_weight_stream ulysses; do
      CUDA_VISIBLE_DEVICES= GPUS=2 XSTAGE_BUILD=$fake OUT=$tmp/out timeout 120 bash scripts/gpu/$s.sh > "$tmp/$s.log" 2>&1 || true
    done
    "$py" - "$tmp/calls.tsv" <<'PY' || fail "a GPU script gives xstage an input it rejects, or wants another status (above)"
import sys
bad, calls = [], 0
for line in open(sys.argv[1]):
    rc, want, args = line.rstrip("\n").split("\t", 2)
    calls += 1
    ok = {"": ("0", "3"), "2": ("2", "3"), "3": ("3",)}.get(want, ())  # 3: no GPU here; some bad input needs one to tell
    if rc not in ok:
        bad.append(f"xstage {args}: exit {rc}" + (f", the script wants {want}" if want else ""))
if calls < 40:
    bad.append(f"only {calls} xstage calls logged: the scripts no longer reach them")
print("\n".join(bad) or f"{calls} xstage calls, every input accepted or answered as the scripts want",
      file=sys.stderr if bad else sys.stdout)
sys.exit(1 if bad else 0)
PY
    ;;
  moe_storer)  # the shipped platform file's storer section is the committed storer bench's; the audit against the phases
    d=results/h200/moe/2026-12-01-storer-phases/after
    run tools/moe/storer_model.py costs $d/storer_bench.json.xz --tile-end storer
    "$py" - "$tmp/stdout" platforms/h200_nvlink4.json <<'PY' || fail "platforms/h200_nvlink4.json's storer section is not the bench's"
import json, sys
derived = json.load(open(sys.argv[1]))["storer"]
shipped = json.load(open(sys.argv[2]))["storer"]
sys.exit(0 if derived == shipped else 1)
PY
    xstage=${4:?moe_storer needs the xstage binary}
    run tools/moe/storer_model.py compare "$xstage" platforms/h200_nvlink4.json $d
    has "$tmp/stdout" "h4096-i256-e64-k8/t6144/balanced/fp8 | expert-wave | 1.69 | 2.53 / 2.54 | 2.78 | 3.55 / 3.55 | 0.78 / 0.78 |"
    # The H100 run's sections, alone and beside the HBM read, again from its bench; a bench without loaded variants
    # is refused when they are asked for.
    h=results/h100/moe/2026-12-06-storer-phases
    for bg in none hbm_read l2_read; do
      run tools/moe/storer_model.py costs $h/storer_bench.json.xz --tile-end storer --background $bg
      sfx=$([ $bg = none ] || echo _$bg)
      diff "$tmp/stdout" $h/storer_section$sfx.json > "$tmp/diff" || { cat "$tmp/diff" >&2; fail "$h/storer_section$sfx.json is not the bench's"; }
    done
    ! "$py" tools/moe/storer_model.py costs $d/storer_bench.json.xz --tile-end storer --background hbm_read > /dev/null 2>&1 ||
      fail "costs --background hbm_read took a bench without loaded variants"
    ! "$py" tools/moe/storer_model.py costs $h/storer_bench.json.xz > /dev/null 2>&1 ||
      fail "costs (tile end publish) took a bench without the publish tile end"
    # The publish tile ends on the bench that measured them: each section as committed beside it (T_fence the
    # 512-byte tile end, T_release 0).
    g=results/h100/moe/2026-12-06-gpu-scope-release/storer
    for te in publish publish_gpu; do for bg in none hbm_read l2_read; do
      run tools/moe/storer_model.py costs $g/storer_bench.json.xz --tile-end $te --background $bg
      "$py" - "$tmp/stdout" $g/sections.json "$te/$bg" <<'PY' || fail "the $te/$bg section is not the one in $g/sections.json"
import json, sys
s = json.load(open(sys.argv[1]))["storer"]
want = json.load(open(sys.argv[2]))[sys.argv[3]]
sys.exit(0 if s == want and s["T_release_ns"] == 0.0 and f"tile end {sys.argv[3].split('/')[0]}," in s["source"] else 1)
PY
    done; done
    ;;
  moe_power)  # the table the run printed, again from its archive
    d=$moe/run41-power-and-clock/trial-gaps
    run tools/moe/power_summary.py $d/moe_power.tar.xz
    missing=$(grep -v -x -F -f <(text $d/moe_power.log) "$tmp/stdout" || true)
    [ -z "$missing" ] || fail "lines not in the run's log: $missing" ;;
  attention)  # the in-turn table of README.md, again from the committed JSONs
    d=results/h200/attention/2026-12-01-in-turn/graphs
    run tools/attention/merge_bench.py $d/bench_xstage.json $d/bench_cudnn.json --markdown "$tmp/summary.md"
    same_report "$tmp/summary.md" $d/summary.md ;;
  ulysses)
    d=results/h200/attention/2026-12-01-ulysses-sweep
    run tools/attention/ulysses_report.py --bench $d/bench.json --torch $d/bench_torch.json --out "$tmp/ulysses"
    same_report "$tmp/ulysses/table.md" $d/table.md
    [ -s "$tmp/ulysses/fig11.png" ] || fail "no fig11.png"
    # a bench of one store path (--store-path tma; 2 virtual ranks): the other path's times are null in its JSON
    tar -xJf results/h100/attention/2026-12-07-main-state/call2.tar.xz -C "$tmp" ./v2_r1.json ./report_v2_r1/table.md
    run tools/attention/ulysses_report.py --bench "$tmp/v2_r1.json" --out "$tmp/v2"
    same_report "$tmp/v2/table.md" "$tmp/report_v2_r1/table.md"
    # fused_both's parts (benches since they were added): the first row given parts, the shares of T_FA in its line
    "$py" - "$tmp/v2_r1.json" "$tmp/parts.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
r = d["results"][0]
r.update(T_layer_fused_both_without_copy_out_us=r["T_FA_us"] * 1.02, layer_fused_both_without_copy_out_over_FA_median_of_trials=1.02,
         T_copy_out_us=r["T_FA_us"] * 0.0125, T_start_and_head_starts_us=r["T_FA_us"] * 0.015)
json.dump(d, open(sys.argv[2], "w"))
PY
    run tools/attention/ulysses_report.py --bench "$tmp/parts.json" --out "$tmp/parts"
    has "$tmp/parts/table.md" "fused_both taken apart"
    has "$tmp/parts/table.md" "| 1.0200 | .* | 1.25% | 1.50% |$"
    [ "$(grep -c '% |$' "$tmp/parts/table.md")" = 1 ] || fail "a parts line for a row the bench did not take apart" ;;
  moe_ab)  # the A/B against the code before, again from its archive
    ab=results/h200/moe/2026-12-01-vs-before
    run tools/moe/ab_compare.py "$ab/ab.tar.xz" --a 'grid_before_*.json' --b 'grid_build_*.json' --out "$tmp/grid.md"
    same_report "$tmp/grid.md" "$ab/grid.md"
    has "$tmp/grid.md" "| auto | 60 |" ;;
  sass_stats)  # the wgmma loop and what runs between its two waits, on a made-up listing (no cuobjdump needed)
    PYTHONPATH=tools/kernels "$py" -c '
import sass_stats as s
body = ["HGMMA.64x160x16.F32.BF16 R24, gdesc[UR20], RZ, !UPT, gsb0", "WARPGROUP.DEPBAR.LE gsb0, 0x1",
        "FMNMX R1, R2, R3, !PT", "MUFU.EX2 R4, R4", "WARPGROUP.DEPBAR.LE gsb0, 0x0", "F2FP.BF16.F32.PACK_AB R6, R5, R4"]
insns = [(0x10, "MOV R0, R1")] + [(0x20 + 0x10 * k, x) for k, x in enumerate(body)] + [(0x90, "@!P0 BRA 0x20")]
loop = s.wgmma_loop(insns)
assert loop == body + ["@!P0 BRA 0x20"], loop
assert s.between_waits(loop) == (2, 1), s.between_waits(loop)
assert s.between_waits(body[:3]) is None and s.between_waits(["MUFU.EX2 R4, R4"]) is None
assert s.wgmma_loop([(0x10, "MUFU.EX2 R4, R4"), (0x20, "BRA 0x10")]) is None
assert s.same_order(body, body) == 1.0
swapped = body[:2] + [body[3], body[2]] + body[4:]   # the same instructions, two of them in the other order
assert abs(s.same_order(body, swapped) - 10 / 12) < 1e-12, s.same_order(body, swapped)
assert s.same_order(body, ["NOP"]) == 0.0
assert s.loop_difference(body, swapped) == {}
assert s.loop_difference(body, body[:3] + ["MUFU.EX2 R4, R4"] + body[3:] + ["NOP"]) == {"MUFU.EX2": 1, "NOP": 1}
assert list(s.loop_difference(["NOP", "FMNMX R1, R2, R3, !PT"], ["MUFU.EX2 R4, R4"])) == ["FMNMX", "MUFU.EX2", "NOP"]
before = {"k0": insns, "other": [(0x10, "NOP")]}
changed = insns[:-1] + [(0x90, "@!P0 BRA 0x30")]      # one branch target differs
assert s.same_code(before, {"k5": list(insns), "k6": changed, "k7": []}) == {"k5": "k0", "k6": None, "k7": None}
' || fail "sass_stats on a made-up listing" ;;
  timing)  # the benches' balanced turn order: every unit follows every other equally often (the CLI's rows too)
    PYTHONPATH=tools "$py" -c '
from common.timing import turn_order, turn_period
for n in range(1, 10):
    period, first, follows = turn_period(n), [0] * n, [[0] * n for _ in range(n)]
    for t in range(period):
        order = turn_order(n, t)
        assert sorted(order) == list(range(n)), (n, t, order)
        first[order[0]] += 1
        for a, b in zip(order, order[1:]):
            follows[a][b] += 1
    times = period // n
    assert first == [times] * n, (n, first)
    assert all(follows[a][b] == (0 if a == b else times) for a in range(n) for b in range(n)), (n, follows)
# src/common/turn_order.hpp writes the same rows (tests/common/turn_order_test.cpp)
assert [turn_order(4, t) for t in range(4)] == [[0, 1, 3, 2], [1, 2, 0, 3], [2, 3, 1, 0], [3, 0, 2, 1]]
assert [turn_order(3, t) for t in range(6)] == [[0, 1, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0], [0, 2, 1], [1, 0, 2]]
for bad in ((0, 0), (3, -1)):
    try:
        turn_order(*bad)
    except ValueError:
        continue
    raise AssertionError(bad)
' || fail "turn_order is not balanced" ;;
  energy)  # the energy table of the committed run, again from its bench.json; NVML absent: a clear error, not a crash
    PYTHONPATH=$src/python:tools/attention:tools "$py" -c '
import json, sys, tarfile
from common import results
from common.energy import Nvml, NvmlUnavailable
import cudnn_bench
with tarfile.open("results/h200/attention/2026-12-02-chains4/b.tar.xz") as tar:
    points = json.load(tar.extractfile("b/bench.json"))["points"]
table = cudnn_bench.energy_table(points)
summary = results.read_text("results/h200/attention/2026-12-02-chains4/b/summary.md")
assert table in summary, table
assert len(table.splitlines()) == 4 + 9 * 4, table  # title, blank line, header, rule; nine shapes x four backends
try:
    assert Nvml().energy_mj() > 0
except NvmlUnavailable as e:
    assert "libnvidia-ml" in str(e) or "NVML" in str(e), e
' || fail "the energy table or the NVML error" ;;
  torch_vs_cli)  # it writes into the folder it reads: a copy
    cp -r results/h200/python/2026-12-01-host-time/after/torch-vs-cli "$tmp/tvc"
    run tools/python/torch_vs_cli.py "$tmp/tvc"
    same_report "$tmp/stdout" results/h200/python/2026-12-01-host-time/after/torch-vs-cli/torch_vs_cli.txt ;;
  *) echo "tools_test: unknown case '$case_name'" >&2; exit 2 ;;
esac
echo "tools_test $case_name: ok"

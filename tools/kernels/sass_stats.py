#!/usr/bin/env python3
"""What ptxas made of the kernels in binaries or object files, from `cuobjdump -sass` (on PATH, in the CUDA toolkit or
in the triton package): per kernel function, its local-memory spill instructions (STL, LDL) and, with --loops, its
steady-state wgmma loop: the instruction count and the opcodes of the first backward branch whose body issues HGMMA
(the attention kernel's key-block loop; the MoE consumers' k-block loop), and what runs between the loop's first
wait that leaves one wgmma batch in flight (`WARPGROUP.DEPBAR.LE gsb0, 0x1`: S = Q K^T done, P V running) and the
next wait for none (`0x0`): the instructions and exponentials (MUFU.EX2) that overlap the P V wgmma, and the loop's
R2UR (values moved into uniform registers each iteration, such as wgmma descriptors computed in per-thread ones);
and, for two functions (--diff), the opcodes by which their loops differ and how much of the two loops' opcode
sequences is in the same order (the share of matching opcodes, 1.0 for the same sequence; two loops of the same
instructions can differ there, which is how ptxas's schedules of the same source are told apart); and, against
another build (--same), which of the functions compile to exactly the instructions of one of that build's functions
(a refactor that must not change the code: template arguments renamed, a value moved to another place of the
source).

    python3 tools/kernels/sass_stats.py build/xstage --kernel megamoe_kernel
    python3 tools/kernels/sass_stats.py build/xstage --kernel flash_fwd_sm90_kernel --loops
    python3 tools/kernels/sass_stats.py build/xstage --diff 'ILi64ELi128.*EpilogueStoreTma' 'ILi64ELi128.*EpilogueAllToAllTma'
    python3 tools/kernels/sass_stats.py build/xstage --same before/xstage --kernel flash_fwd_sm90_kernel

Function names are printed mangled (they name the template arguments exactly); --kernel and --diff take regular
expressions on them.
"""
import argparse
import collections
import difflib
import importlib.util
import os
import re
import shutil
import subprocess
import sys

INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);")
BRANCH = re.compile(r"\bBRA\s+(?:`\(\.L_x_\d+\)\s*)?(0x[0-9a-f]+)")


def cuobjdump():
    """The cuobjdump to use: on PATH, else the CUDA toolkit's (CUDA_HOME, /usr/local/cuda), else the one the triton
    package bundles (the project's environment has it; some toolkit installs leave cuobjdump out)."""
    candidates = [shutil.which("cuobjdump"),
                  os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "cuobjdump")]
    spec = importlib.util.find_spec("triton")
    if spec is not None and spec.submodule_search_locations:
        candidates.append(os.path.join(list(spec.submodule_search_locations)[0], "backends", "nvidia", "bin", "cuobjdump"))
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return c
    sys.exit("error: no cuobjdump: not on PATH, in the CUDA toolkit or in the triton package (it comes with the CUDA toolkit)")


def functions(paths):
    """-> {mangled name: [(address, instruction text)]} of every function in the files' SASS."""
    tool = cuobjdump()
    funcs = {}
    for path in paths:
        out = subprocess.run([tool, "-sass", path], capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"error: cuobjdump -sass {path}: {out.stderr.strip()}")
        for part in re.split(r"\n\s*Function : ", out.stdout)[1:]:
            name = part.split("\n", 1)[0].strip()
            funcs[name] = [(int(a, 16), i.strip()) for a, i in INSN.findall(part)]
    return funcs


def opcode(insn):
    words = insn.split()
    return words[1] if words[0].startswith("@") else words[0]


def spills(insns):
    return sum(1 for _, i in insns if opcode(i).startswith(("STL", "LDL")))


def wgmma_loop(insns):
    """The body of the first backward branch whose body issues HGMMA (None: no such loop)."""
    at = {a: k for k, (a, _) in enumerate(insns)}
    for k, (a, i) in enumerate(insns):
        m = BRANCH.search(i)
        if m and int(m.group(1), 16) < a and int(m.group(1), 16) in at:
            body = [x for _, x in insns[at[int(m.group(1), 16)]:k + 1]]
            if any(opcode(x).startswith("HGMMA") for x in body):
                return body
    return None


def between_waits(loop):
    """(instructions, MUFU.EX2) between the loop's first `DEPBAR.LE gsb0, 0x1` and the next `0x0` (None: no such pair)."""
    ops = [opcode(x) for x in loop]
    for k, x in enumerate(loop):
        if ops[k] == "WARPGROUP.DEPBAR.LE" and x.rstrip().endswith("0x1"):
            for j in range(k + 1, len(loop)):
                if ops[j] == "WARPGROUP.DEPBAR.LE" and loop[j].rstrip().endswith("0x0"):
                    return j - k - 1, ops[k + 1:j].count("MUFU.EX2")
            return None
    return None


def same_order(a, b):
    """The share of the two opcode sequences that matches in order (difflib's ratio: 2 * matches / total length)."""
    return difflib.SequenceMatcher(None, [opcode(x) for x in a], [opcode(x) for x in b], autojunk=False).ratio()


def loop_difference(a, b):
    """-> {opcode: its count in loop b minus its count in loop a}, for the opcodes whose counts differ, sorted."""
    ca, cb = (collections.Counter(opcode(x) for x in loop) for loop in (a, b))
    return {op: cb[op] - ca[op] for op in sorted(set(ca) | set(cb)) if ca[op] != cb[op]}


def same_code(before, after):
    """-> {name in `after`: the name of a function in `before` with exactly its instructions, or None}. Branch targets
    are function-relative, so the same code at another address compares equal."""
    by_code = {}
    for name, insns in sorted(before.items()):
        by_code.setdefault(tuple(i for _, i in insns), name)
    return {name: by_code.get(tuple(i for _, i in insns)) for name, insns in after.items()}


def pick(funcs, pattern):
    names = [n for n in funcs if re.search(pattern, n)]
    if len(names) != 1:
        sys.exit(f"error: '{pattern}' matches {len(names)} functions (it must match one)")
    return names[0]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", help="executables, shared libraries or object files with sm_90a code")
    p.add_argument("--kernel", default=".", help="regular expression on the mangled function names (default: all)")
    p.add_argument("--loops", action="store_true",
                   help="also each function's wgmma loop: instructions, HGMMA, MUFU.EX2, both between its two waits, "
                        "and R2UR (values moved into uniform registers, e.g. wgmma descriptors ptxas could not keep there)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--diff", nargs=2, metavar=("A", "B"), help="the opcodes by which two functions' wgmma loops differ")
    mode.add_argument("--same", metavar="BEFORE",
                      help="another build: for each function, the one of BEFORE's with exactly its instructions ('-': none)")
    args = p.parse_args(argv)
    funcs = functions(args.files)
    if args.same:
        names = sorted(n for n in funcs if re.search(args.kernel, n))
        match = same_code(functions([args.same]), {n: funcs[n] for n in names})
        print("function  instructions  same_as_in_before")
        for name in names:
            print(f"{name}  {len(funcs[name])}  {match[name] or '-'}")
        print(f"{sum(1 for n in names if match[n])} of {len(names)} functions have the same instructions as one in {args.same}")
        return 0
    if args.diff:
        loops = []
        for pattern in args.diff:
            name = pick(funcs, pattern)
            loop = wgmma_loop(funcs[name])
            if loop is None:
                sys.exit(f"error: {name} has no wgmma loop")
            loops.append((name, loop))
        (a, la), (b, lb) = loops
        print(f"A {a}: {len(la)} instructions\nB {b}: {len(lb)} instructions\n"
              f"same order: {same_order(la, lb):.3f}\nopcode  A  B  B-A")
        ca = collections.Counter(opcode(x) for x in la)
        for op, change in loop_difference(la, lb).items():
            print(f"{op}  {ca[op]}  {ca[op] + change}  {change:+d}")
        return 0
    print("function  spill_instructions" + ("  loop_instructions  loop_HGMMA  loop_MUFU.EX2  between_waits_instructions"
                                            "  between_waits_MUFU.EX2  loop_R2UR" if args.loops else ""))
    for name in sorted(n for n in funcs if re.search(args.kernel, n)):
        line = f"{name}  {spills(funcs[name])}"
        if args.loops:
            loop = wgmma_loop(funcs[name])
            ops = collections.Counter(opcode(x) for x in loop or [])
            line += f"  {len(loop or [])}  {sum(v for o, v in ops.items() if o.startswith('HGMMA'))}  {ops['MUFU.EX2']}"
            between = between_waits(loop or [])
            line += f"  {between[0]}  {between[1]}" if between else "  -  -"
            line += f"  {ops['R2UR']}"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

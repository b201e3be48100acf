"""What the docs say about the repository is true of it.

    python3 tests/repo/docs_test.py CASE [SOURCE_DIR]

  links    every relative link in README.md, docs/*.md and the READMEs of tools/, results/ and examples/ resolves,
           and its #anchor names a heading of the target (GitHub's slugs);
  paths    every repository path those files name in backticks (`results/...`, `tools/...`, `scripts/...`, ...;
           from the root or from the file's folder) exists, compressed (`X.xz`) or not: a number the docs quote
           keeps its raw file;
  layers   docs/ARCHITECTURE.md's include order holds: each folder of src/ includes only folders of the groups to
           its left (no arrow back up, no cycle);
  results  results/README.md names every run folder under results/.
Exit status 0: holds; 1: what does not is listed; 2: bad usage.
"""

import os
import re
import subprocess
import sys

DOCS = ["README.md", "docs/*.md", "tools/README.md", "results/README.md", "examples/diffusers/README.md"]
ROOTS = ("results/", "tools/", "scripts/", "docs/", "configs/", "platforms/", "src/", "tests/", "examples/", "python/")


def doc_files(src):
    out = []
    for pattern in DOCS:
        folder, name = os.path.split(pattern)
        if "*" in name:
            out += sorted(os.path.join(folder, f) for f in os.listdir(os.path.join(src, folder)) if f.endswith(".md"))
        else:
            out.append(pattern)
    return out


def strip_code_blocks(text):
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def slug(heading):
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]{2,}|`", "", heading.strip().lower()).replace("**", "")
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def anchors(path):
    with open(path, encoding="utf-8") as f:
        text = strip_code_blocks(f.read())
    return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", text, flags=re.M)}


def check_links(src):
    bad = []
    for doc in doc_files(src):
        with open(os.path.join(src, doc), encoding="utf-8") as f:
            text = strip_code_blocks(f.read())
        for m in re.finditer(r"\]\(([^)\s]+)\)", text):
            target = m.group(1)
            if re.match(r"[a-z]+:", target):
                continue  # http:, https:, mailto:
            path, _, anchor = target.partition("#")
            full = os.path.normpath(os.path.join(src, os.path.dirname(doc), path)) if path else os.path.join(src, doc)
            if not os.path.exists(full):
                bad.append(f"{doc}: link to {target}: no such file")
            elif anchor and full.endswith(".md") and anchor not in anchors(full):
                bad.append(f"{doc}: link to {target}: no heading #{anchor} there")
    return bad


def check_paths(src):
    bad = []
    for doc in doc_files(src):
        with open(os.path.join(src, doc), encoding="utf-8") as f:
            text = f.read()
        for m in re.finditer(r"`([^`\s]+)`", text):
            token = m.group(1).rstrip(".,;:)")
            if not token.startswith(ROOTS) or re.search(r"[<>*{}$]|\.\.\.", token):
                continue
            candidates = [os.path.join(src, token), os.path.join(src, os.path.dirname(doc), token)]  # or beside the doc
            if not any(os.path.exists(p + suffix) for p in candidates for suffix in ("", ".xz")):
                bad.append(f"{doc}: `{token}` does not exist")
    return bad


# docs/ARCHITECTURE.md: `common` <- `model`, `comm` <- `calibration`, `attention`, `moe` <- `capi`, `cli`
def check_layers(src):
    with open(os.path.join(src, "docs/ARCHITECTURE.md"), encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^`common`.*?;", text, flags=re.M | re.S)
    if not m:
        return ["docs/ARCHITECTURE.md: no include order line (`common` <- ...;)"]
    groups = [re.findall(r"`([a-z_]+)`", g) for g in m.group(0).rstrip(";").split("←")]
    rank = {folder: i for i, group in enumerate(groups) for folder in group}
    bad = []
    folders = sorted(d for d in os.listdir(os.path.join(src, "src")) if os.path.isdir(os.path.join(src, "src", d)))
    for folder in folders:
        if folder not in rank:
            bad.append(f"src/{folder}/ is not in docs/ARCHITECTURE.md's include order")
            continue
        for root, _dirs, files in os.walk(os.path.join(src, "src", folder)):
            for name in files:
                path = os.path.join(root, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for n, line in enumerate(f, 1):
                        inc = re.match(r'\s*#\s*include\s+"([a-z_]+)/', line)
                        if inc and inc.group(1) != folder and inc.group(1) in rank and rank[inc.group(1)] >= rank[folder]:
                            bad.append(f"{os.path.relpath(path, src)}:{n}: src/{folder}/ includes {inc.group(1)}/, "
                                       "which is not to its left in docs/ARCHITECTURE.md's order")
    return bad


def check_results_index(src):
    with open(os.path.join(src, "results/README.md"), encoding="utf-8") as f:
        index = f.read()
    try:
        files = subprocess.run(["git", "-C", src, "ls-files", "results"], capture_output=True, text=True, check=True)
        tracked = files.stdout.split()
    except (OSError, subprocess.CalledProcessError):
        tracked = []
    if not tracked:  # not a git checkout: every file counts
        tracked = [os.path.relpath(os.path.join(r, f), src) for r, _, fs in os.walk(os.path.join(src, "results")) for f in fs]
    runs = sorted({"/".join(p.split("/")[1:4]) for p in tracked if len(p.split("/")) > 4})  # machine/subject/run
    return [f"results/README.md does not name the folder results/{run}/" for run in runs
            if f"`{run.split('/')[-1]}" not in index and f"`{run}" not in index]


CASES = {"links": check_links, "paths": check_paths, "layers": check_layers, "results": check_results_index}


def main():
    if len(sys.argv) not in (2, 3) or sys.argv[1] not in CASES:
        print(f"usage: docs_test.py {{{'|'.join(CASES)}}} [SOURCE_DIR]", file=sys.stderr)
        return 2
    src = sys.argv[2] if len(sys.argv) == 3 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    bad = CASES[sys.argv[1]](os.path.abspath(src))
    for line in bad:
        print(f"docs_test {sys.argv[1]}: {line}", file=sys.stderr)
    print(f"docs_test {sys.argv[1]}: {'FAIL' if bad else 'ok'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

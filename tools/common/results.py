"""The one way the tools read results: as `xstage` and scripts/gpu/*.sh write them, or as results/ keeps them.

results/ compresses large files (`X.xz`, results/README.md) and keeps each run's raw files in the archive its
script wrote (`moe.tar.xz`: ./bench.json, ./check.json, ...). So every path a tool takes may be:
  - a file, plain or compressed (`.xz`, `.gz`): read_bytes, read_text, load_json;
  - a run, either a folder or a tar archive (any compression): Run, whose members are named without "./";
  - a folder of per-item files (traces), plain or compressed: matching.
A name asked for without its compression suffix finds the compressed file too (`bench.json` -> `bench.json.xz`).
"""

from __future__ import annotations

import fnmatch
import gzip
import io
import json
import lzma
import os
import tarfile

COMPRESSED = (".xz", ".gz")


def _decompress(path: str, raw: bytes) -> bytes:
    if path.endswith(".xz"):
        return lzma.decompress(raw)
    if path.endswith(".gz"):
        return gzip.decompress(raw)
    return raw


def resolve(path: str) -> str:
    """path itself, else path.xz or path.gz where only the compressed file exists (FileNotFoundError: none)."""
    for candidate in (path,) + tuple(path + suffix for suffix in COMPRESSED):
        if os.path.exists(candidate):
            return candidate
    raise FileNotFoundError(f"{path}: no such file (nor {path}.xz, {path}.gz)")


def read_bytes(path: str) -> bytes:
    path = resolve(path)
    with open(path, "rb") as f:
        return _decompress(path, f.read())


def read_text(path: str) -> str:
    return read_bytes(path).decode("utf-8")


def load_json(path: str):
    return json.loads(read_bytes(path))


def is_archive(path: str) -> bool:
    return os.path.isfile(path) and tarfile.is_tarfile(path)


class Run:
    """One run's raw files, from its archive (`moe.tar.xz`, `moe.tar.gz`, ...) or its folder; a folder's members
    include those of the archives in it (results/<...>/run44-final/ holds moe.tar.xz: its bench.json is the run's)."""

    def __init__(self, path: str):
        self.path = path
        self._members = {}  # name (no "./", compression suffix kept) -> bytes, as stored
        if os.path.isdir(path):
            archives = []
            for root, _dirs, files in os.walk(path):
                for name in sorted(files):
                    full = os.path.join(root, name)
                    with open(full, "rb") as f:
                        self._members[os.path.relpath(full, path)] = f.read()
                    if is_archive(full):
                        archives.append(full)
            for archive in archives:  # the folder's own files win over an archive's of the same name
                for name, data in Run(archive)._members.items():
                    self._members.setdefault(name, data)
        elif is_archive(path):
            with tarfile.open(path) as tar:
                for m in tar.getmembers():
                    if m.isfile():
                        self._members[os.path.normpath(m.name)] = tar.extractfile(m).read()
        else:
            raise FileNotFoundError(f"{path}: neither a run folder nor a tar archive")

    def names(self) -> list:
        """Every member, with its compression suffix removed, sorted."""
        return sorted({self._plain(n) for n in self._members})

    @staticmethod
    def _plain(name: str) -> str:
        for suffix in COMPRESSED:
            if name.endswith(suffix) and not name.endswith(".tar" + suffix):
                return name[: -len(suffix)]
        return name

    def read(self, name: str):
        """The member's bytes (decompressed), or None when the run has no such member."""
        for stored in (name,) + tuple(name + suffix for suffix in COMPRESSED):
            if stored in self._members:
                return _decompress(stored, self._members[stored])
        return None

    def json(self, name: str):
        raw = self.read(name)
        return None if raw is None else json.loads(raw)

    def text(self, name: str):
        raw = self.read(name)
        return None if raw is None else raw.decode("utf-8")

    def matching(self, pattern: str) -> list:
        """Member names (compression suffix removed) matching a glob pattern, sorted."""
        return [n for n in self.names() if fnmatch.fnmatch(n, pattern)]


def is_run(path: str) -> bool:
    """A run folder or archive, as opposed to one file."""
    return os.path.isdir(path) or is_archive(path)


def matching(folder: str, pattern: str) -> list:
    """The files of a folder matching a glob pattern, plain or compressed (`*.json` finds `a.json.xz`), sorted."""
    out = []
    for name in sorted(os.listdir(folder)):
        plain = Run._plain(name)
        if fnmatch.fnmatch(plain, pattern):
            out.append(os.path.join(folder, name))
    return out


def save_png(fig, path: str, dpi: int) -> None:
    """A matplotlib figure as a PNG of at most 256 colours: plots have a few hundred colours at most (lines plus
    their anti-aliasing), and a palette PNG is a third the size of the RGBA one (results/ stays small)."""
    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    buf.seek(0)
    Image.open(buf).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)

"""A file carried in checksummed parts: :func:`split_file` cuts it into parts of at most a given size, each in its
own folder with a copy of the manifest (``parts.json``: the file's name, size and sha256, and each part's); and
:func:`join_parts` puts it back together from those folders, checking every part before it reads the next step's
input. A missing or damaged part stops the join with one line naming the part, the expected and the found
checksum.

Used to move what exceeds one transfer's limit between machines that share no network: the embedded target's
GGUF to a GPU machine (two parts, two runs), and the trained heads back (parts of at most 16 MiB).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from .atomic import atomic_write, write_json
from .errors import PeagleError

MANIFEST = "parts.json"
CHUNK = 1 << 20


def sha256_of(path, limit: int | None = None, offset: int = 0) -> str:
    """The sha256 of ``path`` (or of ``limit`` bytes from ``offset``), read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        fh.seek(offset)
        left = limit
        while left is None or left > 0:
            block = fh.read(CHUNK if left is None else min(CHUNK, left))
            if not block:
                break
            digest.update(block)
            if left is not None:
                left -= len(block)
    return digest.hexdigest()


def part_folders(root, count: int) -> list[Path]:
    """The folders ``root/1 .. root/count`` that hold the parts (one each: each travels on its own)."""
    return [Path(root) / str(i + 1) for i in range(count)]


def split_file(src, root, max_part_bytes: int, parts: int | None = None, kind: str = "file",
               folders: bool = True) -> dict:
    """Cut ``src`` into ``parts`` parts of equal size (default: as few as ``max_part_bytes`` allows), part ``i``
    written to ``root/i/<name>.part<i>`` beside a copy of the manifest (``folders``: each part travels on its own),
    else all parts and one manifest in ``root``; returns the manifest. ``kind`` says what the file is to whoever
    joins it (``gguf``, ``tar``)."""
    src, size = Path(src), Path(src).stat().st_size
    count = parts or max(1, -(-size // max_part_bytes))
    step = -(-size // count)
    if step > max_part_bytes:
        raise PeagleError(f"{src.name}: {count} parts of {step:,} bytes exceed the limit of {max_part_bytes:,} bytes "
                          f"per part. Fix: ask for {-(-size // max_part_bytes)} parts or more.")
    manifest = dict(file=src.name, kind=kind, bytes=size, sha256=sha256_of(src), parts=[])
    targets = part_folders(root, count) if folders else [Path(root)] * count
    for i, folder in enumerate(targets):
        folder.mkdir(parents=True, exist_ok=True)
        name = f"{src.name}.part{i + 1}"
        with open(src, "rb") as fh:
            fh.seek(i * step)
            atomic_write(folder / name, lambda tmp: _copy_bytes(fh, tmp, step))
        manifest["parts"].append(dict(name=name, folder=folder.name if folders else ".",
                                      bytes=(folder / name).stat().st_size, sha256=sha256_of(folder / name)))
    for folder in dict.fromkeys(targets):
        write_json(folder / MANIFEST, manifest, indent=1)
    return manifest


def _copy_bytes(src_fh, dest_path, count: int) -> None:
    with open(dest_path, "wb") as out:
        left = count
        while left > 0:
            block = src_fh.read(min(CHUNK, left))
            if not block:
                break
            out.write(block)
            left -= len(block)


def read_manifest(root) -> dict:
    """The manifest of the parts under ``root`` (the first ``root/*/parts.json`` found)."""
    found = sorted(Path(root).glob(MANIFEST)) + sorted(Path(root).glob(f"*/{MANIFEST}"))
    if not found:
        raise PeagleError(f"no {MANIFEST} under {root}: no carried parts arrived there. Fix: carry the part folders "
                          f"({root}/1, {root}/2, ...) written by the split.")
    try:
        return json.loads(found[0].read_text())
    except (OSError, ValueError) as exc:
        raise PeagleError(f"{found[0]} cannot be read ({exc}). Fix: split the file again and carry its parts.") from None


def check_parts(root, manifest: dict | None = None, require_all: bool = True) -> list[str]:
    """Every part of the manifest under ``root`` checked against its sha256, before anything reads them: one line
    naming the first missing (``require_all``) or damaged part, its expected and its found checksum. Returns the
    names of the parts present and intact."""
    manifest = manifest or read_manifest(root)
    ok = []
    for part in manifest["parts"]:
        path = Path(root) / part["folder"] / part["name"]
        if not path.is_file():
            if not require_all:
                continue
            raise PeagleError(f"carried part {part['name']} is missing from {root}/{part['folder']} (expected sha256 "
                              f"{part['sha256']}, found none). Fix: carry {root}/{part['folder']} in this run or the "
                              "one before it (a warm machine keeps it between runs).")
        found = sha256_of(path)
        if found != part["sha256"]:
            raise PeagleError(f"carried part {part['name']} is damaged (expected sha256 {part['sha256']}, found "
                              f"{found}). Fix: split {manifest['file']} again and carry that part again.")
        ok.append(part["name"])
    return ok


def join_parts(root, dest) -> Path:
    """The file of the parts under ``root``, written to ``dest`` (a folder) after every part passed its checksum;
    the joined file's own checksum is checked too. Returns its path."""
    manifest = read_manifest(root)
    check_parts(root, manifest)
    out = Path(dest) / manifest["file"]
    out.parent.mkdir(parents=True, exist_ok=True)

    def write(tmp):
        with open(tmp, "wb") as fh:
            for part in manifest["parts"]:
                with open(Path(root) / part["folder"] / part["name"], "rb") as src:
                    shutil.copyfileobj(src, fh, CHUNK)

    atomic_write(out, write)
    found = sha256_of(out)
    if found != manifest["sha256"]:
        out.unlink()
        raise PeagleError(f"{manifest['file']} joined from its parts has sha256 {found}, expected "
                          f"{manifest['sha256']}: the parts come from different splits. Fix: split again and carry "
                          "every part of the same split.")
    return out

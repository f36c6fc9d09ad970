"""Files of a backup: copies that keep sparse files sparse, checksums, and the manifest's file list (no Django)."""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from experts.ml.base_model import sha256_file

CHUNK = 1 << 20


def copy_sparse(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """Copy a file, writing only its data: Qdrant Edge's storage files are mostly holes (a 33 MB page file may
    hold 40 KB), and a plain copy would write every zero. Falls back to copying zero blocks as holes."""
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        size = os.fstat(fin.fileno()).st_size
        for start, end in _data_ranges(fin.fileno(), size):
            fin.seek(start)
            fout.seek(start)
            left = end - start
            while left > 0:
                block = fin.read(min(CHUNK, left))
                if not block:
                    break
                if block.count(0) == len(block):
                    fout.seek(len(block), os.SEEK_CUR)
                else:
                    fout.write(block)
                left -= len(block)
        fout.truncate(size)
    shutil.copystat(src, dst)


def _data_ranges(fd: int, size: int) -> list[tuple[int, int]]:
    """The (start, end) byte ranges of ``fd`` that hold data, by SEEK_DATA/SEEK_HOLE; the whole file where unsupported."""
    if not hasattr(os, "SEEK_DATA"):
        return [(0, size)]
    ranges, offset = [], 0
    try:
        while offset < size:
            start = os.lseek(fd, offset, os.SEEK_DATA)
            end = os.lseek(fd, start, os.SEEK_HOLE)
            ranges.append((start, end))
            offset = end
    except OSError as exc:
        if exc.errno != errno.ENXIO:  # the file system does not say where the holes are: read it all
            return [(0, size)]
        # ENXIO: no data after offset
    return ranges


def copy_tree(src: Path, dst: Path, skip: Callable[[Path], bool] = lambda p: False) -> None:
    """Copy the folder ``src`` to ``dst`` (created) with ``copy_sparse``; paths for which ``skip`` is true are left out."""
    dst.mkdir(parents=True, exist_ok=True)
    for child in sorted(src.iterdir()):
        if skip(child):
            continue
        if child.is_dir() and not child.is_symlink():
            copy_tree(child, dst / child.name, skip)
        elif child.is_file():
            copy_sparse(child, dst / child.name)


def file_list(root: Path) -> list[dict[str, Any]]:
    """Every file under ``root`` as {path (relative, '/'-separated), bytes, sha256}, sorted by path."""
    return [{"path": p.relative_to(root).as_posix(), "bytes": p.stat().st_size, "sha256": sha256_file(p)}
            for p in sorted(root.rglob("*")) if p.is_file()]


def folder_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def verify(root: Path, files: list[dict[str, Any]]) -> str | None:
    """The first difference between the files under ``root`` and the manifest's list ``files``, or None when they match."""
    listed = {f["path"] for f in files} | {"manifest.json"}
    for entry in files:
        path = root / entry["path"]
        if not path.is_file():
            return f"{entry['path']} is missing"
        if path.stat().st_size != entry["bytes"]:
            return f"{entry['path']} has {path.stat().st_size} bytes, the manifest says {entry['bytes']}"
        if sha256_file(path) != entry["sha256"]:
            return f"{entry['path']}'s checksum does not match the manifest"
    extra = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and p.relative_to(root).as_posix() not in listed)
    return f"{extra[0]} is not in the manifest" if extra else None

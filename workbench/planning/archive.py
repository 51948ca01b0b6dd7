"""Plan files: named byte members packed in one zip archive, versioned and checked.

This module knows nothing of what the members mean (``memory_plan`` fills and reads
them); it only packs, versions and checks:

1. Every archive holds ``format.json``: the format name, its version and the torch
   version that wrote it. Another format or version is refused, never guessed at.
2. Writing is atomic (``atomic_files``): members go to a temporary file next to the
   target, which replaces the target only when complete; on any failure the temporary
   file is removed, so the target is either the complete new archive or untouched, and
   nothing is left behind.
3. Reading checks that the path is a regular file (``file_reading``: a named pipe or a
   device is refused, never waited on) holding a zip archive, that ``format.json``
   matches, and that every requested member is present; any problem is a
   ``PlanFileError`` naming it.
4. A member is inflated at most to ``MEMBER_INFLATION`` times the file's size (and never
   less than ``MIN_MEMBER_CAP`` bytes), checked while inflating (a member's declared size
   is not trusted), so a small file cannot expand to a large allocation.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Iterable, Mapping, Union

import torch

from ..atomic_files import FileWriteError, atomic_path
from ..errors import WorkbenchError
from ..file_reading import open_zip, parse_json, read_regular_file, read_zip_member

__all__ = ["FORMAT", "FORMAT_MEMBER", "PlanFileError", "PlanWriteError", "VERSION", "read_archive", "write_archive"]

FORMAT = "workbench-plan"
#: Version 2: devices, copy kinds and copy roles are saved by each type's own JSON form.
#: Version 3: ``plan.json`` records the SHA-256 of both saved programs.
VERSION = 3
FORMAT_MEMBER = "format.json"
#: Rule 4: saved programs hold weights, which deflate little; a member inflating to more
#: than this many times the whole file is a decompression bomb, not a plan.
MEMBER_INFLATION = 64
MIN_MEMBER_CAP = 64 << 20


class PlanFileError(WorkbenchError, ValueError):
    """A plan file that cannot be read: missing, corrupt, of another format or version."""


class PlanWriteError(FileWriteError):
    """A plan file that cannot be written where asked (the target is left untouched)."""


def write_archive(path: Union[str, Path], members: Mapping[str, bytes]) -> None:
    """Write ``members`` and the format header to ``path`` (rules 1, 2)."""
    header = {"format": FORMAT, "version": VERSION, "torch": torch.__version__}
    try:
        with atomic_path(path, "a plan") as tmp:
            with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
                archive.writestr(FORMAT_MEMBER, json.dumps(header))
                for name, data in members.items():
                    archive.writestr(name, data)
    except FileWriteError as exc:
        raise PlanWriteError(str(exc)) from None


def read_archive(path: Union[str, Path], names: Iterable[str]) -> dict[str, bytes]:
    """The members ``names`` of the plan archive at ``path`` (rules 1, 3)."""
    source = Path(path)
    data = read_regular_file(source, "plan file", PlanFileError)
    problem = f"{source} is not a workbench plan file (not a zip archive; corrupt or another format)"
    archive = open_zip(data, problem, PlanFileError)
    cap = max(MIN_MEMBER_CAP, MEMBER_INFLATION * len(data))
    with archive:
        header = _header(archive, source)
        if header.get("format") != FORMAT:
            raise PlanFileError(f"{source} has format {header.get('format')!r}, expected {FORMAT!r}")
        if header.get("version") != VERSION:
            raise PlanFileError(
                f"{source} is plan format version {header.get('version')!r}; this workbench reads version "
                f"{VERSION} (written by torch {header.get('torch')}); re-create the plan with this version"
            )
        return {name: _member(archive, name, source, cap) for name in names}


def _member(archive: zipfile.ZipFile, name: str, path: Path, cap: int = MIN_MEMBER_CAP) -> bytes:
    """Rule 4."""
    try:
        return read_zip_member(archive, name, cap, str(path), PlanFileError)
    except KeyError:
        raise PlanFileError(f"{path} is not a complete workbench plan: it has no {name!r}") from None


def _header(archive: zipfile.ZipFile, path: Path) -> dict:
    header = parse_json(_member(archive, FORMAT_MEMBER, path), f"{path} is corrupt: {FORMAT_MEMBER}", PlanFileError)
    if not isinstance(header, dict):
        raise PlanFileError(f"{path} is corrupt: {FORMAT_MEMBER} must be a JSON object, got {type(header).__name__}")
    return header

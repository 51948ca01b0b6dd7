"""Reading a file the user named as data: only a regular file, never blocking, bounded.

Rules:
1. The path is opened without blocking (``O_NONBLOCK``) and checked on the open
   descriptor (``fstat``), so a named pipe, a device, a socket or a directory is refused
   before anything is read, and a file swapped after a check cannot slip through.
2. A file larger than ``max_bytes`` is refused before it is read.
3. A zip member is inflated in chunks and refused once it passes a cap (its declared
   size is not trusted); a damaged member (bad CRC, broken deflate stream, unknown
   compression) is the caller's error, not a raw ``zlib.error``.
4. JSON text is parsed with every failure turned into the caller's error: bad syntax,
   text that is not UTF-8, and nesting deep enough to exhaust the parser's recursion.
5. Every failure is raised as the caller's error class (a ``WorkbenchError``), naming the
   path and what is accepted.
6. A CSV table is read as text cells (empty cells as ""), never as code, and its
   columns must be exactly the ones expected, in order.
7. A table parsed once is kept (``cached_by_file``) under its file's identity: the
   resolved absolute path, the modification time in nanoseconds, the size, the inode and
   the status-change time in nanoseconds. The last is the kernel's own: every write,
   rename or ``utime`` sets it to now, and no user call can set it back, so a file
   replaced by another of the same size and modification time (``cp -p``, a restore, an
   editor that keeps the time) is another key too. An edited, replaced or truncated
   file is read and checked again (an edit that breaks it is refused); a relative path is
   resolved in the folder it is read from; a failed read is never kept. A file modified
   in the last ``_SETTLE_NS``, or whose status changed in the last ``_CHANGE_TICK_NS``,
   is parsed but not kept: file times are as coarse as the kernel's clock tick, so a
   same-size edit that quick could keep the old identity.
"""

from __future__ import annotations

import functools
import json
import math
import os
import io
import stat
import struct
import threading
import time
import zipfile
import zlib
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar, Union

import pandas as pd

__all__ = [
    "FileIdentity",
    "cached_by_file",
    "file_identity",
    "finite_number",
    "open_zip",
    "parse_json",
    "read_csv_table",
    "read_regular_file",
    "read_zip_member",
    "settled",
]

#: A shipped or user-given data table is a few megabytes at most.
_MAX_TABLE_BYTES = 16 << 20
#: Tables each ``cached_by_file`` parser keeps (the least recently used goes first).
_CACHED_TABLES = 8
#: Rule 7: how long ago a file must have been modified for its parse to be kept.
_SETTLE_NS = 2_000_000_000
#: A status change this recent may share its time with the next (a few clock ticks).
_CHANGE_TICK_NS = 50_000_000
_T = TypeVar("_T")
#: Rule 7: (resolved path, mtime in ns, size, inode).
FileIdentity = tuple[str, int, int, int, int]

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_regular_file(
    path: Union[str, os.PathLike],
    what: str,
    error: type[Exception],
    max_bytes: Optional[int] = None,
) -> bytes:
    """The bytes of the regular file at ``path`` (rules 1, 2, 5); ``what`` names the
    expected content in errors (``"plan file"``)."""
    source = Path(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(source, flags)
    except FileNotFoundError:
        raise error(f"no {what} at {source}: file not found (no such file)") from None
    except IsADirectoryError:
        raise error(f"{source} is a directory; give the path of a {what}") from None
    except OSError as exc:
        raise error(f"cannot open {source} ({exc.strerror or exc}); give the path of a {what}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{source} is {_kind(info.st_mode)}, not a regular file; give the path of a {what}")
        if max_bytes is not None and info.st_size > max_bytes:
            raise error(f"{source} is {info.st_size} bytes, more than the {max_bytes} accepted for a {what}")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as stream:
            fd = -1
            data = stream.read() if max_bytes is None else stream.read(max_bytes + 1)
    except OSError as exc:
        raise error(f"cannot read {source} ({exc.strerror or exc})") from None
    finally:
        if fd >= 0:
            os.close(fd)
    if max_bytes is not None and len(data) > max_bytes:  # grew while being read
        raise error(f"{source} is more than the {max_bytes} bytes accepted for a {what}")
    return data


def parse_json(data: Union[bytes, str], what: str, error: type[Exception]) -> Any:
    """The JSON value of ``data`` (rules 4, 5); ``what`` names the source in errors."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        return json.loads(text)
    except UnicodeDecodeError:
        raise error(f"{what} is not a text file (not UTF-8); it must hold JSON") from None
    except json.JSONDecodeError as exc:
        raise error(f"{what} is not valid JSON: {exc}") from None
    except RecursionError:
        raise error(f"{what} nests JSON too deeply to be read; it is not a file of this kind") from None


def open_zip(data: bytes, problem: str, error: type[Exception]) -> zipfile.ZipFile:
    """``data`` opened as a zip archive; any damage in its directory (bad magic, truncated,
    an unsupported version, undecodable names) raises ``error(problem)`` (rules 3, 5)."""
    try:
        return zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError, RuntimeError, struct.error):
        raise error(problem) from None


def read_zip_member(archive: zipfile.ZipFile, name: str, cap: int, what: str, error: type[Exception]) -> bytes:
    """Member ``name`` of ``archive``, inflated to at most ``cap`` bytes (rules 3, 5);
    a missing member raises ``KeyError`` for the caller to word."""
    try:
        with archive.open(name) as stream:
            chunks, total = [], 0
            while chunk := stream.read(1 << 20):
                total += len(chunk)
                if total > cap:
                    raise error(f"{what} is refused: member {name!r} inflates to more than {cap} bytes")
                chunks.append(chunk)
            return b"".join(chunks)
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error, NotImplementedError, RuntimeError, struct.error) as exc:
        # a damaged member: bad CRC, truncated, a broken deflate stream, an unknown method or encryption
        raise error(f"{what} is corrupt: member {name!r} cannot be read ({type(exc).__name__}: {exc})") from None


def read_csv_table(path: Union[str, os.PathLike], what: str, error: type[Exception], columns: tuple[str, ...]) -> pd.DataFrame:
    """The CSV table at ``path`` as a ``pandas.DataFrame`` of strings (rules 1, 2, 5, 6)."""
    data = read_regular_file(path, what, error, max_bytes=_MAX_TABLE_BYTES)
    try:
        table = pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False)
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise error(f"{path} is not a readable CSV table ({what}): {exc}") from None
    if tuple(table.columns) != columns:
        raise error(f"{path}: columns {list(table.columns)} differ from the {what}'s; valid columns, in order: "
                    f"{', '.join(columns)}")
    return table


def finite_number(value: Any) -> Optional[float]:
    """A table cell read as a finite float, or None (empty, text, NaN or infinite)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def file_identity(path: Union[str, os.PathLike]) -> Optional[FileIdentity]:
    """Rule 7: the identity of the regular file at ``path`` — its resolved absolute path,
    modification time (ns), size, inode and status-change time (ns) — or None when it is missing or not a regular
    file (``stat`` never opens it, so a named pipe cannot block it)."""
    try:
        resolved = Path(path).resolve()
        info = os.stat(resolved)
    except (OSError, RuntimeError, ValueError):
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    return (str(resolved), info.st_mtime_ns, info.st_size, info.st_ino, info.st_ctime_ns)


def file_version_key(path: Union[str, os.PathLike]) -> FileIdentity:
    """Rule 7: what a read of the file at ``path`` is cached under — its identity — or,
    for a path that cannot be identified (missing, not a regular file), its absolute name
    with no version, so the reader is asked and refuses it (an error is never cached)."""
    found = file_identity(path)
    return found if found is not None else (os.path.abspath(path), -1, -1, -1, -1)


def settled(identity: FileIdentity) -> bool:
    """Rule 7: whether a file of this identity was last modified and changed long enough
    ago that an edit would change its identity (a result read from it may be kept)."""
    now = time.time_ns()
    return identity[1] < now - _SETTLE_NS and identity[4] < now - _CHANGE_TICK_NS


def cached_by_file(parse: Callable[[Path], _T]) -> Callable[[Path], _T]:
    """``parse`` (a function of a table's path) with its results kept by the file's
    identity (rule 7): a call with a path whose file is unchanged returns the kept result;
    an edited file, or the same relative path read from another folder, is parsed again.

    What is kept is what ``parse`` returned (callers hand out copies of mutable tables).
    A file that cannot be identified (missing, a pipe, a directory) is passed to ``parse``
    uncached, so its error is the reader's own; an error is never kept; a file that
    changed while it was parsed, or was modified moments ago, is not kept either.
    """
    kept: OrderedDict[FileIdentity, _T] = OrderedDict()
    lock = threading.Lock()

    @functools.wraps(parse)
    def cached(path: Path) -> _T:
        before = file_identity(path)
        if before is not None:
            with lock:
                if before in kept:
                    kept.move_to_end(before)
                    return kept[before]
        value = parse(Path(path))
        if before is not None and settled(before) and file_identity(path) == before:
            with lock:
                kept[before] = value
                while len(kept) > _CACHED_TABLES:
                    kept.popitem(last=False)
        return value

    return cached

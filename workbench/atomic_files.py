"""Atomic file writes: a file is either written completely or left as it was.

Rules:
1. Content goes to a temporary file next to the target (same folder, so the final
   rename never crosses file systems), named ``.<target name>.<pid>-<random>.tmp<suffix>``
   — the target's suffix last, so writers that choose a format by suffix (matplotlib)
   see the right one.
2. Only a complete write replaces the target (``os.replace``, atomic on POSIX and
   Windows); on any failure — an exception of the writer, a full disk, an interrupt — the
   temporary file is removed and the target is untouched.
3. A target that is a directory, or whose folder does not exist, is refused before
   anything is written; a failing write is a ``FileWriteError`` naming the target.
4. A process killed mid-write (SIGKILL) cannot remove its temporary file; the next
   complete write of the same target removes the temporary files of writers whose
   process no longer exists on this machine (a live writer's file is left alone).
5. Writers that read a file, merge into it and write it back hold ``locked(path)`` around
   the three: an advisory lock (``flock``; ``msvcrt.locking`` on Windows) on a lock
   file beside the target, ``.<target name>.lock``, taken by one holder at a time across
   threads and processes, released when the block ends or the process dies. The lock
   file stays (removing it would let two holders lock two different files).
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import uuid
from pathlib import Path
from typing import Iterator, Union

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]
    import msvcrt

from .errors import WorkbenchError

__all__ = ["FileWriteError", "atomic_path", "check_writable_target", "locked", "write_text"]

#: Rule 5: a process's threads take a lock per lock file before the file lock (a lock of
#: the operating system is not meant to order the threads of one process).
_THREAD_LOCKS: dict[str, threading.Lock] = {}
_THREAD_LOCKS_GUARD = threading.Lock()


class FileWriteError(WorkbenchError, OSError):
    """A file that cannot be written where asked (the target is left untouched)."""


def check_writable_target(path: Union[str, Path], what: str = "a file") -> Path:
    """``path`` as a ``Path`` if ``what`` can be written there (rule 3)."""
    target = Path(path)
    if target.is_dir():
        raise FileWriteError(f"cannot write {what} to {target}: it is a directory; give a file path inside it")
    if not target.parent.is_dir():
        raise FileWriteError(f"cannot write {what} to {target}: the folder {target.parent} does not exist")
    return target


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists, owned by someone else
        return True
    return True


def _remove_orphans(target: Path) -> None:
    """Rule 4."""
    pattern = re.compile(rf"^\.{re.escape(target.name)}\.(\d+)-[0-9a-f]{{12}}\.tmp{re.escape(target.suffix)}$")
    with contextlib.suppress(OSError):
        for sibling in target.parent.iterdir():
            found = pattern.match(sibling.name)
            if found and not _alive(int(found.group(1))):
                with contextlib.suppress(OSError):
                    sibling.unlink()


@contextlib.contextmanager
def atomic_path(path: Union[str, Path], what: str = "a file") -> Iterator[Path]:
    """A temporary path to write ``path``'s new content to; on leaving the block without
    an error it replaces ``path`` (rules 1-3)."""
    target = check_writable_target(path, what)
    tmp = target.with_name(f".{target.name}.{os.getpid()}-{uuid.uuid4().hex[:12]}.tmp{target.suffix}")
    try:
        yield tmp
        if not tmp.exists():
            raise FileWriteError(f"cannot write {what} to {target}: the writer wrote nothing")
        os.replace(tmp, target)
        _remove_orphans(target)
    except FileWriteError:
        raise
    except OSError as exc:
        raise FileWriteError(f"cannot write {what} to {target}: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def write_text(path: Union[str, Path], text: str, what: str = "a file") -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; returns the path as a ``Path``."""
    with atomic_path(path, what) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def _lock_file(fd: int) -> None:
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX)
    else:
        msvcrt.locking(fd, msvcrt.LK_LOCK, 1)


@contextlib.contextmanager
def locked(path: Union[str, Path], what: str = "a file") -> Iterator[None]:
    """Rule 5: hold the advisory lock of ``path`` (a file that may not exist yet) for the block."""
    target = check_writable_target(path, what)
    lock_path = target.with_name(f".{target.name}.lock")
    with _THREAD_LOCKS_GUARD:
        thread_lock = _THREAD_LOCKS.setdefault(str(lock_path.resolve()), threading.Lock())
    with thread_lock:
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise FileWriteError(f"cannot lock {what} at {target}: {exc.strerror or exc} ({lock_path})") from None
        try:
            try:
                _lock_file(fd)
            except OSError as exc:
                raise FileWriteError(f"cannot lock {what} at {target}: {exc.strerror or exc} ({lock_path})") from None
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

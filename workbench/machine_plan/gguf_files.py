"""A GGUF file's metadata and tensor infos, read with the ``gguf`` package, nothing loaded.

``read_gguf(path)`` returns the file's metadata (key → value, long arrays summarised by
their length) and its tensors (name, shape, ggml type, bytes). A split GGUF
(``name-00001-of-00003.gguf``) is read whole: every shard's tensors, the first shard's
metadata, whichever shard is named.

Rules:

1. Only a regular file is read: it is opened without blocking and checked on the open
   descriptor, so a directory, a named pipe or a device is refused before a byte is read
   (``file_reading``'s rule 1).
2. The header is walked once with bounds (``_read_header``), with the ``gguf`` package's
   tables of value types, ggml types and their block sizes: the magic and a version the
   package reads (2 or 3); tensor and
   key counts no larger than the bytes that could hold them (and at most ``MAX_TENSORS``,
   ``MAX_KEYS``); every string and array inside the file; at most ``GGML_MAX_DIMS``
   dimensions, each >= 1, a tensor of at most ``MAX_ELEMENTS`` elements in a known ggml
   type whose rows fill whole blocks; every tensor's data inside the file. A file that
   breaks one is refused naming the offset and what was found, in time proportional to
   its header, with memory bounded by the file's mapping: a hostile count cannot make the
   reader loop or allocate. (The package's ``GGUFReader`` walks every array item in
   Python — about 4 s for a 152k-token vocabulary, three such arrays in a real model — so
   it is the tests' oracle for this walk, not the planner's reader.)
3. Every failure is a ``ModelFileError`` naming the file and what is accepted.
"""

from __future__ import annotations

import mmap
import os
import re
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import gguf

from .plan_errors import ModelFileError

__all__ = ["GGML_MAX_DIMS", "GgufFile", "GgufTensor", "MAX_ELEMENTS", "MAX_KEYS", "MAX_TENSORS", "read_gguf", "split_paths"]  # fmt: skip

#: ggml's largest tensor rank.
GGML_MAX_DIMS = 4
#: The most tensors and metadata keys a file may declare: a thousand times a 94-layer
#: MoE's ~1,100 tensors.
MAX_TENSORS = 1_000_000
MAX_KEYS = 100_000
#: The most elements one tensor may have (2^48: a thousand times the largest expert stack shipped).
MAX_ELEMENTS = 1 << 48
#: Arrays longer than this are kept as their length only (a vocabulary, its merges).
_KEPT_ARRAY = 64
_SPLIT_NAME = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class GgufTensor:
    """One tensor as the file declares it; its data is never read."""

    name: str  # llama.cpp's name, e.g. blk.3.ffn_up_exps.weight
    shape: tuple[int, ...]  # ggml order: ne0 (the row length) first
    type_name: str  # the ggml type, e.g. Q4_K
    nbytes: int  # bytes its data takes in the file and in a backend buffer


@dataclass(frozen=True)
class GgufFile:
    """A GGUF model's metadata and tensors (every shard of a split file)."""

    paths: tuple[str, ...]  # the shards read, in order
    metadata: dict[str, Any]  # key -> value; arrays longer than _KEPT_ARRAY as ("array", length)
    tensors: tuple[GgufTensor, ...]

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))


def split_paths(path: Union[str, os.PathLike[str]]) -> tuple[Path, ...]:
    """The shards of the model at ``path``: itself, or for ``x-0000N-of-0000M.gguf`` all M
    shards in order (whichever one is named). A missing shard is refused naming it."""
    path = Path(path)
    match = _SPLIT_NAME.match(path.name)
    if match is None:
        return (path,)
    count = int(match["count"])
    if not 1 <= int(match["no"]) <= count:
        raise ModelFileError(f"{path}: shard {int(match['no'])} of {count} is not a shard of a split GGUF")
    shards = tuple(path.with_name(f"{match['prefix']}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1))
    missing = [str(s) for s in shards if not s.exists()]
    if missing:
        raise ModelFileError(f"{path} is shard {int(match['no'])} of a {count}-shard GGUF and {', '.join(missing[:3])}"
                             f"{' …' if len(missing) > 3 else ''} is missing: put every shard in one folder")
    return shards


def read_gguf(path: Union[str, os.PathLike[str]]) -> GgufFile:
    """The metadata and tensor infos of the GGUF model at ``path`` (module rules); a split
    model is read from all its shards."""
    shards = split_paths(path)
    metadata: dict[str, Any] = {}
    tensors: list[GgufTensor] = []
    for i, shard in enumerate(shards):
        shard_metadata, shard_tensors = _read_one(shard)
        if i == 0:
            metadata = shard_metadata
        tensors += shard_tensors
    declared = metadata.get("split.count")
    if len(shards) > 1 and declared is not None and int(declared) != len(shards):
        raise ModelFileError(f"{shards[0]} declares split.count {declared} but its name says {len(shards)} shards")
    names = [t.name for t in tensors]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})[:3]
        raise ModelFileError(f"{path}: tensors {twice} are declared in more than one shard")
    return GgufFile(tuple(map(str, shards)), metadata, tuple(tensors))


def _read_one(path: Path) -> tuple[dict[str, Any], list[GgufTensor]]:
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise ModelFileError(f"no GGUF file at {path}: file not found") from None
    except IsADirectoryError:
        raise ModelFileError(f"{path} is a directory; give the path of a .gguf model file") from None
    except OSError as exc:
        raise ModelFileError(f"cannot open {path} ({exc.strerror or exc}); give the path of a .gguf model file") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file (a pipe, socket or device)"
        raise ModelFileError(f"{path} is {kind}; give the path of a .gguf model file")
    with os.fdopen(fd, "rb") as stream:
        if info.st_size < 24:
            raise ModelFileError(f"{path} is {info.st_size} bytes: too short for a GGUF header (24 bytes); not a GGUF "
                                 "model file")
        with mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ) as view:
            return _read_header(view, path)


class _Walk:
    """A bounded cursor over the mapped file (rule 2)."""

    def __init__(self, view: mmap.mmap, path: Path) -> None:
        self.view, self.path, self.at, self.size = view, path, 0, len(view)

    def fail(self, what: str) -> ModelFileError:
        return ModelFileError(f"{self.path}: {what} (at byte {self.at} of {self.size}); the file is not a whole GGUF "
                              "model (truncated, damaged, or not a GGUF)")

    def take(self, fmt: str) -> Any:
        n = struct.calcsize(fmt)
        if self.at + n > self.size:
            raise self.fail(f"the header ends early reading {n} bytes")
        value = struct.unpack_from(fmt, self.view, self.at)[0]
        self.at += n
        return value

    def skip(self, n: int, what: str) -> None:
        if n < 0 or self.at + n > self.size:
            raise self.fail(f"{what} of {n} bytes runs past the end of the file")
        self.at += n

    def string(self, what: str) -> bytes:
        n = self.take("<Q")
        start = self.at
        self.skip(n, what)
        return bytes(self.view[start:self.at]) if n <= 65536 else b""

    def value(self, kind: int, what: str) -> Any:
        """The value of GGUF type ``kind`` at the cursor; an array longer than _KEPT_ARRAY
        as ("array", length)."""
        if kind in _SCALARS:
            return self.take(_SCALARS[kind])
        if kind == _STRING:
            return self.string(what).decode("utf-8", "replace")
        if kind != _ARRAY:
            raise self.fail(f"{what} has value type {kind}, none of the GGUF value types")
        item = self.take("<I")
        count = self.take("<Q")
        if item in _SCALARS:
            size = struct.calcsize(_SCALARS[item])
            start = self.at
            self.skip(count * size, f"{what} (an array of {count})")
            if count > _KEPT_ARRAY:
                return ("array", count)
            return [struct.unpack_from(_SCALARS[item], self.view, start + i * size)[0] for i in range(count)]
        if item == _STRING:
            if count * 8 > self.size - self.at:
                raise self.fail(f"{what} declares {count} strings, more than the file could hold")
            texts = [self.string(what) for _ in range(count)]
            return ("array", count) if count > _KEPT_ARRAY else [t.decode("utf-8", "replace") for t in texts]
        raise self.fail(f"{what} is an array of value type {item}" + (" (arrays of arrays are not read)"
                        if item == _ARRAY else ", none of the GGUF scalar or string types"))


def _read_header(view: mmap.mmap, path: Path) -> tuple[dict[str, Any], list[GgufTensor]]:
    """Rule 2: the metadata and tensor infos, every count checked before it is trusted."""
    walk = _Walk(view, path)
    if walk.take("<I") != gguf.GGUF_MAGIC:
        raise ModelFileError(f"{path} does not start with the GGUF magic bytes: not a GGUF model file")
    version = walk.take("<I")
    if version not in (2, 3):
        raise ModelFileError(f"{path} is GGUF version {version}; the versions read are 2 and 3")
    tensors, keys = walk.take("<Q"), walk.take("<Q")
    room = walk.size - walk.at
    if keys > min(MAX_KEYS, room // 13):  # a key: its length (8), one byte of name, its type (4)
        raise walk.fail(f"it declares {keys} metadata keys, more than its {room} bytes or {MAX_KEYS} could hold")
    metadata: dict[str, Any] = {}
    for i in range(keys):
        key = walk.string(f"metadata key {i}").decode("utf-8", "replace")
        if key in metadata:
            raise walk.fail(f"metadata key {key[:60]!r} is given twice")
        metadata[key] = walk.value(walk.take("<I"), f"metadata value {key[:60]!r}")
    if tensors > min(MAX_TENSORS, (walk.size - walk.at) // 29):  # name length 8 + 1, rank 4, one dim 8, type 4, offset 8
        raise walk.fail(f"it declares {tensors} tensors, more than the rest of the file or {MAX_TENSORS} could hold")
    spans = []
    for i in range(tensors):
        name = walk.string(f"tensor {i}'s name").decode("utf-8", "replace")
        rank = walk.take("<I")
        if not 1 <= rank <= GGML_MAX_DIMS:
            raise walk.fail(f"tensor {name[:80]!r} has {rank} dimensions; ggml tensors have 1 to {GGML_MAX_DIMS}")
        dims = [walk.take("<Q") for _ in range(rank)]
        elements = 1
        for d in dims:
            if not 1 <= d <= MAX_ELEMENTS:
                raise walk.fail(f"tensor {name[:80]!r} has shape {dims}: each dimension is in [1, {MAX_ELEMENTS}]")
            elements *= d
        if elements > MAX_ELEMENTS:
            raise walk.fail(f"tensor {name[:80]!r} has {elements} elements, more than {MAX_ELEMENTS}")
        raw = walk.take("<I")
        try:
            kind = gguf.GGMLQuantizationType(raw)
            block, type_size = gguf.GGML_QUANT_SIZES[kind]
        except (ValueError, KeyError):
            raise walk.fail(f"tensor {name[:80]!r} has ggml type {raw}, not one the gguf package knows") from None
        if dims[0] % block:
            raise walk.fail(f"tensor {name[:80]!r} ({kind.name}) has rows of {dims[0]} elements, not whole blocks of {block}")
        spans.append((name, walk.take("<Q"), elements // block * type_size, tuple(dims), kind.name))
    alignment = metadata.get("general.alignment", 32)
    if not isinstance(alignment, int) or alignment < 1 or alignment & (alignment - 1) or alignment > 1 << 20:
        raise walk.fail(f"general.alignment is {alignment!r}; a power of two up to 2^20 is valid")
    data_start = -(-walk.at // alignment) * alignment
    names = set()
    for name, offset, nbytes, _, _ in spans:
        if data_start + offset + nbytes > walk.size:
            raise ModelFileError(f"{path}: tensor {name[:80]!r} ends at byte {data_start + offset + nbytes}, past the file's "
                                 f"{walk.size} bytes: the file is truncated (a shard missing its end?)")
        if name in names:
            raise ModelFileError(f"{path}: tensor {name[:80]!r} is declared twice")
        names.add(name)
    return metadata, [GgufTensor(name, dims, kind, nbytes) for name, _, nbytes, dims, kind in spans]

"""GPU kernels written with CuPy. Importable without a GPU; each GPU call checks first."""

from .copies import (
    DEFAULT_CHUNK_BYTES,
    MAX_CACHED_ROWS,
    CopyEngine,
    MappedHost,
    StagingChunk,
    gather_launch_config,
    gather_reuse_variant,
    gather_row_offsets,
    gather_variant,
    staging_schedule,
)

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "MAX_CACHED_ROWS",
    "CopyEngine",
    "MappedHost",
    "StagingChunk",
    "gather_launch_config",
    "gather_reuse_variant",
    "gather_row_offsets",
    "gather_variant",
    "staging_schedule",
]

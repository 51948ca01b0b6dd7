"""GPU kernels written with CuPy. Importable without a GPU; each GPU call checks first."""

from .copies import (
    DEFAULT_CHUNK_BYTES,
    DEFAULT_DMA_ROW_BYTES,
    GATHER_METHODS,
    MAX_CACHED_ROWS,
    CopyEngine,
    MappedHost,
    StagingChunk,
    dma_runs,
    gather_launch_config,
    gather_reuse_variant,
    gather_row_ids,
    gather_row_offsets,
    gather_variant,
    staging_schedule,
)

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "DEFAULT_DMA_ROW_BYTES",
    "GATHER_METHODS",
    "MAX_CACHED_ROWS",
    "CopyEngine",
    "MappedHost",
    "StagingChunk",
    "dma_runs",
    "gather_launch_config",
    "gather_reuse_variant",
    "gather_row_ids",
    "gather_row_offsets",
    "gather_variant",
    "staging_schedule",
]

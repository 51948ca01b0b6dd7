"""The CUDA C++ source of the gather kernels (``kernels.copies`` rules 5-7), compiled by
CuPy on first use."""

from __future__ import annotations

from .launches import INLINE_IDS

# The inline kernels' id count is INLINE_IDS, defined here so the two cannot differ.
GATHER_SOURCE = f"#define WB_INLINE_IDS {INLINE_IDS}\n" + r"""
__device__ __forceinline__ void wb_gather_rows_v16_body(
    const unsigned char* __restrict__ src, long long src_span, long long row_stride,
    long long id, unsigned char* __restrict__ dst, long long row_bytes)
{
    const long long row = blockIdx.y;
    const long long off = id * row_stride;
    uint4* d = reinterpret_cast<uint4*>(dst + row * row_bytes);
    const long long n = row_bytes >> 4;
    const long long step = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (id < 0 || off > src_span - row_bytes) {  // bad index: zeros, and no stray read
        for (; i < n; i += step) d[i] = make_uint4(0u, 0u, 0u, 0u);
        return;
    }
    const uint4* s = reinterpret_cast<const uint4*>(src + off);
    // Four independent loads before their stores keep more reads in flight.
    for (; i + 3 * step < n; i += 4 * step) {
        const uint4 a = s[i], b = s[i + step], c = s[i + 2 * step], e = s[i + 3 * step];
        d[i] = a; d[i + step] = b; d[i + 2 * step] = c; d[i + 3 * step] = e;
    }
    for (; i < n; i += step) d[i] = s[i];
}

__device__ __forceinline__ void wb_gather_rows_b1_body(
    const unsigned char* __restrict__ src, long long src_span, long long row_stride,
    long long id, unsigned char* __restrict__ dst, long long row_bytes)
{
    const long long row = blockIdx.y;
    const long long off = id * row_stride;
    unsigned char* d = dst + row * row_bytes;
    const long long step = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (id < 0 || off > src_span - row_bytes) {
        for (; i < row_bytes; i += step) d[i] = 0;
        return;
    }
    const unsigned char* s = src + off;
    for (; i < row_bytes; i += step) d[i] = s[i];
}

// One gather entry point in both variants: ``NAME_v16`` and ``NAME_b1`` take the source,
// then the parameters after ROW_ID (how block row blockIdx.y finds its id; they must
// include ``dst`` and ``row_bytes``), and run the matching row body.
#define WB_GATHER_ENTRY(NAME, BODY, ROW_ID, ...)                                            \
    extern "C" __global__ void NAME(                                                        \
        const unsigned char* __restrict__ src, long long src_span, long long row_stride,    \
        __VA_ARGS__)                                                                        \
    {                                                                                       \
        BODY(src, src_span, row_stride, ROW_ID, dst, row_bytes);                            \
    }
#define WB_GATHER_ENTRIES(NAME, ROW_ID, ...)                                                \
    WB_GATHER_ENTRY(NAME##_v16, wb_gather_rows_v16_body, ROW_ID, __VA_ARGS__)               \
    WB_GATHER_ENTRY(NAME##_b1, wb_gather_rows_b1_body, ROW_ID, __VA_ARGS__)

WB_GATHER_ENTRIES(wb_gather_rows, ids[blockIdx.y],
    const long long* __restrict__ ids, unsigned char* __restrict__ dst, long long row_bytes)

// Up to 8 row ids as plain scalar parameters (a router's top-k), the cheapest launch.
__device__ __forceinline__ long long wb_pick8(
    long long a0, long long a1, long long a2, long long a3,
    long long a4, long long a5, long long a6, long long a7, unsigned int k)
{
    switch (k) {
        case 0: return a0; case 1: return a1; case 2: return a2; case 3: return a3;
        case 4: return a4; case 5: return a5; case 6: return a6; default: return a7;
    }
}

WB_GATHER_ENTRIES(wb_gather_rows_k8, wb_pick8(a0, a1, a2, a3, a4, a5, a6, a7, blockIdx.y),
    long long a0, long long a1, long long a2, long long a3,
    long long a4, long long a5, long long a6, long long a7,
    unsigned char* __restrict__ dst, long long row_bytes)

// The same gathers with at most WB_INLINE_IDS row ids passed by value in the launch's
// parameters: no buffer to fill, no event to wait for (rule 5).
struct wb_inline_ids { long long v[WB_INLINE_IDS]; };

WB_GATHER_ENTRIES(wb_gather_rows_inline, ids.v[blockIdx.y],
    const wb_inline_ids ids, unsigned char* __restrict__ dst, long long row_bytes)
"""


# Rule 6. One block row per output row (grid.y); every thread of it scans the few cached
# ids (the same addresses for the whole warp, so the loads are broadcast from cache), then
# runs the gather's row body (rule 5) on the prefetched device buffer ``cached`` of
# ``n_cached`` rows (a hit: row ``slot``, always in bounds) or on the source over the link
# (a miss: a bad id is written as zeros). The v16 entry reads ``cached`` with 16-byte loads,
# so ``gather_reuse_variant`` picks it only when ``cached`` is 16-byte aligned too.
GATHER_REUSE_SOURCE = GATHER_SOURCE + r"""
__device__ __forceinline__ int wb_cached_slot(
    const long long* __restrict__ cached_index, int n_cached, long long id)
{
    for (int c = 0; c < n_cached; ++c) {
        if (cached_index[c] == id) return c;
    }
    return -1;
}

#define WB_GATHER_REUSE_ENTRY(NAME, BODY)                                                   \
    extern "C" __global__ void NAME(                                                        \
        const unsigned char* __restrict__ src, long long src_span, long long row_stride,    \
        const long long* __restrict__ index, const unsigned char* __restrict__ cached,      \
        const long long* __restrict__ cached_index, int n_cached,                           \
        unsigned char* __restrict__ dst, long long row_bytes, int* __restrict__ hit_flags)  \
    {                                                                                       \
        const long long row = blockIdx.y;                                                   \
        const long long id = index[row];                                                    \
        const int slot = wb_cached_slot(cached_index, n_cached, id);                        \
        const bool hit = slot >= 0;                                                         \
        if (blockIdx.x == 0 && threadIdx.x == 0) hit_flags[row] = hit ? 1 : 0;              \
        BODY(hit ? cached : src, hit ? (long long)n_cached * row_bytes : src_span,          \
             hit ? row_bytes : row_stride, hit ? (long long)slot : id, dst, row_bytes);     \
    }

WB_GATHER_REUSE_ENTRY(wb_gather_reuse_rows_v16, wb_gather_rows_v16_body)
WB_GATHER_REUSE_ENTRY(wb_gather_reuse_rows_b1, wb_gather_rows_b1_body)
"""


# Rule 7: the gather kernels' row bodies, with the id of a row past the count replaced by
# -1, which the bodies write as zeros without reading the source.
GATHER_COUNTED_SOURCE = GATHER_SOURCE + r"""
__device__ __forceinline__ long long wb_counted_id(
    const long long* __restrict__ ids, const long long* __restrict__ count, long long* __restrict__ moved)
{
    const long long rows = (long long)gridDim.y;
    const long long n = *count < 0 ? 0 : (*count > rows ? rows : *count);
    if (blockIdx.y == 0 && blockIdx.x == 0 && threadIdx.x == 0) *moved = n;
    return (long long)blockIdx.y < n ? ids[blockIdx.y] : -1;
}

WB_GATHER_ENTRIES(wb_gather_counted_rows, wb_counted_id(ids, count, moved),
    const long long* __restrict__ ids, const long long* __restrict__ count,
    unsigned char* __restrict__ dst, long long row_bytes, long long* __restrict__ moved)
"""

"""Skyline placement: fill the lowest part of the skyline with the buffer that fits it best.

After Sekiyama et al., "Profile-guided memory optimization for deep neural
networks" (2018), who adapt Burke et al.'s best-fit strip packing to memory
planning, where a buffer's position in time is fixed and only its offset is
free.

Rules:
    1. The skyline is the height of placed memory at each step, kept as maximal
       segments of equal height. Every buffer is placed *on* the skyline, so
       each placement is conflict-free by construction.
    2. Repeat: take the lowest segment (leftmost among equals), ``[a, b]`` at
       height ``h``. Among unplaced buffers whose lifetime lies inside
       ``[a, b]`` pick the best by ``rule`` (``"long"``: longest lifetime, then
       largest; ``"size"``: largest, then longest; ties to the lower index) and
       place it at ``h``. If none fits, raise the segment to its lower
       neighbour and merge (that space stays empty).
    3. Unplaced buffers are kept per start step, sorted by end, and steps that
       have none are skipped with a next-nonempty pointer (path-compressed), so
       a scan of ``[a, b]`` visits only starts that still hold buffers.
    4. Deterministic: every choice has a total tie-break.
    5. When the same segment is the lowest twice in a row (its pick spanned it
       and raised it whole, as caches and graph inputs do), its candidates go
       into a heap that answers the following picks instead of a rescan.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Sequence

from ..buffers import PlanningInputError
from .base import Problem


def _next_nonempty(parent: list[int], step: int) -> int:
    root = step
    while parent[root] != root:
        root = parent[root]
    while parent[step] != root:  # path compression
        parent[step], step = root, parent[step]
    return root


def priorities(problem: Problem, rule: str) -> list[tuple[int, int, int]]:
    """The pick priority of each buffer under a named rule (higher is picked first)."""
    sizes, starts, ends = problem.sizes, problem.starts, problem.ends
    if rule == "long":
        return [(ends[i] - starts[i], sizes[i], -i) for i in range(len(sizes))]
    if rule == "size":
        return [(sizes[i], ends[i] - starts[i], -i) for i in range(len(sizes))]
    raise PlanningInputError(f"unknown skyline rule {rule!r}; valid rules are 'long', 'size'")


def skyline(problem: Problem, rule: str | Sequence[tuple] = "long") -> list[int]:
    """Offsets from skyline placement (rule 2); ``rule`` names a pick rule or gives
    each buffer's priority directly (tuples of numbers, higher picked first)."""
    sizes, starts, ends = problem.sizes, problem.starts, problem.ends
    n_steps = problem.n_steps
    offsets = [0] * len(sizes)
    waiting: list[list[int]] = [[] for _ in range(n_steps)]
    for i, size in enumerate(sizes):
        if size:
            waiting[starts[i]].append(i)
    for group in waiting:
        group.sort(key=lambda i: (ends[i], i))
    group_ends = [[ends[i] for i in group] for group in waiting]
    # parent[s] == s when start s still holds buffers; n_steps is a sentinel.
    parent = [s if waiting[s] else s + 1 for s in range(n_steps)] + [n_steps]
    left = sum(len(g) for g in waiting)
    key = priorities(problem, rule) if isinstance(rule, str) else rule

    seg_end = {0: n_steps - 1}  # segment start -> its last step
    seg_height = {0: 0}
    seg_prev = {0: -1}  # segment start -> start of the segment to its left
    heap = [(0, 0, n_steps - 1)]

    def set_segment(a: int, b: int, h: int, prev: int) -> None:
        seg_end[a], seg_height[a], seg_prev[a] = b, h, prev
        if b + 1 < n_steps:
            seg_prev[b + 1] = a
        heapq.heappush(heap, (h, a, b))

    def merge_around(a: int) -> None:
        """Merge segment ``a`` with neighbours of the same height."""
        h = seg_height[a]
        right = seg_end[a] + 1
        if right < n_steps and seg_height[right] == h:
            b = seg_end.pop(right)
            del seg_height[right], seg_prev[right]
            set_segment(a, b, h, seg_prev[a])
        prev = seg_prev[a]
        if prev >= 0 and seg_height[prev] == h:
            b = seg_end.pop(a)
            del seg_height[a], seg_prev[a]
            set_segment(prev, b, h, seg_prev[prev])

    placed = [False] * len(sizes)
    # The candidates of the last long scan, best first (rule 5): a segment that
    # is not split by its pick (a buffer spanning it) is scanned only once.
    memo_segment: tuple[int, int] | None = None
    memo: list[tuple] = []
    last_scan: tuple[int, int] | None = None
    while left:
        h, a, b = heapq.heappop(heap)
        if seg_end.get(a) != b or seg_height[a] != h:
            continue  # stale entry
        pick = -1
        if memo_segment == (a, b):
            while memo and placed[memo[0][1]]:
                heapq.heappop(memo)
            if memo:
                pick = memo[0][1]
        else:
            repeat = last_scan == (a, b)  # scanned before and still the lowest: memoize
            last_scan = (a, b)
            found = []
            best_key = None
            s = _next_nonempty(parent, a)
            while s <= b:
                group = waiting[s]
                for pos in range(bisect_right(group_ends[s], b)):
                    k = key[group[pos]]
                    if repeat:
                        found.append((tuple(-x for x in k), group[pos]))  # min-heap: negate
                    elif best_key is None or k > best_key:
                        best_key, pick = k, group[pos]
                s = _next_nonempty(parent, s + 1)
            if repeat and found:
                memo_segment, memo = (a, b), found
                heapq.heapify(memo)
                pick = memo[0][1]
        if pick < 0:  # nothing fits: raise to the lower neighbour (rule 2)
            prev = seg_prev[a]
            heights = [seg_height[x] for x in (prev, b + 1) if 0 <= x < n_steps]
            assert heights, "a buffer always fits the whole timeline"
            seg_height[a] = min(heights)
            heapq.heappush(heap, (seg_height[a], a, b))
            merge_around(a)
            continue
        placed[pick] = True
        pick_pos = waiting[starts[pick]].index(pick)
        s, e = starts[pick], ends[pick]
        del waiting[s][pick_pos], group_ends[s][pick_pos]
        if not waiting[s]:
            parent[s] = s + 1
        left -= 1
        offsets[pick] = h
        prev = seg_prev[a]
        if s > a:
            set_segment(a, s - 1, h, prev)
            prev = a
        set_segment(s, e, h + sizes[pick], prev)
        if e < b:
            set_segment(e + 1, b, h, s)
        merge_around(s)
    return offsets

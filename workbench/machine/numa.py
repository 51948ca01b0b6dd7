"""Host memory bandwidth on a multi-socket machine, by how an engine places its weights.

A multi-socket host is S sockets, each with its own memory (one NUMA node per socket) and
a link to the others. Each socket's memory delivers ``B = dram_peak_bandwidth / S``; the
link carries ``L`` bytes/s into one socket from the others (``cross_socket_bandwidth``,
per direction: AMD's xGMI, Intel's UPI). How fast an engine's host threads, spread over
``u`` sockets, read the expert weights depends on where the weights are:

Rules:

1. ``local``: every weight in one node's memory (the pages the loading thread first
   touched: llama.cpp's mmap, a runtime that allocates once). The threads read at most
   that node's ``B``; threads on the other ``u - 1`` sockets read across the link, so
   ``T = min(B, L·u / (u - 1))`` for ``u > 1``, ``T = B`` for ``u = 1``.
2. ``per_node``: each socket's threads read weights in their own node's memory — a copy
   per node (KTransformers built with ``USE_NUMA=1``) or each node's share of the work
   (kt-kernel's one thread pool per node). Nothing crosses the link: ``T = u·B``.
3. ``interleave``: pages spread round-robin over all S nodes (``numactl
   --interleave=all``). Every node serves ``T / S`` (at most ``B``), and a thread reads a
   share ``(S - 1) / S`` across the link: ``T = min(S·B, L·u·S / (S - 1))``.
4. One socket: every policy reads ``B``; threads are capped at the host's sockets.
5. A multi-socket host without ``cross_socket_bandwidth`` cannot say what crosses its
   link: a policy whose time depends on it is refused, naming the figure to add.
"""

from __future__ import annotations

import math
from typing import Optional

from .op_cost import CostModelError

__all__ = ["NUMA_POLICIES", "numa_bandwidth"]

#: How an engine places its host weights over NUMA nodes (rules 1-3).
NUMA_POLICIES = ("local", "per_node", "interleave")


def numa_bandwidth(peak: float, sockets: float, used: float, policy: str, link: Optional[float]) -> float:
    """Bytes/s the host threads on ``used`` of the host's ``sockets`` read under ``policy``
    (rules 1-5); ``peak`` is every socket's DRAM together, ``link`` the bytes/s into one
    socket from the others (None: not stated)."""
    if policy not in NUMA_POLICIES:
        raise CostModelError(f"NUMA policy {policy!r} is none of {', '.join(NUMA_POLICIES)}")
    s = max(1.0, float(sockets))
    u = min(max(1.0, float(used)), s)
    per_socket = peak / s
    if s == 1:
        return per_socket
    if policy == "per_node":
        return u * per_socket
    if policy == "local" and u == 1:
        return per_socket
    if link is None or not math.isfinite(link):
        raise CostModelError(f"a {s:g}-socket host without cross_socket_bandwidth: the {policy!r} policy reads across "
                             "the socket link; state the host part's cross_socket_bandwidth (bytes/s into one socket)")
    if policy == "local":
        return min(per_socket, link * u / (u - 1))
    return min(s * per_socket, link * u * s / (s - 1))

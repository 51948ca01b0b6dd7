"""Scheduling: the order in which a propagated graph's nodes are issued.

Streams run their work in issue order, so the order decides what can overlap. The
captured order interleaves copies with the ops that need them right away; the
``overlap`` order issues every copy as soon as its inputs exist and lets independent
compute go first, so the copy engine works while the device computes.

Rules of ``overlap_schedule``:
1. The result is a topological order of the same nodes: placeholders first, output last;
   no node, name, device or copy changes — only positions.
2. A ready copy (h2d, d2h, d2d, gather) is issued before any ready compute.
3. Among ready compute nodes, those that read a copy's result wait while other ready
   compute exists; otherwise nodes keep their captured order.
4. Memory lifetimes follow the new order, so plan after scheduling.
"""

from __future__ import annotations

import dataclasses
import heapq

import torch.fx

from .graph_values import gc_paused
from .arguments import describe
from .errors import ArgumentTypeError, WorkbenchError
from .propagate import DeviceGraph

__all__ = ["SCHEDULES", "ScheduleError", "overlap_schedule", "schedule"]

SCHEDULES = ("captured", "overlap")


class ScheduleError(WorkbenchError, ValueError):
    """An unknown schedule name, or a graph that cannot be ordered."""


def schedule(dg: DeviceGraph, order: str = "captured") -> DeviceGraph:
    """``dg`` in the named order: ``captured`` (as exported) or ``overlap``."""
    if not isinstance(dg, DeviceGraph):
        raise ScheduleError(f"dg must be a DeviceGraph from workbench.propagate, got {describe(dg)}")
    if not isinstance(order, str):
        raise ArgumentTypeError(f"order must be one of {', '.join(SCHEDULES)}, got {describe(order)}")
    if order == "captured":
        return dg
    if order == "overlap":
        return overlap_schedule(dg)
    raise ScheduleError(f"unknown schedule order {order!r}; valid ones are {', '.join(SCHEDULES)}")


def overlap_schedule(dg: DeviceGraph) -> DeviceGraph:
    """``dg`` reordered so copies overlap independent compute (see module rules)."""
    if not isinstance(dg, DeviceGraph):
        raise ScheduleError(f"dg must be a DeviceGraph from workbench.propagate, got {describe(dg)}")
    with gc_paused():
        return _reorder(dg, _overlap_order(dg.graph, set(dg.copy_table)))


def _overlap_order(graph: torch.fx.Graph, copies: set[str]) -> list[torch.fx.Node]:
    nodes = list(graph.nodes)
    index = {n: i for i, n in enumerate(nodes)}
    waiting = {n: len(set(n.all_input_nodes)) for n in nodes}
    order: list[torch.fx.Node] = []
    ready: list[tuple[int, int, torch.fx.Node]] = []  # (priority, captured index, node); indices are unique

    def priority(node: torch.fx.Node) -> int:
        if node.op == "placeholder":
            return 0
        if node.op == "output":
            return 4
        if node.name in copies:
            return 1  # rule 2
        if any(a.name in copies for a in node.all_input_nodes):
            return 3  # rule 3
        return 2

    for n in nodes:
        if waiting[n] == 0:
            heapq.heappush(ready, (priority(n), index[n], n))
    while ready:
        *_, node = heapq.heappop(ready)
        order.append(node)
        for user in dict.fromkeys(node.users):
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, (priority(user), index[user], user))
    if len(order) != len(nodes):
        raise ScheduleError("the graph has a cycle, so it has no issue order")
    return order


def _reorder(dg: DeviceGraph, order: list[torch.fx.Node]) -> DeviceGraph:
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in order:
        env[node] = graph.node_copy(node, env.__getitem__)
    position = {node.name: i for i, node in enumerate(order)}
    copies = tuple(sorted(dg.copies, key=lambda c: position[c.name]))  # the table follows the graph
    return dataclasses.replace(dg, graph=graph, copies=copies)

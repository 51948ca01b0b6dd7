"""Exports: Chrome trace JSON (Perfetto), Graphviz DOT text, pandas DataFrames.

Rules:
1. ``to_chrome_trace`` writes the Trace Event Format: one complete event (``"ph": "X"``)
   per timeline event with ``ts`` and ``dur`` in microseconds, ``pid`` per device and
   ``tid`` per stream (both numbered from 1 in ``Timeline.streams()`` order, so the host
   comes first), ``cat`` = the event kind, ``args`` with bytes and GB/s; X events sorted
   by ``ts``; metadata events (``"ph": "M"``) name every process and thread and fix their
   sort order. Times are the timeline's own, so the trace and the views agree.
2. ``to_dot`` writes one DOT node per graph node (ids quoted, so any node name is safe),
   one cluster per delegate, copies drawn as red/orange/brown diamonds labelled with kind
   and bytes, and one edge per (input, user) pair.
3. The DataFrame helpers return the core's own tables where it has them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Union

import pandas as pd

from ..graph_values import node_nbytes
from ._inputs import as_graph_and_plan, as_plan, as_timeline
from ._spec import specs_dataframe
from ._style import CONSTANT_COLOUR, COPY_COLOURS, copy_label, device_colour

DISPLAY_TIME_UNIT = "ns"  # µs-scale events read better in ns than in Chrome's default ms


# --- Chrome trace (rule 1) ---------------------------------------------------------


def to_chrome_trace(run_or_timeline: Any, path: Union[str, Path, None] = None) -> dict:
    """The run's timeline as a Chrome trace dict; also written as JSON when ``path`` is given."""
    timeline = as_timeline(run_or_timeline, "to_chrome_trace")
    lanes = timeline.streams()
    devices = list(dict.fromkeys(d for d, _ in lanes))
    pid = {d: i + 1 for i, d in enumerate(devices)}
    tid: dict[tuple[str, str], int] = {}
    for d in devices:
        for j, lane in enumerate(lane for lane in lanes if lane[0] == d):
            tid[lane] = j + 1
    meta: list[dict] = []
    for d in devices:
        meta.append({"ph": "M", "name": "process_name", "pid": pid[d], "tid": 0, "args": {"name": str(d)}})
        meta.append({"ph": "M", "name": "process_sort_index", "pid": pid[d], "tid": 0, "args": {"sort_index": pid[d]}})
    for (d, s), t in tid.items():
        meta.append({"ph": "M", "name": "thread_name", "pid": pid[d], "tid": t, "args": {"name": s}})
        meta.append({"ph": "M", "name": "thread_sort_index", "pid": pid[d], "tid": t, "args": {"sort_index": t}})
    complete = []
    for e in timeline.events:  # a Timeline keeps its events sorted by start
        args: dict[str, Any] = {"bytes": e.nbytes, "GB/s": round(e.gb_per_s, 6), "node": e.node}
        if e.flops:
            args["flops"] = e.flops
        if e.id >= 0:
            args["event_id"] = e.id
        complete.append(
            {
                "ph": "X",
                "name": e.node,
                "cat": e.kind,
                "ts": float(e.start_us),
                "dur": float(e.duration_us),
                "pid": pid[e.device],
                "tid": tid[(e.device, e.stream)],
                "args": args,
            }
        )
    trace = {"traceEvents": meta + complete, "displayTimeUnit": DISPLAY_TIME_UNIT}
    if path is not None:
        path = Path(path)
        path.write_text(json.dumps(trace, indent=1))
    return trace


# --- DOT (rule 2) ------------------------------------------------------------------


def _escape(text: object) -> str:
    return str(text).replace("\\", "\\\\").replace('"', '\\"')


def _q(text: object) -> str:
    """A quoted DOT id or attribute value."""
    return f'"{_escape(text)}"'


def to_dot(dg_or_plan: Any, name: str = "workbench") -> str:
    """The propagated graph as Graphviz DOT text (rule 2)."""
    dg, _plan = as_graph_and_plan(dg_or_plan, "to_dot")
    delegate_of = dg.placement.node_delegate
    lines = [f"digraph {_q(name)} {{", "  rankdir=TB;", '  node [fontname="Helvetica", fontsize=10];']
    clusters: dict[str, list[str]] = {}
    loose: list[str] = []
    for node in dg.graph.nodes:
        stmt = f"{_q(node.name)} [{_dot_attrs(dg, node)}];"
        (clusters.setdefault(delegate_of[node.name], []) if node.name in delegate_of else loose).append(stmt)
    lines += [f"  {s}" for s in loose]
    devices = {d.name: str(d.device) for d in dg.placement.delegates}
    for cname, stmts in clusters.items():
        colour = device_colour(devices[cname])
        lines.append(f"  subgraph {_q('cluster_' + cname)} {{")
        lines.append(f"    label={_q(cname + ' (' + devices[cname] + ')')}; style=dashed; color={_q(colour)};")
        lines += [f"    {s}" for s in stmts]
        lines.append("  }")
    for node in dg.graph.nodes:
        for arg in node.all_input_nodes:
            lines.append(f"  {_q(arg.name)} -> {_q(node.name)};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _label(*lines: str) -> str:
    """A quoted DOT label of several lines (each escaped, joined by DOT's ``\\n``)."""
    return '"' + "\\n".join(map(_escape, lines)) + '"'


def _dot_attrs(dg: Any, node: Any) -> str:
    record = dg.copy_table.get(node.name)
    if record is not None:
        kind = str(record.kind)
        colour = COPY_COLOURS[kind]
        attrs = {"label": (copy_label(kind, node_nbytes(node)), node.name), "shape": "diamond", "style": "filled,bold", "fillcolor": colour, "color": colour}
    elif node.op == "placeholder":
        constant = node.name in dg.residency
        fill = CONSTANT_COLOUR if constant else device_colour(dg.node_device[node.name])
        attrs = {"label": (node.name,), "shape": "ellipse" if constant else "invhouse", "style": "filled", "fillcolor": fill}
    elif node.op == "output":
        attrs = {"label": ("output",), "shape": "house"}
    else:
        device = str(dg.node_device[node.name])
        attrs = {"label": (node.name, device), "shape": "box", "style": "filled", "fillcolor": device_colour(device)}
    return ", ".join(f"{k}={_label(*v)}" if k == "label" else f"{k}={_q(v)}" for k, v in attrs.items())


# --- DataFrames (rule 3) -----------------------------------------------------------


def specs_table(dg_or_plan: Any) -> pd.DataFrame:
    """One row per graph node: op, shape, dtype, device, delegate, lifetime, arena, offset, copy reason."""
    dg, plan = as_graph_and_plan(dg_or_plan, "specs_table")
    return specs_dataframe(dg, plan)


def plan_table(plan: Any) -> pd.DataFrame:
    """One row per planned storage (the plan's own table)."""
    return as_plan(plan, "plan_table").to_dataframe()


def copies_table(dg_or_plan: Any) -> pd.DataFrame:
    """One row per copy node (the DeviceGraph's own table)."""
    dg, _plan = as_graph_and_plan(dg_or_plan, "copies_table")
    return dg.copies_dataframe()


def timeline_table(run_or_timeline: Any) -> pd.DataFrame:
    """One row per event (the Timeline's own table), with its lane and GB/s."""
    timeline = as_timeline(run_or_timeline, "timeline_table")
    lane_of = {lane: i for i, lane in enumerate(timeline.streams())}
    table = timeline.to_dataframe()
    table.insert(0, "lane", [lane_of[(e.device, e.stream)] for e in timeline.events])
    table["gb_per_s"] = [e.gb_per_s for e in timeline.events]
    return table

"""Exports: Chrome trace JSON (Perfetto), Graphviz DOT text, pandas DataFrames.

Rules:
1. ``to_chrome_trace`` builds the Trace Event Format: one complete event (``"ph": "X"``)
   per timeline event with ``ts`` and ``dur`` in microseconds, ``pid`` per device and
   ``tid`` per stream (both numbered from 1 in ``Timeline.streams()`` order, so the host
   comes first), ``cat`` = the event kind, ``args`` with bytes and GB/s; X events sorted
   by ``ts``; metadata events (``"ph": "M"``) name every process and thread and fix their
   sort order. Times are the timeline's own, so the trace and the views agree. Each of
   the timeline's flows (a copy → what reads it, a prefetch → the layer it serves) is a
   flow start (``"ph": "s"``) in the middle of the copy's slice and a flow end (``"ph":
   "f"``, ``"bp": "e"``: bound to the enclosing slice) in the middle of the reader's, sharing one ``id``, ``name`` and
   ``cat`` (``flow:copy`` or ``flow:prefetch``), so Perfetto draws the arrow.
2. ``to_dot`` writes one DOT node per graph node (ids quoted, so any node name is safe),
   one cluster per delegate, copies drawn as red/orange/brown diamonds labelled with kind
   and bytes, and one edge per (input, user) pair.
3. Given a ``path``, an exporter writes the file atomically (a failed write leaves the
   old file whole) and returns the ``Path`` (a cell that ends with the call shows the
   path, not the whole trace); without one it returns the data, whose notebook repr is
   one line.
4. The DataFrame helpers return the core's own tables where it has them; ``full_text``
   shows a table with every cell in full (long copy reasons, error messages), wrapped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Union, overload

import pandas as pd

from ..atomic_files import write_text
from ._inputs import as_graph_and_plan, as_plan, as_timeline
from ._spec import specs_dataframe
from ._style import CONSTANT_COLOUR, COPY_COLOURS, copy_label, device_colour

DISPLAY_TIME_UNIT = "ns"  # µs-scale events read better in ns than in Chrome's default ms


# --- Chrome trace (rule 1) ---------------------------------------------------------


class ChromeTrace(dict):
    """A Chrome trace (a plain dict) whose notebook repr is one line, not every event."""

    def summary(self) -> str:
        events = self.get("traceEvents", [])
        complete = sum(1 for e in events if e.get("ph") == "X")
        lanes = sum(1 for e in events if e.get("name") == "thread_name")
        flows = sum(1 for e in events if e.get("ph") == "s")
        return f"Chrome trace: {complete} events on {lanes} lanes, {flows} flows (save with to_chrome_trace(run, path); open in Perfetto)"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.summary())


@overload
def to_chrome_trace(run_or_timeline: Any, path: None = None) -> ChromeTrace: ...


@overload
def to_chrome_trace(run_or_timeline: Any, path: Union[str, Path]) -> Path: ...


def to_chrome_trace(run_or_timeline: Any, path: Union[str, Path, None] = None) -> Union[ChromeTrace, Path]:
    """The run's timeline as a Chrome trace (rule 1); with ``path``, written as JSON and
    the path returned (rule 3)."""
    timeline = as_timeline(run_or_timeline, "to_chrome_trace")
    lanes = timeline.streams()
    devices = list(dict.fromkeys(d for d, _ in lanes))
    pid = {d: i + 1 for i, d in enumerate(devices)}
    tid: dict[tuple[Any, str], int] = {}
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
    flows: list[dict] = []
    for i, f in enumerate(timeline.flows):
        name = f"{f.src.node} → {f.dst.node}"
        src = {"name": name, "cat": f"flow:{f.kind}", "id": i + 1, "pid": pid[f.src.device], "tid": tid[(f.src.device, f.src.stream)]}
        # mid-slice times: each end binds to its own slice, not to a neighbour that touches it
        flows.append(dict(src, ph="s", ts=_mid(f.src)))
        flows.append(dict(src, ph="f", bp="e", ts=_mid(f.dst), pid=pid[f.dst.device], tid=tid[(f.dst.device, f.dst.stream)]))
    trace = ChromeTrace(traceEvents=meta + complete + flows, displayTimeUnit=DISPLAY_TIME_UNIT)
    if path is None:
        return trace
    return write_text(path, json.dumps(trace, indent=1), "a Chrome trace")


def _mid(event: Any) -> float:
    return float(event.start_us + event.duration_us / 2)


# --- DOT (rule 2) ------------------------------------------------------------------


def _escape(text: object) -> str:
    return str(text).replace("\\", "\\\\").replace('"', '\\"')


def _q(text: object) -> str:
    """A quoted DOT id or attribute value."""
    return f'"{_escape(text)}"'


@overload
def to_dot(dg_or_plan: Any, name: str = "workbench", path: None = None) -> str: ...


@overload
def to_dot(dg_or_plan: Any, name: str = "workbench", *, path: Union[str, Path]) -> Path: ...


def to_dot(dg_or_plan: Any, name: str = "workbench", path: Union[str, Path, None] = None) -> Union[str, Path]:
    """The propagated graph as Graphviz DOT text (rule 2); with ``path``, written there
    and the path returned (rule 3)."""
    dg, _plan = as_graph_and_plan(dg_or_plan, "to_dot")
    text = _dot(dg, name)
    if path is None:
        return text
    return write_text(path, text, "a DOT file")


def _dot(dg: Any, name: str) -> str:
    delegate_of = dg.placement.node_delegate
    lines = [f"digraph {_q(name)} {{", "  rankdir=TB;", '  node [fontname="Helvetica", fontsize=10];']
    clusters: dict[str, list[str]] = {}
    loose: list[str] = []
    records = dg.copy_table
    for node in dg.graph.nodes:
        stmt = f"{_q(node.name)} [{_dot_attrs(dg, node, records.get(node.name))}];"
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


def _dot_attrs(dg: Any, node: Any, record: Any) -> str:
    if record is not None:
        kind = str(record.kind)
        colour = COPY_COLOURS[kind]
        attrs = {"label": (copy_label(kind, record.nbytes), node.name), "shape": "diamond", "style": "filled,bold", "fillcolor": colour, "color": colour}
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


def full_text(table: pd.DataFrame) -> Any:
    """Rule 4: ``table`` styled to show every cell in full, long text wrapped (pandas
    otherwise cuts cells at ``display.max_colwidth``); display it in a notebook."""
    styled = table.style.set_properties(**{"white-space": "pre-wrap", "text-align": "left", "vertical-align": "top"})
    # a fixed id instead of a random one keeps a stored notebook's output the same run to run
    return styled.format(escape="html").set_uuid("wb-full-text")

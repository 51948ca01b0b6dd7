"""Exports: Chrome trace JSON (Perfetto's Trace Event Format), Graphviz DOT, DataFrames."""

from __future__ import annotations

import html as html_lib
import json

import pydot
import pytest

from workbench.views import (
    copies_table,
    full_text,
    link_throughput_figure,
    plan_table,
    specs_table,
    timeline_table,
    to_chrome_trace,
    to_dot,
)

from views_helpers import residual_fused, residual_plan, residual_run


def _trace():
    run = residual_run()[1]
    return run.timeline, to_chrome_trace(run)


def test_chrome_trace_has_one_complete_event_per_timeline_event():
    """Every timeline event becomes one "X" event with ts/dur in µs equal to its times,
    name = node, cat = kind, and bytes and GB/s in args."""
    tl, trace = _trace()
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == len(tl.events)
    for x, e in zip(xs, sorted(tl.events, key=lambda e: (e.start_us, e.end_us, e.id))):
        assert (x["name"], x["cat"]) == (e.node, e.kind)
        assert x["ts"] == pytest.approx(e.start_us) and x["dur"] == pytest.approx(e.end_us - e.start_us)
        assert x["args"]["bytes"] == e.nbytes
        assert x["args"]["GB/s"] == pytest.approx(e.gb_per_s, abs=1e-6)


def test_chrome_trace_validates_against_the_format():
    """Required fields and types, non-negative durations, X events sorted by ts, one pid
    per device and one tid per stream, every pid/tid named by metadata, sort indices."""
    tl, trace = _trace()
    assert trace["displayTimeUnit"] in ("ms", "ns")
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    ms = [e for e in trace["traceEvents"] if e["ph"] == "M"]
    flows = [e for e in trace["traceEvents"] if e["ph"] in ("s", "f")]
    assert len(xs) + len(ms) + len(flows) == len(trace["traceEvents"])
    for x in xs:
        assert {"name", "cat", "ph", "ts", "dur", "pid", "tid", "args"} <= set(x)
        assert isinstance(x["ts"], float) and isinstance(x["dur"], float) and x["dur"] >= 0
        assert isinstance(x["pid"], int) and isinstance(x["tid"], int)
    assert [x["ts"] for x in xs] == sorted(x["ts"] for x in xs)
    process = {m["pid"]: m["args"]["name"] for m in ms if m["name"] == "process_name"}
    thread = {(m["pid"], m["tid"]): m["args"]["name"] for m in ms if m["name"] == "thread_name"}
    assert sorted(process.values()) == sorted({d for d, _ in tl.streams()})
    assert len(set(process)) == len(process)
    lanes = {(process[x["pid"]], thread[(x["pid"], x["tid"])]) for x in xs}
    assert lanes == set(tl.streams())
    assert {m["pid"] for m in ms if m["name"] == "process_sort_index"} == set(process)
    assert {(m["pid"], m["tid"]) for m in ms if m["name"] == "thread_sort_index"} == set(thread)
    assert process[1] == "cpu"


def test_chrome_trace_is_written_as_json_and_the_path_returned(tmp_path):
    """With a path the trace is written as JSON and the path comes back (a notebook cell
    ending with the call shows the path); without one the trace's repr is one line."""
    tl, trace = _trace()
    path = tmp_path / "trace.json"
    assert to_chrome_trace(tl, path) == path
    assert json.loads(path.read_text()) == trace
    from IPython.lib.pretty import pretty

    shown = pretty(trace)
    assert "\n" not in shown and f"{len(tl.events)} events" in shown and len(shown) < 200


def _dot_nodes(graph) -> list[str]:
    names = [n.get_name() for n in graph.get_nodes() if n.get_name() not in ("node", "edge", "graph")]
    for sub in graph.get_subgraphs():
        names += _dot_nodes(sub)
    return names


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # pydot's parser uses old pyparsing names
def test_dot_parses_with_one_node_per_graph_node_and_every_edge():
    """pydot reads the DOT text; it declares each graph node once (quoted), puts each
    delegate's members in its cluster, styles copies as diamonds, and has every edge."""
    _, _, dg = residual_fused()
    (graph,) = pydot.graph_from_dot_data(to_dot(dg))
    names = [n.strip('"') for n in _dot_nodes(graph)]
    assert sorted(names) == sorted(n.name for n in dg.graph.nodes)
    clusters = {s.get_name().strip('"'): s for s in graph.get_subgraphs()}
    assert set(clusters) == {f"cluster_{d.name}" for d in dg.placement.delegates}
    for d in dg.placement.delegates:
        assert sorted(n.strip('"') for n in _dot_nodes(clusters[f"cluster_{d.name}"])) == sorted(d.nodes)
    copy_names = {c.name for c in dg.copies}
    for node in graph.get_nodes():
        if node.get_name().strip('"') in copy_names:
            assert node.get_shape().strip('"') == "diamond"
    edges = {(e.get_source().strip('"'), e.get_destination().strip('"')) for e in graph.get_edges()}
    assert edges == {(a.name, n.name) for n in dg.graph.nodes for a in n.all_input_nodes}


def test_dataframe_helpers_match_the_core_tables():
    plan = residual_plan()
    dg = plan.device_graph
    specs = specs_table(plan)
    assert list(specs["name"]) == [n.name for n in dg.graph.nodes]
    planned = specs.dropna(subset=["offset"])
    assert {r.name: int(r.offset) for r in planned.itertuples()} == {
        v: plan.allocations[o].offset for v, o in plan.storage_of.items()
    }
    assert plan_table(plan).equals(plan.to_dataframe())
    assert copies_table(dg).equals(dg.copies_dataframe())
    tl = residual_run()[1].timeline
    table = timeline_table(tl)
    assert len(table) == len(tl.events) and {"lane", "gb_per_s"} <= set(table.columns)


def test_dot_is_written_and_its_path_returned(tmp_path):
    """``to_dot(…, path=…)`` writes the same text it returns without a path."""
    _, _, dg = residual_fused()
    path = to_dot(dg, path=tmp_path / "g.dot")
    assert path == tmp_path / "g.dot" and path.read_text() == to_dot(dg)


def test_full_text_shows_every_reason_whole():
    """``full_text`` renders every cell in full (pandas would cut a long reason at
    display.max_colwidth) and escapes it."""
    _, _, dg = residual_fused()
    table = copies_table(dg)
    html = full_text(table).to_html()
    longest = max(table["reason"], key=len)
    assert len(longest) > 60 and longest in html_lib.unescape(html)
    assert "pre-wrap" in html


def test_tokens_per_second_by_link_chart():
    """One bar per (row, link) with its value written beside it; a table without
    ``tok/s`` columns is a clear error."""
    import pandas as pd

    table = pd.DataFrame({"strategy": ["a", "b"], "skip_copies": [True, True], "tok/s pcie_gen4": [10.5, 20.25], "tok/s nvlink_c2c": [50.0, 60.0]})
    ax = link_throughput_figure(table).get_axes()[0]
    widths = sorted(round(p.get_width(), 2) for p in ax.patches)
    assert widths == [10.5, 20.25, 50.0, 60.0]
    texts = {t.get_text() for t in ax.texts}
    assert {"10.5", "20.2", "50.0", "60.0"} <= texts or {"10.5", "20.3", "50.0", "60.0"} <= texts
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["pcie_gen4", "nvlink_c2c"]
    with pytest.raises(ValueError, match="no 'tok/s <link>' columns"):
        link_throughput_figure(table[["strategy"]])


def test_chrome_trace_draws_every_flow_between_its_two_slices():
    """Each of the timeline's flows is one "s" and one "f" event (bp "e") sharing id, name
    and cat; the "s" lies inside the copy's X slice and the "f" inside the reader's, on
    their own pid/tid, so Perfetto binds the arrow to those two slices."""
    tl, trace = _trace()
    assert tl.flows, "the two-device residual run has copies read by ops"
    events = json.loads(json.dumps(trace))["traceEvents"]  # what a file holds
    xs = [e for e in events if e["ph"] == "X"]
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert len(starts) == len(ends) == len(tl.flows)
    assert set(starts) == set(ends)

    def slice_at(e):
        hits = [x for x in xs if (x["pid"], x["tid"]) == (e["pid"], e["tid"]) and x["ts"] <= e["ts"] <= x["ts"] + x["dur"]]
        assert len(hits) == 1, (e, hits)
        return hits[0]

    for flow_id, s in starts.items():
        f = ends[flow_id]
        assert f["bp"] == "e" and (s["name"], s["cat"]) == (f["name"], f["cat"])
        assert s["cat"] in ("flow:copy", "flow:prefetch")
        src, dst = slice_at(s), slice_at(f)
        assert src["cat"] in ("h2d", "d2h", "d2d")
        assert s["name"] == f"{src['name']} → {dst['name']}"
    pairs = {(slice_at(starts[i])["name"], slice_at(ends[i])["name"]) for i in starts}
    assert pairs == {(fl.src.node, fl.dst.node) for fl in tl.flows}

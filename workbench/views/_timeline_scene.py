"""TimelineView's scene: runs' bars turned into what the front end and the static figure
draw (plain, JSON-able data, compact: a timeline can hold thousands of events).

Rules:
1. One entry per run shown (the main run first): its label, how its times were obtained
   (``source``, ``timeline_data`` rule 8), summary line, lanes, and
   one bar per event as ``[lane, start_us, end_us, kind index, node, bytes, flops,
   colour index, activity]`` (activity "op", or "slot_copy" for the copy of an op's
   result into its planned slot); ``kinds`` and ``palette`` resolve the indices.
2. Copies are coloured by kind, compute and host work by the device that ran it; the
   legend and the kind filter list the kinds present and nothing else.
3. Each run's ``flows`` are ``[src bar, dst bar, flow kind index]`` (``flow_kinds``
   resolves the index): the arrows from a copy to what reads it.
4. ``t0``/``t1`` span every run shown, so compared runs share one time axis; ``steps``
   marks each step's start in a multi-step run (``label`` "step i").
"""

from __future__ import annotations

from typing import Sequence

from ..devices import Device
from ._style import COPY_COLOURS, FLOW_COLOURS, device_colour, timeline_colour
from ._timeline_data import TimelineData
from ._upstream import COPY_EVENT_KINDS, EVENT_KINDS, FLOW_KINDS


FLOW_LABELS = {"copy": "arrow: copy → what reads it", "prefetch": "arrow: prefetch → the layer it serves"}


def timeline_scene(runs: Sequence[tuple[str, TimelineData]]) -> dict:
    """Rules 1-4 for ``[(label, data), …]``."""
    palette: list[str] = []
    colour_index: dict[str, int] = {}

    def colour(kind: str, device: str) -> int:
        c = timeline_colour(kind, device)
        if c not in colour_index:
            colour_index[c] = len(palette)
            palette.append(c)
        return colour_index[c]

    kind_index = {k: i for i, k in enumerate(EVENT_KINDS)}
    out_runs = []
    for label, data in runs:
        bars = [
            [b.lane, round(b.start_us, 6), round(b.end_us, 6), kind_index[b.kind], b.node, b.nbytes, b.flops, colour(b.kind, b.device), b.activity]
            for b in data.bars
        ]
        flows = [[a, b, FLOW_KINDS.index(kind)] for a, b, kind in data.flows]
        out_runs.append(
            {"label": label, "source": data.source, "summary": data.summary.line, "lanes": [list(lane) for lane in data.lanes], "bars": bars, "flows": flows}
        )
    present = [k for k in EVENT_KINDS if any(b.kind == k for _l, d in runs for b in d.bars)]
    compute_devices = sorted(
        {b.device for _l, d in runs for b in d.bars if b.kind not in COPY_EVENT_KINDS}, key=Device.parse
    )
    legend = [{"label": f"{k} copy", "fill": COPY_COLOURS[k]} for k in present if k in COPY_EVENT_KINDS]
    legend += [{"label": f"compute on {d}", "fill": device_colour(d)} for d in compute_devices]
    shown_flows = [k for k in FLOW_KINDS if any(kind == k for _l, d in runs for _a, _b, kind in d.flows)]
    legend += [{"label": FLOW_LABELS[k], "fill": FLOW_COLOURS[k], "shape": "line", "stroke": FLOW_COLOURS[k]} for k in shown_flows]
    first_device = compute_devices[0] if compute_devices else "cpu"
    kind_colours = {k: timeline_colour(k, first_device) for k in present}
    t0 = min((d.start_us for _l, d in runs), default=0.0)
    t1 = max((d.end_us for _l, d in runs), default=0.0)
    main = runs[0][1] if runs else None
    steps = [{"t": t, "label": f"step {i}"} for i, t in enumerate(main.step_starts_us)] if main else []
    return {
        "runs": out_runs,
        "kinds": list(EVENT_KINDS),
        "flow_kinds": list(FLOW_KINDS),
        "flow_colours": [FLOW_COLOURS[k] for k in FLOW_KINDS],
        "copy_kinds": list(COPY_EVENT_KINDS),
        "present": present,
        "kind_colours": kind_colours,
        "palette": palette,
        "t0": t0,
        "t1": t1 if t1 > t0 else t0 + 1.0,
        "steps": steps,
        "legend": legend,
    }

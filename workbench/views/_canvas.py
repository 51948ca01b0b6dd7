"""The interactive drawing surface of every view: an anywidget whose front end is the
package's own ``static/views.js`` (plain ES module, no build step, nothing fetched).

Rules:
1. The kernel sends ``scene``: plain data (positions, sizes, colours, labels, spec rows)
   that the front end only draws, as one JSON string. ``kind`` says which drawing:
   graph, buffers, timeline. The scene only flows to the front end.
2. The interaction state is synced both ways, so the kernel always knows what the user
   did and code can drive the same state: ``focus`` (the graph value selected in any
   linked view: a node, storage or event node name), ``selected`` (this view's own item:
   a node or group id, a storage name, an event index), ``window`` (the x range shown:
   ``[lo, hi]`` steps or µs, ``[]`` for everything), ``viewbox`` (the graph's visible
   rectangle ``[x, y, w, h]`` in layout points, ``[]`` to fit), ``hidden_kinds``
   (timeline event kinds filtered out), ``expanded`` (graph groups drawn member by
   member), ``query`` (the last search).
3. ``detail`` is the kernel's spec of the selected item (``{"key", "title", "rows"}``);
   the front end shows it beside the drawing when its key is the selection's.
"""

from __future__ import annotations

from pathlib import Path

import json
from typing import Any

import anywidget
import traitlets

STATIC = Path(__file__).resolve().parent / "static"
#: The front end every view runs in the browser, and its stylesheet (package data).
FRONT_END = STATIC / "views.js"
FRONT_END_STYLES = STATIC / "views.css"
VIEW_KINDS = ("graph", "buffers", "timeline")


def scene_to_json(scene: dict, _widget: Any) -> str:
    """The scene goes to the front end as one JSON string: ipywidgets would otherwise walk
    every nested list and dict of a large scene looking for binary buffers."""
    return json.dumps(scene, separators=(",", ":"))


class ViewCanvas(anywidget.AnyWidget):
    """The drawing of one view (see the module rules)."""

    _esm = FRONT_END
    _css = FRONT_END_STYLES

    kind = traitlets.Unicode("graph").tag(sync=True)
    scene = traitlets.Dict().tag(sync=True, to_json=scene_to_json)
    focus = traitlets.Unicode(None, allow_none=True).tag(sync=True)
    selected = traitlets.Any(None).tag(sync=True)
    detail = traitlets.Dict().tag(sync=True)
    window: traitlets.List[float] = traitlets.List(traitlets.Float()).tag(sync=True)
    viewbox: traitlets.List[float] = traitlets.List(traitlets.Float()).tag(sync=True)
    hidden_kinds = traitlets.List(traitlets.Unicode()).tag(sync=True)
    expanded = traitlets.List(traitlets.Unicode()).tag(sync=True)
    query = traitlets.Unicode("").tag(sync=True)

    @traitlets.validate("kind")
    def _check_kind(self, proposal: dict) -> str:
        if proposal["value"] not in VIEW_KINDS:
            raise traitlets.TraitError(f"unknown view kind {proposal['value']!r}; kinds are {', '.join(VIEW_KINDS)}")
        return proposal["value"]

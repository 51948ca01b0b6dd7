"""Views: the pipeline's results drawn for notebooks, the CLI and outside tools.

Core code produces plain data; views only render it. Each view has a plain-data layer
that tests check without a browser, a *scene* (plain data the front end draws), and an
interactive widget (zoom, pan, hover, click to select, search):

- ``graph_layout`` → ``graph_scene``        → ``GraphView(dg_or_plan, collapse=None, devices=None, expand=())``
- ``buffer_panels`` → ``buffer_scene``      → ``BufferView(plan, algorithms=None)``
- ``timeline_data`` → ``timeline_scene``    → ``TimelineView(run_or_timeline, compare=None, steps=None)``
- ``explore`` / ``module_groups``           → ``PlacementExplorer(model, example_inputs, groups=None)``

``show(graph, buffers, timeline)`` displays several views from one cell and links their
selection: a click on a node highlights its buffer and its events (``link`` links
without displaying). Every view gives ``.figure()`` (a matplotlib Figure) and
``.save(path)``, and displays as the live widget with a PNG fallback. Each view also
takes what ``from_executorch`` returns. The graph opens on its first copies when the
whole graph is too big to read at once (``fit`` shows it all; an overview in the corner
moves the view); the timeline draws the arrows from each copy to what reads it. Exports:
``to_chrome_trace`` (Perfetto, with those arrows as flow events), ``to_dot`` (Graphviz)
and DataFrame tables.
"""

from ._buffer_data import BufferPanel, BufferRect, ResidentWeights, buffer_panels, byte_ticks, live_steps, resident_weights
from ._buffer_scene import buffer_scene
from ._canvas import FRONT_END, FRONT_END_STYLES, ViewCanvas
from ._collapse import layer_path
from ._graph_scene import graph_scene
from ._graphviz import GraphvizUnavailable
from ._inputs import UnknownNameError, ViewIndexError, ViewInputError, ViewOptionError
from ._layout import GraphLayout, GroupBox, LayoutEdge, LayoutNode, LayoutWarning, graph_layout
from ._node_content import CopyBadge
from ._spec import NodeSpec, node_spec
from ._timeline_data import TimelineBar, TimelineData, TimelineSummary, step_starts, timeline_data, visible_bars
from ._timeline_scene import timeline_scene
from .buffers import BufferView
from .charts import link_throughput_figure
from .explorer import ExplorerState, PlacementExplorer, explore, placement_text
from .exports import ChromeTrace, copies_table, full_text, plan_table, specs_table, timeline_table, to_chrome_trace, to_dot
from .graph import GraphView, search_names
from .groups import GroupSet, default_groups, expert_container_names, module_groups, op_groups, rules_for
from .linking import LinkedViews, link, show
from .timeline import TimelineView

__all__ = [
    "BufferPanel",
    "BufferRect",
    "BufferView",
    "ChromeTrace",
    "CopyBadge",
    "ExplorerState",
    "FRONT_END",
    "FRONT_END_STYLES",
    "GraphLayout",
    "GraphView",
    "GraphvizUnavailable",
    "GroupBox",
    "GroupSet",
    "LayoutEdge",
    "LayoutNode",
    "LayoutWarning",
    "LinkedViews",
    "NodeSpec",
    "PlacementExplorer",
    "ResidentWeights",
    "TimelineBar",
    "TimelineData",
    "TimelineSummary",
    "TimelineView",
    "UnknownNameError",
    "ViewCanvas",
    "ViewIndexError",
    "ViewInputError",
    "ViewOptionError",
    "buffer_panels",
    "buffer_scene",
    "byte_ticks",
    "copies_table",
    "default_groups",
    "expert_container_names",
    "explore",
    "full_text",
    "graph_layout",
    "graph_scene",
    "layer_path",
    "link",
    "link_throughput_figure",
    "live_steps",
    "module_groups",
    "node_spec",
    "op_groups",
    "placement_text",
    "plan_table",
    "resident_weights",
    "rules_for",
    "search_names",
    "show",
    "specs_table",
    "step_starts",
    "timeline_data",
    "timeline_scene",
    "timeline_table",
    "to_chrome_trace",
    "to_dot",
    "visible_bars",
]

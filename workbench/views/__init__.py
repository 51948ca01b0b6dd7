"""Views: the pipeline's results drawn for notebooks, the CLI and outside tools.

Core code produces plain data; views only render it. Each view has a plain-data layer
that tests check without a browser:

- ``graph_layout`` / ``node_spec``  → ``GraphView(dg_or_plan, collapse=None, devices=None)``
- ``buffer_panels``                 → ``BufferView(plan, algorithms=None)``
- ``timeline_data``                 → ``TimelineView(run_or_timeline, compare=None)``
- ``explore``                       → ``PlacementExplorer(model, example_inputs, groups=None)``

Every view has ``.widget`` (an ``ipywidgets.VBox``), displays inline in JupyterLab, and
gives ``.figure()`` (a matplotlib Figure) and ``.save(path)``. Exports:
``to_chrome_trace`` (Perfetto), ``to_dot`` (Graphviz) and DataFrame tables.
"""

from ._buffer_data import BufferPanel, BufferRect, buffer_panels
from ._inputs import ViewInputError
from ._layout import GraphLayout, GroupBox, LayoutEdge, LayoutNode, graph_layout, layer_path
from ._spec import NodeSpec, node_spec
from ._timeline_data import TimelineBar, TimelineData, TimelineSummary, timeline_data
from .buffers import BufferView
from .explorer import ExplorerState, PlacementExplorer, default_groups, explore, rules_for
from .exports import copies_table, plan_table, specs_table, timeline_table, to_chrome_trace, to_dot
from .graph import GraphView
from .timeline import TimelineView

__all__ = [
    "BufferPanel",
    "BufferRect",
    "BufferView",
    "ExplorerState",
    "GraphLayout",
    "GraphView",
    "GroupBox",
    "LayoutEdge",
    "LayoutNode",
    "NodeSpec",
    "PlacementExplorer",
    "TimelineBar",
    "TimelineData",
    "TimelineSummary",
    "TimelineView",
    "ViewInputError",
    "buffer_panels",
    "copies_table",
    "default_groups",
    "explore",
    "graph_layout",
    "layer_path",
    "node_spec",
    "plan_table",
    "rules_for",
    "specs_table",
    "timeline_data",
    "timeline_table",
    "to_chrome_trace",
    "to_dot",
]

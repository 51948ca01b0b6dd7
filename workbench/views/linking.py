"""Linked views: one selection shared by a GraphView, a BufferView and a TimelineView
(or any views), and one call that shows them together.

Rules:
1. ``link(*views)`` joins the views' ``focus`` (the graph value selected). In the browser
   ``ipywidgets.jslink`` copies it from view to view (a click in one view highlights the
   same value in the others with no kernel round trip), and each view it reaches sends
   its new focus to the kernel itself; a ``select`` from code sets it on every linked
   view in the kernel (``FigureView.set_focus``). No kernel-side trait link: it would
   send the kernel's copy of a click back to the browser, where a later click may have
   replaced it already.
2. What a focus means in each view: the graph node (or the group drawing it) in a
   GraphView, the storage holding the value (or the weight's segment of the resident
   bar) in a BufferView, the events of that node in a TimelineView.
3. ``show(*views)`` links the views and displays each one (a cell's last expression
   displays only one object, so three views on three lines show only the last). An
   imported program (what ``from_executorch`` returns) among them stands for its three
   views: graph, buffers and its modeled call's timeline. Outside IPython (a script, a
   terminal) nothing can be drawn: one line says which views would be shown and how to
   keep one as an image (``describe_views``).
"""

from __future__ import annotations

from typing import Any, Optional

import IPython
import IPython.display
import ipywidgets as widgets

from ._inputs import ViewInputError, imported_plan
from ._widget import FigureView
from .buffers import BufferView
from .graph import GraphView
from .timeline import TimelineView

__all__ = ["LinkedViews", "describe_views", "link", "show"]


class LinkedViews:
    """Views sharing one selection (rule 1); displays as all of them, one after another."""

    def __init__(self, *views: FigureView) -> None:
        if len(views) < 2:
            raise ViewInputError(f"link needs two or more views, got {len(views)}")
        for v in views:
            if not isinstance(v, FigureView):
                raise ViewInputError(
                    f"link takes GraphView, BufferView and TimelineView objects; got {type(v).__name__}"
                )
        self.views = tuple(views)
        self._browser_links = [widgets.jslink((a.canvas, "focus"), (b.canvas, "focus")) for a, b in zip(self.views, self.views[1:])]
        for v in self.views:
            v.linked = tuple(o for o in dict.fromkeys(v.linked + self.views) if o is not v)
        first = next((v.focus for v in self.views if v.focus is not None), None)
        if first is not None:
            self.views[0].set_focus(first)

    @property
    def focus(self) -> Optional[str]:
        """The graph value selected in the linked views (None: nothing)."""
        return self.views[0].focus

    def select(self, name: Optional[str]) -> None:
        """Select graph value ``name`` in every view (None clears)."""
        self.views[0].set_focus(name)

    def unlink(self) -> None:
        """Stop sharing the selection."""
        for b in self._browser_links:
            b.unlink()
        self._browser_links = []
        for v in self.views:
            v.linked = tuple(o for o in v.linked if o not in self.views)

    def _ipython_display_(self) -> None:
        for v in self.views:
            IPython.display.display(v)

    def __repr__(self) -> str:
        return f"LinkedViews({', '.join(type(v).__name__ for v in self.views)}, focus={self.focus!r})"

    def __str__(self) -> str:  # what display() prints outside IPython (rule 3)
        return describe_views(*self.views)


def describe_views(*views: Any) -> str:
    """Rule 3: the views ``show`` would display, in words, for where none can be drawn."""
    names = ", ".join(type(v).__name__ for v in views)
    what = f"{len(views)} linked views ({names})" if len(views) > 1 else names
    return f"{what}: shown in Jupyter (run this in a notebook cell); here, save one as an image with view.save('view.png')"


def link(*views: Any) -> LinkedViews:
    """Rule 1."""
    return LinkedViews(*views)


def show(*views: Any) -> None:
    """Rule 3: link ``views`` (two or more) and display them; one view is just displayed."""
    views = tuple(v for obj in views for v in _views_of(obj))
    if len(views) == 1:
        if IPython.get_ipython() is None:
            print(describe_views(*views))
        else:
            IPython.display.display(views[0])
        return
    IPython.display.display(link(*views))


def _views_of(obj: Any) -> tuple[Any, ...]:
    """An imported program's three views (rule 3); anything else as it is."""
    if imported_plan(obj) is None:
        return (obj,)
    return (GraphView(obj), BufferView(obj), TimelineView(obj, label=getattr(obj.estimate(), "label", "modeled call")))

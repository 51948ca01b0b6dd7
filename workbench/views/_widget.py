"""The shared shell of every view: controls, a summary line, the interactive canvas, a
static figure, and one display bundle holding both.

Rules:
1. A view turns its plain data into a *scene* (plain, JSON-able data: positions, colours,
   labels, spec rows) and hands it to its ``ViewCanvas``, whose front end only draws it;
   the static figure (matplotlib) draws the same scene.
2. The static figure is drawn into a fresh ``matplotlib.figure.Figure`` (never pyplot's
   global figures), only when asked for (``figure()``, ``png()``, ``save()``, display).
3. Displaying a view publishes the live widget *and* its PNG in one bundle: a front end
   with the widget manager shows the widget, a static viewer (nbconvert, a notebook
   saved without widget state, nbval) falls back to the picture.
4. The canvas's ``focus`` names the graph value selected in this or any linked view; each
   view derives its own ``selected`` item from it (``_key_for_focus``) and computes the
   spec of that item (``detail``), so the kernel's state is right with or without a
   browser. Selecting from code (``select``) sets the same traits the front end sets,
   in this view and in every view linked to it (``linking``).
5. Every change of data or options rebuilds the scene, the summary and the detail
   together, so they never disagree.
"""

from __future__ import annotations

import base64
import html
import io
import re
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence, Union

import IPython.display
import ipywidgets as widgets
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..atomic_files import atomic_path
from ._canvas import ViewCanvas
from ._inputs import ViewOptionError

DPI = 100

#: The dropdown value meaning "nothing chosen". A Dropdown whose value is None shows a
#: blank box instead of its "(none)" label, so choices use this string instead.
NO_CHOICE = ""


def choice(value: object) -> object:
    """A dropdown value → the view's value (``NO_CHOICE`` → None)."""
    return None if value == NO_CHOICE else value


def as_choice(value: object) -> object:
    """A view's value → the dropdown value (None → ``NO_CHOICE``)."""
    return NO_CHOICE if value is None else value


def new_figure(width_in: float, height_in: float, constrained: bool = True) -> Figure:
    """Rule 2."""
    fig = Figure(figsize=(width_in, height_in), dpi=DPI, layout="constrained" if constrained else None)
    FigureCanvasAgg(fig)
    return fig


def figure_png(fig: Figure, dpi: int = DPI) -> bytes:
    buf = io.BytesIO()
    # fast zlib level: large graph pictures encode ~3x faster for ~15% more bytes
    fig.savefig(buf, format="png", dpi=dpi, pil_kwargs={"compress_level": 1})
    return buf.getvalue()


def rows_html(title: str, rows: Iterable[Sequence[str]]) -> str:
    """A small two-column table; every value is escaped."""
    body = "".join(
        f"<tr><th style='text-align:left;padding-right:1em;vertical-align:top'>{html.escape(str(k))}</th>"
        f"<td style='text-align:left'>{html.escape(str(v))}</td></tr>"
        for k, v in rows
    )
    return f"<div class='wb-spec'><b>{html.escape(title)}</b><table>{body}</table></div>"


def detail(key: Any, title: str, rows: Iterable[Sequence[str]]) -> dict:
    """The ``detail`` trait's value (rule 4): JSON-able, rows as [field, text] pairs."""
    return {"key": key, "title": title, "rows": [[str(k), str(v)] for k, v in rows]}


class FigureView:
    """Base class. Subclasses set ``kind``, ``css_class`` and ``empty_text`` and implement
    ``_scene``, ``_draw``, ``_detail`` and ``_key_for_focus``."""

    kind = "graph"
    css_class = "wb-view"
    empty_text = "select an item to see its spec"

    def __init__(self) -> None:
        self.canvas = ViewCanvas(kind=self.kind)
        self.canvas.add_class(f"{self.css_class}-canvas")
        self.summary = widgets.HTML()
        self.summary.add_class(f"{self.css_class}-summary")
        self.controls = widgets.HBox([])
        self.widget = widgets.VBox([])
        self.widget.add_class(self.css_class)
        self.widget.add_class("wb-view")
        self._png: Optional[bytes] = None
        self.linked: tuple["FigureView", ...] = ()  # the other views sharing the selection
        self.canvas.observe(self._on_focus, names="focus")
        self.canvas.observe(self._on_selected, names="selected")

    # -- subclass hooks -------------------------------------------------------------
    def _scene(self) -> dict:  # pragma: no cover - abstract
        raise NotImplementedError

    def _draw(self) -> Figure:  # pragma: no cover - abstract
        raise NotImplementedError

    def _detail(self, key: Any) -> dict:  # pragma: no cover - abstract
        """Rule 4: the spec of item ``key`` (``{}`` when there is none)."""
        raise NotImplementedError

    def _key_for_focus(self, focus: Optional[str]) -> Any:  # pragma: no cover - abstract
        """Rule 4: this view's item for the linked value ``focus`` (None: not here)."""
        raise NotImplementedError

    def _summary_html(self) -> str:
        return ""

    def _text(self) -> str:
        """One line for plain-text front ends (instead of the widget tree's repr)."""
        return html.unescape(re.sub(r"<[^>]+>", "", self._summary_html()))

    # -- public ---------------------------------------------------------------------
    @property
    def selected(self) -> Any:
        """This view's selected item (None: nothing)."""
        return self.canvas.selected

    @property
    def focus(self) -> Optional[str]:
        """The graph value selected here or in a linked view (None: nothing)."""
        return self.canvas.focus

    def figure(self) -> Figure:
        """A static matplotlib Figure of what the view shows now."""
        return self._draw()

    def png(self) -> bytes:
        """The static figure as PNG bytes (the display bundle's fallback)."""
        if self._png is None:
            self._png = figure_png(self._draw())
        return self._png

    def save(self, path: Union[str, Path], dpi: int = DPI) -> Path:
        """Write the static figure (format from the suffix: .png, .svg, .pdf)."""
        path = Path(path)
        suffix = path.suffix.lower().lstrip(".")
        if suffix not in ("png", "svg", "pdf"):
            raise ViewOptionError(f"cannot save a view as {path.name!r}; use a .png, .svg or .pdf file name")
        figure = self._draw()
        with atomic_path(path, "a figure") as tmp:  # a failed write leaves the old figure whole
            figure.savefig(tmp, format=suffix, dpi=dpi)
        return path

    def spec_html(self) -> str:
        """The selected item's spec as an HTML table (what the side panel shows)."""
        d = self.canvas.detail
        if not d:
            return f"<i>{html.escape(self.empty_text)}</i>"
        return rows_html(d["title"], d["rows"])

    def refresh(self) -> None:
        """Rule 5: rebuild the scene, the summary and the detail."""
        self._png = None
        with self.canvas.hold_sync():
            self.canvas.scene = self._scene()
            self.canvas.detail = self._detail(self.canvas.selected) if self.canvas.selected is not None else {}
        self.summary.value = self._summary_html()

    # -- selection (rule 4) -------------------------------------------------------------
    def set_focus(self, name: Optional[str]) -> None:
        """Make ``name`` the selected graph value here and in every linked view (what a
        click does in the browser, where the linked views follow without the kernel)."""
        for view in (self,) + self.linked:
            view.canvas.focus = name

    def _on_focus(self, change: dict) -> None:
        key = self._key_for_focus(change["new"])
        if key != self.canvas.selected:
            self.canvas.selected = key  # _on_selected updates the detail
        else:
            self._update_detail()

    def _on_selected(self, _change: dict) -> None:
        self._update_detail()

    def _update_detail(self) -> None:
        self._png = None
        key = self.canvas.selected
        self.canvas.detail = self._detail(key) if key is not None else {}

    # -- for subclasses ---------------------------------------------------------------
    def _bind(self, dropdown: widgets.Dropdown, setter: Callable[[Any], None]) -> None:
        """A change of ``dropdown`` calls ``setter`` with the view's value (``choice``)."""
        dropdown.add_class("wb-control")
        dropdown.observe(lambda change: setter(choice(change["new"])), names="value")

    def _show(self, *controls: widgets.Widget) -> None:
        """Lay the view out (controls, summary, canvas) and draw it."""
        self.controls.children = list(controls)
        self.widget.children = ([self.controls] if controls else []) + [self.summary, self.canvas]
        self.refresh()

    def _redraw_with(self, dropdown: widgets.Dropdown, value: Any) -> None:
        """After a setter changed an option to ``value``: point ``dropdown`` at it (its
        observer re-enters the setter once, which then redraws), or redraw now when the
        dropdown already shows it."""
        if choice(dropdown.value) != value:
            dropdown.value = as_choice(value)
        else:
            self.refresh()

    def _repr_mimebundle_(self, **kwargs: Any) -> dict:
        """Rule 3: the widget and its PNG in one bundle."""
        bundle = self.widget._repr_mimebundle_(**kwargs)
        data = dict(bundle[0] if isinstance(bundle, tuple) else bundle)
        data["image/png"] = base64.b64encode(self.png()).decode("ascii")
        data["text/plain"] = f"{type(self).__name__}: {self._text()}"
        return data

    def _ipython_display_(self) -> None:
        """Rule 3."""
        IPython.display.display(self._repr_mimebundle_(), raw=True)

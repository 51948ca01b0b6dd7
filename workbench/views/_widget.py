"""The shared shell of every figure view: a widget, a static figure, a PNG, a display.

Rules:
1. A view draws from plain data into a fresh ``matplotlib.figure.Figure`` (never pyplot's
   global figures, so views do not leak figures or depend on the notebook backend).
2. The widget shows the figure as an ``ipywidgets.Image`` holding PNG bytes: it renders
   the same in a live JupyterLab and, through the saved widget state, without a kernel.
3. Displaying a view publishes the widget *and* the same PNG in one bundle: a front end
   with the widget manager shows the live widget, a static viewer (nbconvert, a notebook
   saved without widget state) falls back to the picture.
4. Every change of selection or option redraws the figure and the spec panel together,
   so they never disagree.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Union

import ipywidgets as widgets
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

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
    """Rule 1."""
    fig = Figure(figsize=(width_in, height_in), dpi=DPI, layout="constrained" if constrained else None)
    FigureCanvasAgg(fig)
    return fig


def figure_png(fig: Figure, dpi: int = DPI) -> bytes:
    buf = io.BytesIO()
    # fast zlib level: large graph pictures encode ~3x faster for ~15% more bytes
    fig.savefig(buf, format="png", dpi=dpi, pil_kwargs={"compress_level": 1})
    return buf.getvalue()


def rows_html(title: str, rows: Iterable[tuple[str, str]]) -> str:
    """A small two-column table; every value is escaped."""
    body = "".join(
        f"<tr><th style='text-align:left;padding-right:1em;vertical-align:top'>{html.escape(str(k))}</th>"
        f"<td style='text-align:left'>{html.escape(str(v))}</td></tr>"
        for k, v in rows
    )
    return f"<div class='wb-spec'><b>{html.escape(title)}</b><table>{body}</table></div>"


class FigureView:
    """Base class: subclasses set ``css_class`` and implement ``_draw`` and ``_spec_html``."""

    css_class = "wb-view"

    def __init__(self) -> None:
        self.image = widgets.Image(format="png", layout=widgets.Layout(max_width="100%", height="auto"))
        self.image.add_class(f"{self.css_class}-figure")
        self.spec = widgets.HTML()
        self.spec.add_class(f"{self.css_class}-spec")
        self.summary = widgets.HTML()
        self.widget = widgets.VBox([])
        self.widget.add_class(self.css_class)
        self.widget.add_class("wb-view")
        self._png: Optional[bytes] = None
        self._selected: Any = None

    # -- subclass hooks -------------------------------------------------------------
    def _draw(self) -> Figure:  # pragma: no cover - abstract
        raise NotImplementedError

    def _spec_html(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def _summary_html(self) -> str:
        return ""

    # -- public ---------------------------------------------------------------------
    @property
    def selected(self) -> Any:
        """What ``select`` chose (None: nothing)."""
        return self._selected

    def figure(self) -> Figure:
        """A static matplotlib Figure of what the view shows now."""
        return self._draw()

    def png(self) -> bytes:
        """The current figure as PNG bytes (what the widget shows)."""
        if self._png is None:
            self._png = figure_png(self._draw())
        return self._png

    def save(self, path: Union[str, Path], dpi: int = DPI) -> Path:
        """Write the figure (format from the suffix: .png, .svg, .pdf)."""
        path = Path(path)
        suffix = path.suffix.lower().lstrip(".")
        if suffix not in ("png", "svg", "pdf"):
            raise ValueError(f"cannot save a view as {path.name!r}; use a .png, .svg or .pdf file name")
        self._draw().savefig(path, format=suffix, dpi=dpi)
        return path

    def refresh(self) -> None:
        """Rule 4: redraw the figure, the spec panel and the summary."""
        self._png = None
        self.image.value = self.png()
        self.spec.value = self._spec_html()
        self.summary.value = self._summary_html()

    # -- for subclasses ---------------------------------------------------------------
    def _bind(self, dropdown: widgets.Dropdown, setter: Callable[[Any], None]) -> None:
        """A change of ``dropdown`` calls ``setter`` with the view's value (``choice``)."""
        dropdown.add_class("wb-control")
        dropdown.observe(lambda change: setter(choice(change["new"])), names="value")

    def _show(self, *controls: widgets.Widget) -> None:
        """Lay the view out (controls, summary, figure, spec) and draw it."""
        self.widget.children = [widgets.HBox(list(controls)), self.summary, self.image, self.spec]
        self.refresh()

    def _redraw_with(self, dropdown: widgets.Dropdown, value: Any) -> None:
        """Rule 4 after a setter changed the view's state to ``value``: point ``dropdown``
        at it (its observer re-enters the setter once, which then redraws), or redraw
        now when the dropdown already shows it."""
        if choice(dropdown.value) != value:
            dropdown.value = as_choice(value)
        else:
            self.refresh()

    def _ipython_display_(self) -> None:
        """Rule 3."""
        from IPython.display import display

        bundle = dict(self.widget._repr_mimebundle_())
        bundle["image/png"] = base64.b64encode(self.png()).decode("ascii")
        display(bundle, raw=True)

"""Colours, markers and number formats shared by every view (and the DOT export).

Rules:
1. A device keeps its colour in every view: ``cpu`` blue, ``cuda:0`` green, ``cuda:1``
   yellow, then a fixed cycle by index, so a notebook reads the same from view to view.
2. Copies are coloured by kind (h2d red, d2h orange, d2d brown), never by device: a copy
   is what a researcher looks for first.
3. Buffer kinds (input, output, activation, copy) use light tints so the selected
   rectangle, drawn in black, stands out; graph nodes are filled with a tint of their
   device's colour and outlined in the colour itself.
"""

from __future__ import annotations

from typing import Mapping

from ..devices import Device
from ._inputs import ViewOptionError
from ._upstream import format_bytes, format_us  # noqa: F401  (re-exported for the views)

CPU_COLOUR = "#4E79A7"
_CUDA_COLOURS = ("#59A14F", "#EDC948", "#B07AA1", "#76B7B2", "#FF9DA7", "#BAB0AC", "#86BCB6", "#D37295")

COPY_COLOURS: dict[str, str] = {"h2d": "#E15759", "d2h": "#F28E2B", "d2d": "#9C755F"}

BUFFER_COLOURS: dict[str, str] = {
    "input": "#8CD17D",
    "output": "#FFBE7D",
    "activation": "#A0CBE8",
    "copy": "#FF9D9A",
}

#: timeline arrows: a copy to what reads it, a prefetch to the layer it serves
FLOW_COLOURS: dict[str, str] = {"copy": "#555555", "prefetch": "#7B3FA0"}

CONSTANT_COLOUR = "#C9C9C9"


def device_colour(device: str | Device) -> str:
    """Rule 1: the colour of a device string (``"cpu"``, ``"cuda:1"``) or Device."""
    dev = Device.parse(device)
    if dev.is_host:
        return CPU_COLOUR
    return _CUDA_COLOURS[dev.index % len(_CUDA_COLOURS)]


def copy_colour(kind: str) -> str:
    """Rule 2: the colour of a copy kind."""
    try:
        return COPY_COLOURS[kind]
    except KeyError:
        raise ViewOptionError(f"unknown copy kind {kind!r}; valid kinds are {', '.join(COPY_COLOURS)}") from None


def colour_for_key(key: str) -> str:
    """The colour behind a layout's colour key: ``device:<dev>``, ``copy:<kind>`` or ``constant``."""
    family, _, value = key.partition(":")
    if family == "device":
        return device_colour(value)
    if family == "copy":
        return copy_colour(value)
    if key == "constant":
        return CONSTANT_COLOUR
    raise ViewOptionError(f"unknown colour key {key!r}; keys look like 'device:cuda:0', 'copy:h2d' or 'constant'")


def timeline_colour(kind: str, device: str) -> str:
    """Copies by kind (rule 2); compute and host work by the device they ran on."""
    if kind in COPY_COLOURS:
        return COPY_COLOURS[kind]
    return device_colour(device)


def tint(colour: str, strength: float) -> str:
    """``colour`` mixed with white: ``strength`` 1 is the colour, 0 is white. Fills are
    tints so the dark text on them stays readable and outlines carry the full colour."""
    r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    mix = [round(255 - (255 - c) * strength) for c in (r, g, b)]
    return "#" + "".join(f"{c:02X}" for c in mix)


def copy_label(kind: str, nbytes: int) -> str:
    """The label drawn on a copy node: ``"h2d 4.0 KiB"``."""
    return f"{kind} {format_bytes(nbytes)}"


def copies_of_kind(kind: str, count: int, nbytes: int) -> str:
    """``count`` copies of ``kind`` that move ``nbytes`` between them: ``"2 h2d copies,
    8.0 KiB in all"``, ``"1 d2h copy, 4.0 KiB"`` (a count and a total, never a size each)."""
    if count == 1:
        return f"1 {kind} copy, {format_bytes(nbytes)}"
    return f"{count} {kind} copies, {format_bytes(nbytes)} in all"


def copies_text(counts: Mapping[str, int], moved: Mapping[str, int]) -> str:
    """Copies per kind for a title: ``"2 h2d copies, 8.0 KiB in all; 1 d2h copy, 4.0 KiB"``
    (``"no copies"``)."""
    return "; ".join(copies_of_kind(k, n, moved[k]) for k, n in counts.items() if n) or "no copies"

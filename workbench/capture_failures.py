"""Capture failures: torch.export's error on a model, read as one paragraph.

Rules (capture rule 7):
1. A failed export is a ``CaptureError`` of one paragraph: what failed, the model's line
   that did it (from the exception's stack, or the frames torch quotes), what to do.
2. torch's whole text is kept on ``torch_message`` (and as ``__cause__``).
3. While an export is attempted torch's loggers are silenced (restored afterwards), and
   the partial graph torch prints when it fails is held back, so a failure floods nothing.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import sys
import traceback
from pathlib import Path
from typing import Any, Iterator, Optional

import torch

from .errors import WorkbenchError

__all__ = ["CaptureError", "EXPORT_LOGGERS", "export_failure", "model_line", "quiet_export_logs"]


class CaptureError(WorkbenchError, ValueError):
    """The model or its example inputs cannot be captured.

    When torch.export failed, the message is one paragraph — what failed, the model's line
    that did it, what to do — and ``torch_message`` holds torch's own full text (the
    exception is also the ``__cause__``)."""

    def __init__(self, message: str, torch_message: str = "") -> None:
        super().__init__(message)
        self.torch_message = torch_message



#: torch's pytree error for a value it cannot flatten: "Found <class 'pkg.Type'> in output, …".
_UNFLATTENABLE = re.compile(r"Found <class '(?P<type>[\w.]+)'> in (?P<where>input|output)")
#: Words of torch's errors about a shape or a branch that depends on tensor values.
_DATA_DEPENDENT = re.compile(r"data.dependent|GuardOnDataDependent|unbacked|DataDependentOutput", re.IGNORECASE)
#: Loggers torch.export reports a failed trace through (a partial graph of hundreds of lines).
EXPORT_LOGGERS = ("torch.export", "torch._export", "torch._dynamo", "torch.fx.experimental.symbolic_shapes",
                  "torch._functorch", "torch._subclasses.fake_tensor", "torch.fx._symbolic_trace")
_SHORT = 240  # characters of torch's first line quoted in the paragraph


@contextlib.contextmanager
def quiet_export_logs() -> Iterator[None]:
    """Rule 7: torch's export loggers silenced below CRITICAL while a capture is attempted,
    their levels restored afterwards; what the attempt writes to stderr is held back and
    written out after it, less the partial graph torch prints when it fails (which stays
    on the exception as ``partial_fx_graph``)."""
    loggers = [logging.getLogger(name) for name in EXPORT_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    held = io.StringIO()
    failure: Optional[BaseException] = None
    try:
        with contextlib.redirect_stderr(held):
            yield
    except BaseException as exc:
        failure = exc
        raise
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)
        text = held.getvalue()
        partial = getattr(failure, "partial_fx_graph", None)
        if partial:
            text = text.replace(f"{partial}\n", "").replace(str(partial), "")
        if text.strip():
            sys.stderr.write(text)


def export_failure(model_name: str, exc: BaseException) -> CaptureError:
    """Rule 7: torch.export's failure on ``model_name`` as one paragraph — what failed, the
    model line that did it, what to do — with torch's full text on ``torch_message``."""
    full = f"{type(exc).__name__}: {exc}"
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
    if len(first) > _SHORT:
        first = first[: _SHORT - 1] + "…"
    where = model_line(exc)
    at = f" at {where}" if where else ""
    message = (
        f"torch.export could not capture {model_name}{at}: {type(exc).__name__}: {first}. "
        f"What to do: {_what_to_do(exc)} (torch's full text is on this error's torch_message)"
    )
    return CaptureError(message, full)


def model_line(exc: BaseException) -> str:
    """The model's own line an export failure came from, ``file.py:123 (code)``: the
    innermost frame of the traceback outside torch, this package and Python itself, else
    the innermost ``File "…", line N`` torch quotes in its message from such a file ("")."""
    own = (_package_dir(torch), _package_dir(__import__("workbench")), _package_dir(contextlib))
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if not frame.filename.startswith(own):
            code = f" ({frame.line.strip()})" if frame.line else ""
            return f"{_short_path(frame.filename)}:{frame.lineno}{code}"
    quoted = [m for m in _QUOTED_FRAME.finditer(str(exc)) if not m["file"].startswith(own)]
    if quoted:
        last = quoted[-1]
        code = f" ({last['code'].strip()})" if last["code"] and last["code"].strip() else ""
        return f"{_short_path(last['file'])}:{last['line']}{code}"
    return ""


_QUOTED_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in [^\n]*)?\n(?P<code>[^\n]*)?')


def _package_dir(module: Any) -> str:
    return str(Path(module.__file__).resolve().parent)


def _short_path(filename: str) -> str:
    """A frame's file from its package on (``transformers/models/…/modeling_x.py``)."""
    parts = Path(filename).parts
    if "site-packages" in parts:
        return "/".join(parts[parts.index("site-packages") + 1 :])
    return Path(filename).name


def _what_to_do(exc: BaseException) -> str:
    """What to change, for the failures whose fix is known: an input or output torch.export
    cannot flatten (a transformers cache, most often), a shape or branch that depends on
    tensor values (a Python loop over the experts the router chose); else where to look."""
    text = f"{type(exc).__name__} {exc}"
    found = _UNFLATTENABLE.search(text)
    if found is not None:
        kind, where = found["type"].rsplit(".", 1)[-1], found["where"]
        hint = (
            f"the model's {where} holds a {kind}, which is not a tensor (nor a tuple, list or dict of "
            "tensors); the workbench captures plain tensors in and out."
        )
        if kind.endswith("Cache"):
            return hint + (
                " For a transformers model, capture the prefill without a cache "
                "(kwargs={'use_cache': False}, or workbench.hf.capture_prefill), or a decode step "
                "whose cache is passed and returned as plain tensors (workbench.hf.capture_decode)."
            )
        return hint + f" Wrap the model in a module whose forward {'takes' if where == 'input' else 'returns'} tensors."
    if _DATA_DEPENDENT.search(text):
        return (
            "that line sizes a tensor or takes a branch by values computed from the inputs (a Python "
            "loop over the experts the router chose, .item(), nonzero), which torch.export cannot trace; "
            "compute it with fixed shapes instead (every expert as one batched matmul, weighted by the "
            "router's mask), or for a transformers model choose an experts implementation that exports "
            "(model.set_experts_implementation('batched_mm'), if the family offers one)."
        )
    return "change that line so it traces with torch.export (read torch's text for the reason), or capture a smaller part of the model."

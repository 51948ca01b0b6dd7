"""The walkthrough and its command line take a transformers model."""

from __future__ import annotations

import re

import pandas as pd
import pytest

pytest.importorskip("transformers")

from workbench.app.cli import main  # noqa: E402


def test_walkthrough_runs_a_transformers_family(tmp_path, capsys):
    """`walkthrough --model hf:olmoe` runs the six strategy variants on the tiny config
    (every one equal to eager), writes the table, figures and traces, and exits 0."""
    status = main(["walkthrough", "--model", "hf:olmoe", "--skip-full", "--no-progress", "--out", str(tmp_path)])
    assert status == 0
    table = pd.read_csv(tmp_path / "strategies_tiny.csv")
    assert len(table) == 6 and table["equals_eager"].all()
    assert {"graph.png", "timeline.png", "trace_expert_streaming_skip.json"} <= {p.name for p in tmp_path.iterdir()}
    assert "OLMoE (OlmoeForCausalLM)" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "hf:gpt5"], "--model: unknown transformers family 'hf:gpt5'.*qwen3_5_moe.*builtin"),
        (["--model", "gpt5"], "--model: 'gpt5'; give 'builtin' or hf:FAMILY"),
        (["--model", "hf:mixtral", "--config", "missing.json"], "--config: no file 'missing.json'"),
    ],
)
def test_bad_model_arguments_are_one_line_errors(tmp_path, capsys, argv, message):
    """A bad --model or --config is one line on stderr and exit status 2, before any work:
    nothing is written."""
    out = tmp_path / "out"
    status = main(["walkthrough", *argv, "--skip-full", "--no-progress", "--out", str(out)])
    assert status == 2 and not out.exists()
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert re.search(message, err), err

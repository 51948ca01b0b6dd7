"""The walkthrough and its command line take a transformers model."""

from __future__ import annotations

import pandas as pd
import pytest

pytest.importorskip("transformers")

from workbench.cli import main  # noqa: E402


def test_walkthrough_runs_a_transformers_family(tmp_path, capsys):
    """`walkthrough --model hf:olmoe` runs the six strategy variants on the tiny config
    (every one equal to eager), writes the table, figures and traces, and exits 0."""
    status = main(["walkthrough", "--model", "hf:olmoe", "--skip-full", "--no-progress", "--out", str(tmp_path)])
    assert status == 0
    table = pd.read_csv(tmp_path / "strategies_tiny.csv")
    assert len(table) == 6 and table["equals_eager"].all()
    assert {"graph.png", "timeline.png", "trace_expert_streaming_skip.json"} <= {p.name for p in tmp_path.iterdir()}
    assert "OLMoE (OlmoeForCausalLM)" in capsys.readouterr().out


def test_unknown_family_is_a_clear_error(tmp_path):
    """An unknown --model names the families that exist."""
    with pytest.raises(SystemExit, match="qwen3_5_moe.*builtin"):
        main(["walkthrough", "--model", "hf:gpt5", "--skip-full", "--no-progress", "--out", str(tmp_path)])

"""The prospective log: predictions recorded before their runs are measured, append-only."""

import datetime as dt
import shutil

import pandas as pd
import pytest

from workbench.app.cli import main
from workbench.speed.prospective import (LOG_COLUMNS, check_log, log_predictions, model_version, prospective_log,
                                         prospective_log_path, prospective_runs, prospective_runs_path, prospective_summary,
                                         record_measured)
from workbench.speed.published_runs import AnchorError

from published_fixtures import model  # noqa: F401  (fixtures)

DAY = dt.date(2026, 12, 1)


def _runs(tmp_path, rows=None):
    table = pd.read_csv(prospective_runs_path(), dtype=str, keep_default_na=False)
    if rows is not None:
        table = rows(table)
    path = tmp_path / "runs.csv"
    table.to_csv(path, index=False)
    return path


def test_predictions_are_logged_once_with_their_interval_and_model_version(tmp_path, model):
    """Every prospective run is predicted once, with the interval it earned, its evidence
    and the model's version; logging again adds nothing (append-only)."""
    log = tmp_path / "log.csv"
    added = log_predictions(_runs(tmp_path), log, model, DAY)
    assert len(added) == len(prospective_runs()) and list(added.columns) == list(LOG_COLUMNS)
    first = added.iloc[0]
    assert float(first["low"]) < float(first["predicted_tok_s"]) < float(first["high"])
    assert first["evidence"].startswith(("validated on", "unvalidated")) and first["model_version"] == model_version()
    assert (added["measured_tok_s"] == "").all() and (added["predicted_on"] == DAY.isoformat()).all()
    assert len(log_predictions(_runs(tmp_path), log, model, DAY)) == 0
    assert len(prospective_log(log)) == len(added)


def test_a_measured_figure_is_entered_once_on_or_after_its_prediction(tmp_path, model):
    """A logged run's measured figure is entered once, within the published speed range,
    not before the day it was predicted; an unknown run is refused naming the log."""
    log = tmp_path / "log.csv"
    added = log_predictions(_runs(tmp_path), log, model, DAY)
    run_id = added.iloc[0]["id"]
    with pytest.raises(AnchorError, match="before predicted_on"):
        record_measured(run_id, 30.0, DAY - dt.timedelta(days=1), log)
    with pytest.raises(AnchorError, match="tok/s in"):
        record_measured(run_id, 1e9, DAY, log)
    with pytest.raises(AnchorError, match="not in the prospective log"):
        record_measured("no_such_run", 30.0, DAY, log)
    assert prospective_log(log)["measured_tok_s"].eq("").all()  # every refusal left the log as it was
    record_measured(run_id, 30.0, DAY, log)
    with pytest.raises(AnchorError, match="entered once"):
        record_measured(run_id, 31.0, DAY, log)
    assert prospective_log(log).set_index("id").loc[run_id, "measured_tok_s"] == "30"


def test_a_prediction_edited_after_it_was_logged_breaks_the_chain(tmp_path, model):
    """Changing a logged prediction (here after its measured figure is in), dropping an
    entry or reordering them makes the log refuse to load."""
    log = tmp_path / "log.csv"
    added = log_predictions(_runs(tmp_path), log, model, DAY)
    record_measured(added.iloc[0]["id"], 30.0, DAY, log)
    text = log.read_text()
    edited = pd.read_csv(log, dtype=str, keep_default_na=False)
    edited.loc[0, "predicted_tok_s"] = "30"
    for name, table in (("edited", edited), ("dropped", edited.iloc[1:]), ("reordered", edited.iloc[::-1])):
        bad = tmp_path / f"{name}.csv"
        table.to_csv(bad, index=False)
        with pytest.raises(AnchorError, match="chain hash|logged twice"):
            prospective_log(bad)
    assert log.read_text() == text


def test_prospective_runs_come_from_new_sources_and_state_no_speed(tmp_path):
    """A prospective run states no speed (it is predicted first) and comes from a source the
    published table does not use, nor a reserved one."""
    with pytest.raises(AnchorError, match="state a speed"):
        prospective_runs(_runs(tmp_path, lambda t: t.assign(decode_tok_s="12")))
    used = "https://github.com/ggml-org/llama.cpp/pull/16834"
    with pytest.raises(AnchorError, match="already uses"):
        prospective_runs(_runs(tmp_path, lambda t: t.assign(source_url=used)))
    with pytest.raises(AnchorError, match="reserved"):
        prospective_runs(_runs(tmp_path, lambda t: t.assign(source_url="https://arxiv.org/abs/2312.17238")))


def test_the_summary_judges_measured_entries_only(tmp_path, model):
    """Within 0.5-2 and coverage are over the measured entries; pending ones are listed."""
    log = tmp_path / "log.csv"
    added = log_predictions(_runs(tmp_path), log, model, DAY)
    first, second = added.iloc[0], added.iloc[1]
    record_measured(first["id"], float(first["predicted_tok_s"]), DAY, log)  # exact: covered, ratio 1
    record_measured(second["id"], float(second["predicted_tok_s"]) * 3, DAY, log)  # a third: outside both
    summary = prospective_summary(log)
    assert (summary.logged, summary.measured) == (len(added), 2)
    assert summary.within == pytest.approx(0.5) and summary.covered == pytest.approx(0.5)


def test_the_shipped_log_is_intact_and_every_prediction_came_first():
    """The shipped log's chain holds (no logged prediction was changed after the fact) and
    every measured figure was entered on or after its prediction, by a recorded model version."""
    log = prospective_log()
    check_log(log, str(prospective_log_path()))
    assert len(log) >= len(prospective_runs()) and set(prospective_runs()["id"]) <= set(log["id"])
    assert log["model_version"].str.fullmatch(r"[0-9a-f]{16}").all()


def test_the_command_prints_the_log_and_refuses_a_bad_figure(tmp_path, capsys):
    """``python -m workbench prospective`` reports the log apart from the hold-outs; a
    measured figure that is not a number is a usage error (status 2), the log untouched."""
    log = tmp_path / "log.csv"
    shutil.copy(prospective_log_path(), log)
    assert main(["prospective", "--log", str(log)]) == 0
    assert "predictions logged before their runs were measured" in capsys.readouterr().out
    before = log.read_text()
    assert main(["prospective", "--log", str(log), "--measured", "x=fast"]) == 2
    assert log.read_text() == before

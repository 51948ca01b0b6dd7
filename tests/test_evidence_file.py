"""The kept fits and held-out predictions: current for the shipped code and tables, the
same as a fresh fit, and never used when stale or damaged."""

import dataclasses
import json
import math

import pytest

from workbench.speed.evidence_file import evidence_file_path, evidence_inputs_hash, read_evidence_file, write_evidence_file
from workbench.speed.regime_model import fitted_regime_model, regime_evidence, regime_model


def test_the_shipped_evidence_is_current():
    """data/runtimes/regime_evidence.json was made from this code and these tables (run
    `make evidence` after changing either)."""
    kept, why = read_evidence_file()
    assert kept is not None, why
    assert kept.inputs == evidence_inputs_hash()


@pytest.mark.slow
def test_the_kept_evidence_is_what_a_fresh_fit_gives():
    """Every fitted term and every held-out prediction read from the file equals the
    model fitted afresh (the file is a cache, never a different answer)."""
    fresh = fitted_regime_model()
    kept = regime_model()
    assert dict(kept.fits) == pytest.approx(dict(fresh.fits), rel=1e-12)
    # the file was made on another machine: floats agree to rounding, everything else exactly
    for a, b in ((kept.out_of_sample, fresh.out_of_sample), (kept.out_of_runtime, fresh.out_of_runtime)):
        assert [dataclasses.replace(o, predicted=None) for o in a] == [dataclasses.replace(o, predicted=None) for o in b]
        def predicted(outs):  # a run not modeled predicts nothing: NaN, so approx can compare it
            return [math.nan if o.predicted is None else o.predicted for o in outs]
        assert predicted(a) == pytest.approx(predicted(b), rel=1e-9, nan_ok=True)
    assert [t.name for t in kept.terms] == [t.name for t in fresh.terms]


def test_a_stale_or_damaged_file_is_not_used(tmp_path):
    """A file made from other inputs, or with a broken record, is refused with a reason."""
    kept, _ = read_evidence_file()
    assert kept is not None
    path = write_evidence_file(kept, tmp_path / "e.json")
    assert read_evidence_file(path)[0] == kept
    body = json.loads(path.read_text())
    stale = dict(body, inputs="0" * 16)
    (tmp_path / "stale.json").write_text(json.dumps(stale))
    assert read_evidence_file(tmp_path / "stale.json")[0] is None
    broken = dict(body)
    broken["out_of_sample"] = [dict(body["out_of_sample"][0], published="fast")] + body["out_of_sample"][1:]
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    got, why = read_evidence_file(tmp_path / "broken.json")
    assert got is None and "published" in why
    (tmp_path / "nan.json").write_text(path.read_text().replace('"fits": {', '"fits": {"bad": NaN, ', 1))
    assert read_evidence_file(tmp_path / "nan.json")[0] is None
    assert evidence_file_path().name == "regime_evidence.json"

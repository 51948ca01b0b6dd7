"""The table of published batch-1 decode runs: loaded and checked, never trusted blindly."""

import os

import pandas as pd
import pytest

from workbench.app.anchors import (
    PUBLISHED_COLUMNS,
    PUBLISHED_REGIMES,
    RESERVED_SOURCES,
    AnchorError,
    published_decode_runs,
    published_dir,
)


def test_the_shipped_table_covers_every_regime_with_sources():
    """At least 16 runs, at least 4 per regime, each with an https source, a quote and a
    positive decode speed; none from a source reserved for validation."""
    runs = published_decode_runs()
    assert len(runs) >= 16
    counts = runs["regime"].value_counts()
    assert all(counts.get(r, 0) >= 4 for r in PUBLISHED_REGIMES), counts.to_dict()
    assert runs["source_url"].str.startswith("https://").all() and (runs["decode_tok_s"] > 0).all()
    assert not any(r.lower() in u.lower() for u in runs["source_url"] for r in RESERVED_SOURCES)


def _write(tmp_path, rows):
    path = tmp_path / "runs.csv"
    pd.DataFrame(rows, columns=list(PUBLISHED_COLUMNS)).to_csv(path, index=False)
    return path


def _row(**changes):
    row = dict.fromkeys(PUBLISHED_COLUMNS, "")
    row.update(id="a", regime="all_on_gpu", decode_tok_s=10.0, source_url="https://example.org/run",
               quote="10 tok/s")
    row.update(changes)
    return row


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"regime": "on_the_moon"}, r"regime outside all_on_gpu"),
        ({"decode_tok_s": -3}, r"have no decode_tok_s in \[0.001, 100000\]"),
        ({"decode_tok_s": "fast"}, r"have no decode_tok_s in \[0.001, 100000\]"),
        ({"decode_tok_s": "1e308"}, r"have no decode_tok_s in \[0.001, 100000\]"),
        ({"bits_per_weight": 1e9}, r"bits_per_weight is not a number in \(0, 64\]"),
        ({"total_params_b": "many"}, r"total_params_b is not a number"),
        ({"total_params_b": 3, "active_params_b": 30}, r"active_params_b exceeds total_params_b"),
        ({"gpu_count": 0.5}, r"gpu_count is not a number in \[1, 1024\]"),
        ({"runtime": "x" * 2001}, r"a cell longer than 2000 characters"),
        ({"source_url": "http://example.org"}, r"lack an https source_url or a quote"),
        ({"quote": ""}, r"lack an https source_url or a quote"),
        ({"quote": "x" * 201}, r"more than 200 characters"),
        ({"source_url": "https://github.com/tenstorrent/tt-inference-server/issues/340"}, r"reserved for validation"),
        ({"source_url": "https://arxiv.org/abs/2312.17238"}, r"reserved for validation"),
    ],
)
def test_a_bad_row_is_refused_by_name(tmp_path, changes, message):
    """Each broken rule is refused with an AnchorError naming the row and what is valid."""
    path = _write(tmp_path, [_row(**changes), _row(id="b")])
    with pytest.raises(AnchorError, match=message) as info:
        published_decode_runs(path)
    assert "['a']" in str(info.value)


def test_a_good_row_loads_and_a_duplicate_id_does_not(tmp_path):
    """A valid one-row file loads with a float speed; two rows with one id are refused."""
    assert published_decode_runs(_write(tmp_path, [_row()]))["decode_tok_s"].tolist() == [10.0]
    with pytest.raises(AnchorError, match=r"ids \['a'\] are empty or duplicated"):
        published_decode_runs(_write(tmp_path, [_row(), _row()]))


def test_wrong_columns_and_non_files_are_refused(tmp_path):
    """Missing columns are named; a directory or a named pipe is refused without being
    opened (a pipe would block a reader forever)."""
    path = tmp_path / "short.csv"
    pd.DataFrame([{"id": "a", "regime": "all_on_gpu"}]).to_csv(path, index=False)
    with pytest.raises(AnchorError, match=r"missing \[.*'decode_tok_s'"):
        published_decode_runs(path)
    with pytest.raises(AnchorError, match="not a regular file"):
        published_decode_runs(tmp_path)
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    with pytest.raises(AnchorError, match="not a regular file"):
        published_decode_runs(fifo)
    assert published_dir().name == "published"


def test_memory_bound_model_per_row_and_median_per_regime():
    """A modeled all-on-GPU row is the GPU part's datasheet bandwidth over the active
    weights' bytes (4090, gpt-oss-20b MXFP4: 1008 GB/s / (3.6e9 × 4.25 / 8)); rows the
    model cannot express say why; the per-regime median is over the modeled rows only."""
    from workbench.app.anchors import gpu_part, memory_bound_tok_s, modeled_vs_published, ratios_by_regime

    table = modeled_vs_published(model=memory_bound_tok_s).set_index("id")
    row = table.loc["lcpp16834_gptoss20b_4090"]
    assert row["modeled tok/s"] == pytest.approx(1008e9 / (3.6e9 * 4.25 / 8))
    assert row["ratio"] == pytest.approx(row["modeled tok/s"] / 186.10)
    unmodeled = table[table["modeled tok/s"].isna()]
    assert len(unmodeled) and (unmodeled["not modeled because"].str.len() > 0).all()
    by_regime = ratios_by_regime(table.reset_index()).set_index("regime")
    assert tuple(by_regime.index) == PUBLISHED_REGIMES
    gpu_rows = table[(table["regime"] == "all_on_gpu") & table["ratio"].notna()]
    assert by_regime.loc["all_on_gpu", "median ratio"] == pytest.approx(gpu_rows["ratio"].median())
    assert by_regime.loc["all_on_gpu", "modeled"] == len(gpu_rows)
    # parts are found by their names as written, never as a prefix of another part's name
    assert [gpu_part(g) for g in ("NVIDIA GeForce RTX 4090D", "NVIDIA L40S 48GB", "NVIDIA H200", "NVIDIA L4", "h200")] == [
        None, None, "h200", "l4", "h200"
    ]


def test_bandwidth_fraction_fit_and_its_leave_one_out_error():
    """Rows published at exactly 0.4 of the memory-bound speed fit 0.4 with no
    leave-one-out error; one off row shows up in its own error; fewer than 3 rows are refused."""
    from workbench.app.anchors import fit_bandwidth_fraction

    table = pd.DataFrame({"id": list("abcd"), "regime": "all_on_gpu", "modeled tok/s": [100.0, 200.0, 50.0, 80.0],
                          "published tok/s": [40.0, 80.0, 20.0, 80.0], "ratio": 0.0, "not modeled because": ""})
    exact = fit_bandwidth_fraction(table, ["a", "b", "c"])
    assert exact.value == pytest.approx(0.4) and max(exact.loo_errors) == pytest.approx(0.0)
    with_outlier = fit_bandwidth_fraction(table, ["a", "b", "c", "d"])
    assert with_outlier.loo_errors[3] == pytest.approx(0.6)  # predicted 0.4 × 80 = 32 against 80
    with pytest.raises(AnchorError, match="at least 3 modeled rows"):
        fit_bandwidth_fraction(table, ["a", "b"])


def test_a_table_larger_than_sixteen_mebibytes_is_refused_before_it_is_read(tmp_path):
    """Like every other table, the published table is read within a size limit."""
    path = _write(tmp_path, [_row()])
    with open(path, "a") as f:
        f.write("x" * (16 << 20))
    with pytest.raises(AnchorError, match="more than the 16777216 accepted"):
        published_decode_runs(path)


def test_a_source_is_its_publication():
    """Runs of one GitHub issue, pull request or discussion share a source, whatever
    anchor or commit their URL names; other pages are their host and path."""
    from workbench.speed.published_runs import source_key

    assert source_key("https://github.com/ikawrakow/ik_llama.cpp/discussions/258#discussioncomment-1") == "ikawrakow/ik_llama.cpp#258"
    assert source_key("https://github.com/ggml-org/llama.cpp/pull/16834") == "ggml-org/llama.cpp#16834"
    assert source_key("https://github.com/EfficientMoE/MoE-Infinity/blob/00181f/README.md") == "EfficientMoE/MoE-Infinity"
    assert source_key("https://example.org/posts/run?x=1") == "example.org/posts/run"

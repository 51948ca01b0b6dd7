"""Routing locality: statistics measured on traces, the published table, the fitted generator."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from workbench.errors import WorkbenchError
from workbench.models import MoEConfig, QwenMoEDecoder
from workbench.moe import RoutingTrace, record_decode, replay, synthetic_trace
from workbench.moe.locality import (
    LocalityError,
    locality_models,
    locality_trace,
    lru_hit_rate,
    measure_locality,
    model_locality,
    published_locality,
    published_vs_measured,
)

COLUMNS = "model,num_layers,num_experts,top_k,subset,layers,statistic,value,kind,source,quote\n"


def _table(tmp_path, *rows: str):
    path = tmp_path / "locality.csv"
    path.write_text(COLUMNS + "".join(r + "\n" for r in rows))
    return path


def test_hand_built_trace_statistics():
    """Each statistic counts exactly the pairs (or windows) its definition names, per layer:
    layer 0 repeats a first choice once in three pairs, shares an expert in two, reuses 3 of
    6 experts and 3 of 4 within two tokens; layer 1 repeats the same pair every token."""
    layer0 = [[0, 1], [1, 2], [3, 0], [3, 0]]
    layer1 = [[2, 3]] * 4
    trace = RoutingTrace(np.array([layer0, layer1]).transpose(1, 0, 2), 4, False, "hand-built")
    got = measure_locality(trace, window=2).set_index("layer")
    assert got.loc[0, "first_choice_repeat"] == pytest.approx(1 / 3)
    assert got.loc[0, "any_overlap"] == pytest.approx(2 / 3)
    assert got.loc[0, "reuse_rate"] == pytest.approx(3 / 6)
    assert got.loc[0, "reuse_within_2"] == pytest.approx(3 / 4)
    assert got.loc[0, "top_share"] == pytest.approx(3 / 8)
    assert got.loc[1, ["first_choice_repeat", "any_overlap", "reuse_rate", "reuse_within_2"]].tolist() == [1, 1, 1, 1]
    assert got.loc[1, "top_share"] == pytest.approx(0.5)
    assert got.loc[1, "norm_entropy"] == pytest.approx(0.5)  # two of four experts, evenly: ln 2 / ln 4


def test_independent_uniform_trace_measures_the_random_rates():
    """Tokens drawn independently and uniformly (8 experts, top-2) repeat a first choice
    1/8 of the time and share an expert 1 - (6/8)(5/7) of the time: the random baselines
    the published table is read against."""
    stats = measure_locality(synthetic_trace(20000, 2, 8, 2, zipf=0.0, seed=3)).mean()
    assert stats["first_choice_repeat"] == pytest.approx(1 / 8, abs=0.01)
    assert stats["any_overlap"] == pytest.approx(1 - 6 / 8 * 5 / 7, abs=0.01)


def test_shipped_table_has_sources_and_mixtral():
    """The shipped table checks out (rule 2), every row has a source and a quote, and
    Mixtral's Table 5 figures are there as published (layer 15 ArXiv: 27.9% and 62.3%)."""
    table = published_locality()
    assert "mixtral_8x7b" in locality_models()
    assert table["source"].str.startswith("https://").all() and (table["quote"].str.len() > 20).all()
    row = table[(table["subset"] == "ArXiv") & (table["layers"] == "15")].set_index("statistic")["value"]
    assert row["first_choice_repeat"] == pytest.approx(0.279) and row["any_overlap"] == pytest.approx(0.623)
    mixtral = model_locality("mixtral_8x7b")
    target = mixtral.target("any_overlap")
    assert target is not None and len(target) == 32
    assert target[15] == pytest.approx(np.mean([0.623, 0.670, 0.669, 0.631, 0.619, 0.616, 0.646, 0.621]))
    assert target[0] < target[7] < target[15]  # interpolated between named layers (rule 3)


def test_generator_reproduces_published_mixtral_within_tolerance():
    """A fixed seed's locality-matched Mixtral trace comes within 0.03 of every published
    figure it was fitted to, keeps popularity uniform, is the same on a second call, and
    gives LRU a hit rate between independent uniform routing's and full reuse's."""
    fit = locality_trace("mixtral_8x7b", 16384, seed=0)
    assert set(fit.comparison["layer"]) == {0, 15, 31}
    assert fit.max_abs_error <= 0.03, fit.comparison
    stats = measure_locality(fit.trace)
    assert stats["top_share"].max() < 0.14  # uniform popularity: 1/8 each, give or take noise
    assert fit.trace.synthetic and fit.trace.label.startswith("synthetic (locality of mixtral_8x7b")
    again = locality_trace("mixtral_8x7b", 16384, seed=0)
    assert np.array_equal(fit.trace.experts, again.trace.experts)
    uniform = synthetic_trace(16384, 32, 8, 2, zipf=0.0, seed=0)
    assert replay(fit.trace, "lru", 4, 1).hit_rate() > replay(uniform, "lru", 4, 1).hit_rate() + 0.02


def test_generator_fits_a_table_of_its_own_with_skewed_popularity(tmp_path):
    """A table given by path, with Zipf popularity and a reuse_rate target: the trace's
    reuse rate lands within 0.02 of the target in both layers and popularity is skewed."""
    path = _table(
        tmp_path,
        "toy,2,16,2,all,0-1,zipf_exponent,1.0,table,https://example.org/a,toy popularity",
        "toy,2,16,2,all,0,reuse_rate,0.5,table,https://example.org/a,toy reuse layer 0",
        "toy,2,16,2,all,1,reuse_rate,0.3,table,https://example.org/a,toy reuse layer 1",
    )
    fit = locality_trace(model_locality("toy", path=path), 8192, seed=1)
    measured = measure_locality(fit.trace)
    assert measured["reuse_rate"].tolist() == pytest.approx([0.5, 0.3], abs=0.02)
    assert (measured["top_share"] > 2 / 16).all()
    assert fit.reuse_rest[0] > fit.reuse_rest[1]


def test_recorded_trace_plugs_in():
    """A trace recorded from a real model run is measured like any other; comparing it with
    a model of another shape is refused, saying why."""
    model = QwenMoEDecoder(MoEConfig.tiny(), seed=0).eval()
    trace, _ = record_decode(model, 8)
    measured = measure_locality(trace, window=2)
    assert len(measured) == trace.num_layers
    assert measured[["first_choice_repeat", "any_overlap", "reuse_rate"]].to_numpy().min() >= 0
    with pytest.raises(LocalityError, match="layers"):
        published_vs_measured(trace, model_locality("mixtral_8x7b"))
    same_shape = synthetic_trace(64, 32, 8, 2, seed=0)
    table = published_vs_measured(same_shape, model_locality("mixtral_8x7b", subset="Github"))
    assert isinstance(table, pd.DataFrame) and len(table) == 6
    github15 = table[(table["layer"] == 15) & (table["statistic"] == "any_overlap")]
    assert github15["published"].item() == pytest.approx(0.669)


@pytest.mark.parametrize(
    "row, message",
    [
        ("m,32,8,2,all,0,any_overlap,1.5,table,https://x,q", "probability in"),
        ("m,32,8,2,all,0,any_overlap,-0.1,table,https://x,q", "probability in"),
        ("m,32,8,2,all,0,zipf_exponent,-1,table,https://x,q", "a number >= 0"),
        ("m,32,8,2,all,0,hit_rate,0.5,table,https://x,q", "statistic is none of"),
        ("m,32,8,2,all,40,any_overlap,0.5,table,https://x,q", "within"),
        ("m,32,8,2,all,0,any_overlap,0.5,table,,q", "source and a quote"),
        ("m,32,8,2,all,0,any_overlap,0.5,guess,https://x,q", "kind must be"),
    ],
)
def test_bad_tables_are_refused(tmp_path, row, message):
    """A value outside [0, 1] (or a negative exponent), an unknown statistic, a layer past
    the model's, a row without source, an unknown kind: refused, naming the row."""
    with pytest.raises(LocalityError, match=message) as info:
        published_locality(_table(tmp_path, row))
    assert "row 2" in str(info.value)


def test_bad_arguments_are_clear_errors():
    """Unknown models and subsets name the valid ones; too few tokens, a bad window, a
    one-token trace or a non-trace are refused; every error is a WorkbenchError."""
    with pytest.raises(LocalityError, match="mixtral_8x7b"):
        model_locality("gpt-9")
    with pytest.raises(LocalityError, match="no subset 'Reddit'.*ArXiv"):
        model_locality("mixtral_8x7b", subset="Reddit")
    with pytest.raises(LocalityError, match="tokens must be an integer >= 2"):
        locality_trace("mixtral_8x7b", 1)
    with pytest.raises(LocalityError, match="seed"):
        locality_trace("mixtral_8x7b", 16, seed=-1)
    trace = synthetic_trace(10, 1, 4, 1, seed=0)
    with pytest.raises(LocalityError, match="window must be an integer in \\[1, 9\\]"):
        measure_locality(trace, window=10)
    with pytest.raises(LocalityError, match="one token"):
        measure_locality(trace.head(1))
    with pytest.raises(LocalityError, match="RoutingTrace"):
        measure_locality(np.zeros((4, 1, 1)))  # type: ignore[arg-type]
    assert issubclass(LocalityError, WorkbenchError)


def _reference_lru(trace: RoutingTrace, slots: int) -> float:
    """A plain per-layer LRU over the request stream (token by token, router order)."""
    hits = total = 0
    for layer in range(trace.num_layers):
        cache: list[int] = []  # least recent first
        for t in range(trace.num_tokens):
            for e in trace.experts[t, layer]:
                total += 1
                if int(e) in cache:
                    hits += 1
                    cache.remove(int(e))
                elif slots and len(cache) >= slots:
                    cache.pop(0)
                if slots:
                    cache.append(int(e))
    return hits / total


def test_lru_hit_rate_matches_a_plain_lru_and_interpolates_fractional_sizes():
    """Whole sizes give exactly a plain per-layer LRU's hit rate on the request stream;
    a fractional size lies between its neighbours, weighted by nearness; more slots never
    hit less; the whole expert set misses only first requests."""
    trace = synthetic_trace(200, 3, 8, 2, zipf=0.8, reuse=0.4, seed=3)
    E = trace.num_experts
    rates = [lru_hit_rate(trace, s) for s in range(E + 1)]
    assert rates == pytest.approx([_reference_lru(trace, s) for s in range(E + 1)])
    assert all(a <= b + 1e-12 for a, b in zip(rates, rates[1:]))
    assert lru_hit_rate(trace, 1.25) == pytest.approx(0.75 * rates[1] + 0.25 * rates[2])
    firsts = sum(len(np.unique(trace.experts[:, layer])) for layer in range(trace.num_layers))
    assert rates[E] == pytest.approx(1 - firsts / trace.experts.size)


def test_lru_hit_rate_rises_with_published_reuse():
    """On a trace matching Mixtral's published reuse, an LRU of a token's worth of experts
    hits more often than on uniform independent routing of the same shape."""
    fit = locality_trace("mixtral_8x7b", 1024, seed=0, fit_tokens=2048)
    rng = np.random.default_rng(0)
    T, L, k = fit.trace.experts.shape
    uniform = RoutingTrace(np.argsort(rng.random((T, L, 8)), axis=2)[:, :, :k], 8, True, "synthetic uniform")
    assert lru_hit_rate(fit.trace, 2) > lru_hit_rate(uniform, 2) + 0.03


def test_lru_hit_rate_refuses_bad_arguments():
    """A size outside [0, E] or not a number, or a trace that is not a RoutingTrace, is a
    LocalityError (a WorkbenchError) saying what is valid."""
    trace = synthetic_trace(8, 2, 8, 2, seed=0)
    for bad in (-1, trace.num_experts + 1, "2", float("nan"), True):
        with pytest.raises(LocalityError, match=r"experts_per_layer must be a number in \[0, "):
            lru_hit_rate(trace, bad)
    with pytest.raises(LocalityError, match="RoutingTrace") as info:
        lru_hit_rate(trace.experts, 1)  # type: ignore[arg-type]
    assert isinstance(info.value, WorkbenchError)

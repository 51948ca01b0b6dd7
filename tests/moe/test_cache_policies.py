"""Expert-cache replay: invariants as hypothesis properties, checked against a plain
reference implementation of the policies."""

from collections import Counter, OrderedDict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.errors import WorkbenchError
from workbench.models import MoEConfig
from workbench.moe import POLICIES, CachePolicyError, RoutingTrace, replay, replay_all, slab_bytes, synthetic_trace
from workbench.moe.cache_policies import pinned_experts, replay_table


@st.composite
def traces(draw, max_tokens=24):
    """Small random traces: k distinct experts per token and layer."""
    E = draw(st.integers(1, 9))
    k = draw(st.integers(1, min(E, 4)))
    T = draw(st.integers(1, max_tokens))
    L = draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    # a small pool per layer makes repeats (hits) common
    ids = np.stack([[rng.permutation(E)[:k] for _ in range(L)] for _ in range(T)])
    return RoutingTrace(ids, E, True, "synthetic (test)")


def reference_lru(ids, slots):
    """LRU as usually written: an ordered dict, least recent first. A token's experts are
    used together: misses evict the least recent resident that the token does not use,
    then the token's experts become the most recent, in the router's order."""
    T, L, k = ids.shape
    hits = np.zeros((T, L), int)
    evictions = np.zeros((T, L), int)
    for layer in range(L):
        cache = OrderedDict()
        for t in range(T):
            wanted = [int(e) for e in ids[t, layer]]
            hits[t, layer] = sum(e in cache for e in wanted)
            for e in wanted:
                if e in cache:
                    continue
                if len(cache) == slots:
                    victim = next(x for x in cache if x not in wanted)
                    del cache[victim]
                    evictions[t, layer] += 1
                cache[e] = None
            for e in wanted:
                cache.move_to_end(e)
    return hits, evictions


def reference_lfu(ids, slots):
    """LFU over the full request history, ties broken by recency (t, then the router's order)."""
    T, L, k = ids.shape
    hits = np.zeros((T, L), int)
    evictions = np.zeros((T, L), int)
    for layer in range(L):
        key = {}  # resident expert -> (requests, t, j)
        requests = Counter()
        for t in range(T):
            wanted = [int(e) for e in ids[t, layer]]
            requests.update(wanted)
            hits[t, layer] = sum(e in key for e in wanted)
            for e in wanted:
                if e in key:
                    continue
                if len(key) == slots:
                    victim = min((x for x in key if x not in wanted), key=key.get)
                    del key[victim]
                    evictions[t, layer] += 1
                key[e] = None
            for j, e in enumerate(wanted):
                key[e] = (requests[e], t, j)
    return hits, evictions


def admitting_slots(trace, data):
    return data.draw(st.integers(trace.top_k, trace.num_experts))


@settings(max_examples=200, deadline=None)
@given(traces(), st.data(), st.sampled_from(["lru", "lfu"]))
def test_admitting_policies_match_reference(trace, data, policy):
    """LRU (against an ordered-dict LRU) and LFU (against a plain min-(count, recency) LFU):
    the same hits and evictions, token by token, layer by layer."""
    slots = admitting_slots(trace, data)
    got = replay(trace, policy, slots, 1)
    reference = reference_lru if policy == "lru" else reference_lfu
    hits, evictions = reference(trace.experts, slots)
    np.testing.assert_array_equal(got.hits, hits)
    np.testing.assert_array_equal(got.evictions, evictions)


@settings(max_examples=100, deadline=None)
@given(traces(), st.data(), st.sampled_from(["lru", "lfu"]))
def test_capacity_never_exceeded(trace, data, policy):
    """Residents (admitted minus evicted) never exceed the slots, and the cache fills up
    before it evicts: residents = min(slots, distinct experts requested so far)."""
    slots = admitting_slots(trace, data)
    r = replay(trace, policy, slots, 1)
    residents = np.cumsum(r.misses - r.evictions, axis=0)  # (T, L)
    assert (residents <= slots).all()
    for layer in range(trace.num_layers):
        seen = set()
        for t in range(trace.num_tokens):
            seen.update(int(e) for e in trace.experts[t, layer])
            assert residents[t, layer] == min(slots, len(seen))


@settings(max_examples=100, deadline=None)
@given(traces(), st.data(), st.sampled_from(POLICIES), st.integers(1, 1 << 20))
def test_hits_never_copy(trace, data, policy, slab):
    """Bytes moved are the misses' slabs only: a token whose experts all hit moves nothing,
    and hits + misses = k everywhere."""
    low = trace.top_k if policy != "static_hot" else 0
    slots = data.draw(st.integers(low, trace.num_experts))
    r = replay(trace, policy, slots, slab)
    assert ((r.hits + r.misses) == trace.top_k).all()
    np.testing.assert_array_equal(r.bytes_moved, r.misses.astype(np.int64) * slab)
    assert (r.bytes_moved[r.hits == trace.top_k] == 0).all()


@settings(max_examples=100, deadline=None)
@given(traces(), st.data())
def test_static_hot_never_evicts(trace, data):
    """static_hot evicts nothing, and a request hits exactly when its expert is among the
    slots most requested in its layer (the pinned set)."""
    slots = data.draw(st.integers(0, trace.num_experts))
    r = replay(trace, "static_hot", slots, 1)
    assert (r.evictions == 0).all()
    pinned = pinned_experts(trace.counts(), slots)
    for layer in range(trace.num_layers):
        hot = set(pinned[layer].tolist())
        want = [sum(int(e) in hot for e in trace.experts[t, layer]) for t in range(trace.num_tokens)]
        assert r.hits[:, layer].tolist() == want


@settings(max_examples=80, deadline=None)
@given(traces(), st.data())
def test_lru_inclusion(trace, data):
    """LRU is a stack algorithm: one more slot never turns a hit into a miss."""
    if trace.top_k == trace.num_experts:
        return
    slots = data.draw(st.integers(trace.top_k, trace.num_experts - 1))
    small, big = replay(trace, "lru", slots, 1), replay(trace, "lru", slots + 1, 1)
    assert (small.hits <= big.hits).all()


def test_replay_all_equals_single_replays():
    """Replaying policies together gives each policy's own replay."""
    trace = synthetic_trace(300, 3, 16, 2, zipf=0.8, reuse=0.4, seed=3)
    together = replay_all(trace, POLICIES, 5, 7)
    for r in together:
        alone = replay(trace, r.policy, 5, 7)
        np.testing.assert_array_equal(r.hits, alone.hits)
        np.testing.assert_array_equal(r.evictions, alone.evictions)


def test_host_compute_static_moves_no_slab():
    """static_hot with on_miss='host_compute' computes misses where the weights are: no
    slab crosses; lru with host_compute still admits (same bytes as copy)."""
    trace = synthetic_trace(50, 2, 8, 2, seed=1)
    assert replay(trace, "static_hot", 3, 10, on_miss="host_compute").bytes_moved.sum() == 0
    lru_copy = replay(trace, "lru", 3, 10)
    lru_host = replay(trace, "lru", 3, 10, on_miss="host_compute")
    np.testing.assert_array_equal(lru_copy.bytes_moved, lru_host.bytes_moved)


def test_summary_and_tables_carry_the_synthetic_label():
    """Tables built from a synthetic trace say so in every row."""
    trace = synthetic_trace(40, 2, 8, 2, seed=1)
    table = replay_table(replay_all(trace, POLICIES, 4, 10))
    assert table["synthetic"].all()
    assert table["trace"].str.startswith("synthetic").all()
    assert list(table["policy"]) == list(POLICIES)
    frame = replay(trace, "lru", 4, 10).to_dataframe()
    assert len(frame) == 40 * 2 and frame["bytes_moved"].sum() == replay(trace, "lru", 4, 10).bytes_moved.sum()


def test_slab_bytes_from_config():
    """A slab is w1 (2I×H) plus w2 (H×I) in the config's dtype: 6 MiB for the full bf16 model."""
    assert slab_bytes(MoEConfig.full()) == 3 * 2048 * 512 * 2 == 6 * 2**20
    tiny = MoEConfig.tiny()
    assert slab_bytes(tiny) == 3 * tiny.hidden_size * tiny.moe_intermediate_size * 4


@pytest.mark.parametrize(
    "policy, slots, on_miss, message",
    [
        ("fifo", 4, "copy", "unknown cache policy 'fifo'"),
        ("lru", 1, "copy", "at least k=2"),
        ("lfu", 9, "copy", "at most num_experts=8"),
        ("static_hot", -1, "copy", "at least 0"),
        ("lru", 4, "prefetch", "unknown on_miss 'prefetch'"),
        ("lru", 2.5, "copy", "must be an integer"),
    ],
)
def test_bad_settings_are_clear_errors(policy, slots, on_miss, message):
    """Unknown policies, too few or too many slots are WorkbenchErrors that say what is valid."""
    trace = synthetic_trace(10, 1, 8, 2, seed=0)
    with pytest.raises(CachePolicyError, match=message) as info:
        replay(trace, policy, slots, 1, on_miss=on_miss)
    assert isinstance(info.value, (WorkbenchError, ValueError))


def test_static_popularity_shape_checked():
    """A popularity table of the wrong shape is refused."""
    trace = synthetic_trace(10, 2, 8, 2, seed=0)
    with pytest.raises(CachePolicyError, match=r"shape \(layers, experts\) = \(2, 8\)"):
        replay(trace, "static_hot", 2, 1, popularity=np.ones((3, 8)))

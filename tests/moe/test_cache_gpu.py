"""Expert caches on a real GPU: admitting caches (the admit a copy-stream op), misses
computed on the host, and prefetches into the cache decode on the cuda backend as on sim.
Skipped without a GPU."""

import functools

import pandas as pd
import pytest

import workbench as wb
from workbench.models import MoEConfig, QwenMoEDecoder
from workbench.moe.decode import decode
from workbench.moe.strategies import expert_cache
from workbench.runtime import cuda_available, cuda_unavailable_reason

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_available(), reason=cuda_unavailable_reason())]

STEPS = 6


@functools.lru_cache(maxsize=None)
def _program(prefetch: bool):
    model = QwenMoEDecoder(MoEConfig.tiny(), expert_prefetch=prefetch).eval()
    return wb.capture(model, model.example_inputs())


@pytest.mark.parametrize(
    "policy, on_miss, prefetch",
    [
        ("lru", "copy", False),
        ("lfu", "copy", False),
        ("lru", "host_compute", False),
        ("static_hot", "host_compute", False),
        ("lfu", "copy", True),
        ("lru", "host_compute", True),
    ],
)
def test_cache_decodes_on_cuda_as_on_sim(policy, on_miss, prefetch):
    """On the cuda backend a cache decodes several steps with the eager logits, feeds the
    same tokens and hits exactly where it does on sim (same routing, same cache state);
    each admit is an event of the device's copy stream, ordered after the copies it reads."""
    config = MoEConfig.tiny()
    plan = wb.plan(expert_cache(3, policy, on_miss=on_miss, prefetch=prefetch).apply(_program(prefetch)), "greedy")
    results = {
        backend: decode(plan, STEPS, backend=backend, reference=QwenMoEDecoder(config, expert_prefetch=prefetch).eval())
        for backend in ("sim", "cuda")
    }
    cuda, sim = results["cuda"], results["sim"]
    assert cuda.matches_eager == (True,) * STEPS
    assert cuda.tokens == sim.tokens
    pd.testing.assert_frame_equal(cuda.hits, sim.hits)
    admits = [e for e in cuda.timeline if e.node.startswith("expert_cache_admit")]
    if policy == "static_hot":
        assert not admits
    else:
        assert admits and all(e.stream == "copy" and e.kind == "d2d" for e in admits)

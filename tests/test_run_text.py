"""The free text of a published run read once into facts: names found literally, settings
read from a run's own words, and hostile text read in bounded time."""

import time

import pytest

from workbench.speed import run_text
from workbench.speed.model_families import family_of, model_families
from workbench.speed.published_errors import AnchorError
from workbench.machine.runtime_profiles import profile_for


def test_a_name_is_found_literally_and_not_inside_another():
    """Phrases match whole words, the longest first, never a prefix of another part (a
    4090D is not a 4090, a 2080 Ti not a 2080), and several joined by ``+`` must all be
    there."""
    phrases = [("RTX 4090", "rtx_4090"), ("RTX 2080", "rtx_2080"), ("RTX 2080 Ti", "rtx_2080_ti"), ("H200", "h200")]
    assert run_text.find_name("NVIDIA GeForce RTX 4090 24GB", phrases) == "rtx_4090"
    assert run_text.find_name("NVIDIA GeForce RTX 4090D", phrases) is None
    assert run_text.find_name("RTX 2080 Ti 11GB", phrases) == "rtx_2080_ti"
    assert run_text.find_name("an RTX 2080 Super", phrases) is None
    assert run_text.find_name("h200 sxm", phrases) == "h200"
    both = [("ExecuTorch+per-kernel", "eager"), ("ExecuTorch+CUDA-graph", "graph"), ("ExecuTorch", "any")]
    assert run_text.find_name("ExecuTorch CUDA backend, per-kernel launches", both) == "eager"
    assert run_text.find_name("ExecuTorch CUDA backend, CUDA-graph replay", both) == "graph"
    assert run_text.find_name("ExecuTorch", both) == "any"


def test_profiles_and_families_are_found_by_their_names():
    """A runtime's text finds its profile (KTransformers over its SGLang half; stock and
    ik llama.cpp alike), a model's its family (Qwen3.6 shares Qwen3.5's architecture)."""
    assert profile_for("KTransformers kt-kernel + SGLang").name == "ktransformers"
    assert profile_for("ik_llama.cpp (sm120 build)").name == "ggml"
    assert profile_for("lucebox, per-kernel launches").name == "ggml_eager"
    assert profile_for("some engine nobody knows") is None
    assert family_of("Qwen3.6-35B-A3B", model_families()).name == "qwen3_5_moe_35b_a3b"
    assert family_of("Qwen3-30B-A3B-Instruct-2507", model_families()).name == "qwen3_moe_30b_a3b"
    assert family_of("GPT-2", model_families()) is None


def test_a_runs_settings_are_read_from_its_words():
    """Threads, NUMA sockets, host layers, GPU experts, stated hit rates, measured copy
    rates, staging, file sizes and storage tiers are read from the run's text; a negated
    NUMA build is not taken for one."""
    assert run_text.threads_text("-ngl 99 -t 16 -fa on") == 16
    assert run_text.threads_text("--kt-cpuinfer 96, --kt-threadpool-count 2") == 96
    assert run_text.sockets_text("--kt-cpuinfer 96, --kt-threadpool-count 2") == 2
    assert run_text.sockets_text("rebuilt with USE_NUMA=1") == run_text.ALL_SOCKETS
    assert run_text.sockets_text("built without USE_NUMA=1 ('未导入export USE_NUMA=1')") is None
    assert run_text.host_layers_text("--n-cpu-moe 14: routed experts of the first 14 layers")[0] == 14
    assert run_text.host_layers_text("-ncmoe N (N is in the post's command)")[0] is None
    assert run_text.host_layers_text("-mcl 43: the routed experts of the first 43 layers") == (43, "-mcl 43")
    assert run_text.host_layers_text("-dmcl 3 (the draft model's layers)")[0] is None
    assert run_text.gpu_experts_text("--kt-num-gpu-experts 100 (of 512)") == 100
    assert run_text.hit_rate_text("LRU pool; hit rate 88.7 %; tg256") == pytest.approx(0.887)
    assert run_text.copy_rate_text("stored pageable (CPU→GPU copy ~8 GB/s)") == 8e9
    assert run_text.copy_rate_text("residual PCIe ~4.7 GB/s averaged of the 25.6 GB/s the box reaches") == 25.6e9
    assert run_text.pageable_text("expert weights stored pageable on the CPU") is True
    assert run_text.pageable_text("a pinned host pool") is False
    assert run_text.stated_file_bytes("Q4_K_M (21 GB file)") == (21e9, "21 GB file")
    assert run_text.storage_text("experts streamed from NVMe") and not run_text.storage_text("host RAM")


@pytest.mark.parametrize("text", ["(a+)+$" + "a" * 40 + "!", "x" * 1999, "-t " * 600, "hit rate " * 200 + "%"])
def test_hostile_text_reads_in_bounded_time(text):
    """Patterns are fixed and linear, names are found literally (a name like ``(a+)+$`` is
    text, not a pattern), and a cell is cut at MAX_CELL_CHARS: hostile text is read at
    once."""
    started = time.perf_counter()
    run_text.find_name(text, [("(a+)+$", "evil"), ("aaaa", "a")])
    for reader in (run_text.threads_text, run_text.sockets_text, run_text.host_layers_text, run_text.hit_rate_text,
                   run_text.copy_rate_text, run_text.stated_file_bytes, run_text.cache_text):
        reader(text)
    assert time.perf_counter() - started < 1.0
    assert run_text.find_name("runtime (a+)+$ here", [("(a+)+$", "evil")]) == "evil"


def _facts(tmp_path, families):
    import json

    path = tmp_path / "facts.json"
    path.write_text(json.dumps({"families": families}))
    return path


GOOD = {"name": "m", "names": "Model-X", "layers": 4, "first_dense": 0, "num_experts": 8, "top_k": 2,
        "expert_params": 1000, "hidden": 64, "kv_bytes_per_token": 512, "files": [], "source": "its config"}  # fmt: skip


@pytest.mark.parametrize(
    "families, message",
    [
        ({"m": GOOD}, r"is not a model facts file"),
        ([GOOD | {"layers": -5}], r"layers must be a whole number in \[1, 10000\]"),
        ([GOOD | {"num_experts": 0}], r"num_experts must be a whole number in \[1"),
        ([GOOD | {"top_k": 1e9}], r"top_k must be a whole number in \[1, 100000\]"),
        ([GOOD | {"top_k": 9}], r"top_k <= num_experts"),
        ([GOOD | {"source": ""}], r"has no source"),
        ([GOOD | {"names": "a||b"}], r"names must be phrases"),
        ([GOOD | {"files": [{"format": "Q4_K_M", "bytes": -1, "params": 1, "source": "x"}]}], r"positive bytes"),
        (["not an object"], r"family 0 is not an object"),
    ],
)
def test_a_bad_model_facts_file_is_refused_by_family_and_field(tmp_path, families, message):
    """A facts file whose families are not a list of objects, or whose sizes no model has,
    is refused naming the family and the field (an AnchorError, never an AttributeError)."""
    with pytest.raises(AnchorError, match=message):
        model_families(_facts(tmp_path, families))
    assert model_families(_facts(tmp_path, [GOOD]))[0].moe_layers == 4


def test_a_tie_between_two_names_names_neither_whatever_their_order():
    """Two names whose phrases match equally many characters (and none more): the text is
    ambiguous and names neither, in either order of the phrases; a longer match still wins."""
    phrases = [("vllm+cuda", "a"), ("vllm+v0.9", "b")]
    for order in (phrases, phrases[::-1]):
        assert run_text.find_name("vLLM v0.9 on CUDA", order) is None
        assert run_text.find_name("vLLM v0.9 on CUDA 12", [*order, ("vllm+v0.9+cuda", "c")]) == "c"
    assert run_text.find_name("vLLM on CUDA", phrases) == "a"
    assert run_text.find_name("vLLM on CUDA", [("vllm+cuda", "a"), ("VLLM + CUDA", "a")]) == "a"  # one name, two spellings

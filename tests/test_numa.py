"""Host memory bandwidth on multi-socket hosts, by how an engine places its weights."""

import pytest

from workbench.machine.cost_model import CostModel
from workbench.machine.numa import numa_bandwidth
from workbench.machine.op_cost import CostModelError
from workbench.machine.parts import part_facts
from workbench.machine.runtime_profiles import RuntimeProfileError
from workbench.speed import run_text
from workbench.speed.regime_model import runtime_profile

HOST = "xeon_gold_6330_2s"  # two sockets joined by three UPI links: the link binds an interleaved read


def _host_bandwidth(numa, host=HOST, **settings):
    profile = runtime_profile("ktransformers").with_settings(numa=numa, **settings)
    return CostModel.compose(gpu="l40", host=host, link="pcie_gen4", runtime=profile).host_memory_bandwidth


def test_a_replicating_engine_on_two_sockets_beats_an_interleaving_one_which_beats_one_node():
    """Each socket reading its own node's copy reaches both nodes' bandwidth; pages
    interleaved over the nodes send half of every read over the socket link, which caps
    them below that; weights in one node's memory reach that node's alone."""
    per_node, interleave, local = (_host_bandwidth(p) for p in ("per_node", "interleave", "local"))
    assert per_node > interleave > local
    facts = part_facts("host", HOST)
    share = runtime_profile("ktransformers").values["host_bandwidth_fraction"]
    assert per_node == pytest.approx(share * facts["dram_peak_bandwidth"])
    assert interleave == pytest.approx(share * 4 * facts["cross_socket_bandwidth"])  # L·u·S/(S-1), S = u = 2
    assert local == pytest.approx(share * facts["dram_peak_bandwidth"] / 2)


def test_the_link_is_what_separates_interleaving_from_replicating():
    """With a link as fast as the memory, interleaving reads as fast as a copy per node; a
    slower link slows only the policies that cross it."""
    peak, fast, slow = 400e9, 1e12, 50e9
    assert numa_bandwidth(peak, 2, 2, "interleave", fast) == pytest.approx(numa_bandwidth(peak, 2, 2, "per_node", slow))
    assert numa_bandwidth(peak, 2, 2, "interleave", slow) == pytest.approx(4 * slow)
    assert numa_bandwidth(peak, 2, 2, "local", slow) == pytest.approx(2 * slow)  # the remote threads' reads cross it
    assert numa_bandwidth(peak, 2, 2, "per_node", slow) == pytest.approx(peak)


def test_one_socket_reads_the_same_whatever_the_policy():
    """On a one-socket host every policy reads that socket's memory, and a run's thread
    count over sockets it does not have changes nothing."""
    local, *others = (_host_bandwidth(p, host="epyc_9355", sockets=None) for p in ("local", "per_node", "interleave"))
    assert others == [pytest.approx(local)] * 2
    assert numa_bandwidth(300e9, 1, 4, "interleave", None) == pytest.approx(300e9)


def test_a_policy_that_crosses_an_unstated_link_is_refused_and_a_bad_policy_named():
    """A multi-socket host without cross_socket_bandwidth cannot time an interleaved read:
    the error names the figure to add; an unknown policy lists the valid ones."""
    with pytest.raises(CostModelError, match="cross_socket_bandwidth"):
        numa_bandwidth(400e9, 2, 2, "interleave", None)
    with pytest.raises(CostModelError, match="local, per_node, interleave"):
        numa_bandwidth(400e9, 2, 2, "spread", 1e11)
    with pytest.raises(RuntimeProfileError, match="numa must be one of"):
        runtime_profile("ktransformers").with_settings(numa="spread")


def test_a_runs_text_says_how_it_places_its_weights():
    """``numactl --interleave=all`` is an interleaved run; KTransformers' USE_NUMA=1 build or
    one thread pool per node reads per node; a run that says neither takes its runtime's."""
    assert run_text.numa_text("numactl --interleave=all ./llama-server ...") == "interleave"
    assert run_text.numa_text("rebuilt with USE_NUMA=1") == "per_node"
    assert run_text.numa_text("--kt-threadpool-count 2") == "per_node"
    assert run_text.numa_text("built without USE_NUMA=1") is None
    assert run_text.numa_text("--threads 32") is None

"""Hardware as parts: the shipped table, ``CostModel.compose`` and the presets built from it."""

import dataclasses

import pytest

from workbench.machine import CostModel
from workbench.machine.op_cost import CostModelError
from workbench.machine.parts import PART_FIELDS, part_figures, part_names, parts


def test_every_figure_has_a_source_and_every_part_all_its_fields():
    """Each row names a source; each part sets every field its kind sets; the issue's
    hardware is there (GPUs of published runs, hosts with cores and DRAM peak)."""
    table = parts()
    assert (table["source"].str.strip() != "").all()
    for kind, fields in PART_FIELDS.items():
        for name in part_names(kind):
            assert set(fields) <= set(part_figures(kind, name)), (kind, name)
    assert {"rtx_4090", "rtx_3090", "l4", "t4", "a100_80gb", "h100_sxm", "h200"} <= set(part_names("gpu"))
    hosts = table[table["kind"] == "host"]
    for name in ("epyc_9355", "epyc_9654_2s", "core_i3_8100"):
        row = hosts[(hosts["name"] == name) & (hosts["field"] != "names")].set_index("field")["value"].astype(float)
        # achievable DRAM rate is below the datasheet peak (channels x MT/s x 8 B)
        assert 0 < row["host_memory_bandwidth"] < row["dram_peak_bandwidth"] and row["cores"] >= 1


def test_compose_takes_each_figure_from_its_own_part():
    """GPU figures come from the gpu part, host from the host part, link from the link
    part, launch figures from the runtime part; the name lists the parts."""
    m = CostModel.compose(gpu="rtx_4090", host="epyc_9355", link="pcie_gen4", runtime="compiled_graph")
    assert m.device_memory_bandwidth == 1008e9 and m.device_flops_bf16 == 165.2e12
    assert m.host_memory_bandwidth == part_figures("host", "epyc_9355")["host_memory_bandwidth"]
    assert m.h2d_bandwidth == 25e9 and m.launch_mode == "graph"
    assert m.name == "rtx_4090+pcie_gen4+epyc_9355+compiled_graph"
    # the datasheet presets are the same parts with the compiled runtime
    preset = CostModel.preset("a100_80gb", link="pcie_gen4", host="laptop")
    composed = CostModel.compose(gpu="a100_80gb", link="pcie_gen4", host="laptop")
    assert dataclasses.replace(composed, name=preset.name) == preset


def test_the_measured_h200_is_a_part():
    """``measured:h200`` as every part gives the measured preset's figures; as the gpu
    alone it brings only the device figures."""
    measured = CostModel.preset("measured:h200")
    whole = CostModel.compose(gpu="measured:h200", host="measured:h200", link="measured:h200", runtime="measured:h200")
    assert dataclasses.replace(whole, name=measured.name) == measured
    gpu_only = CostModel.compose(gpu="measured:h200", link="pcie_gen5")
    assert gpu_only.device_memory_bandwidth == measured.device_memory_bandwidth
    assert gpu_only.h2d_bandwidth == 50e9 and gpu_only.launch_overhead == 3.8e-6


def test_unknown_parts_and_bad_tables_are_refused(tmp_path):
    """An unknown part lists the valid names; a table with a missing field, an unsourced
    figure or a non-number is refused naming the rows."""
    with pytest.raises(CostModelError, match="unknown gpu part 'rtx_9999'; valid: .*rtx_4090"):
        CostModel.compose(gpu="rtx_9999")
    with pytest.raises(CostModelError, match="no measured preset"):
        CostModel.compose(runtime="measured:nowhere")
    path = tmp_path / "parts.csv"
    path.write_text(
        "kind,name,field,value,source\n"
        "gpu,g,device_flops_fp32,fast,somewhere\n"
        "gpu,g,device_memory_bandwidth,1e12,\n"
        "cpu,h,host_flops,1e12,x\n"
    )
    with pytest.raises(CostModelError, match=r"not a finite number.*no source.*kind is none of.*lacks"):
        parts(path)


def _user_parts(tmp_path, rows):
    path = tmp_path / "my_parts.csv"
    path.write_text("kind,name,field,value,source\n" + "".join(f"{r}\n" for r in rows))
    return path


MY_GPU = [f"gpu,my_gpu,{f},{v},my datasheet" for f, v in (
    ("device_flops_fp64", "1e12"), ("device_flops_fp32", "40e12"), ("device_flops_bf16", "160e12"),
    ("device_flops_fp8", "320e12"), ("device_memory_bandwidth", "1.2e12"), ("memory_bytes", "48e9"),
    ("pcie_gen", "5"), ("pcie_lanes", "16"), ("names", "My Card 48"))]


def test_a_users_parts_file_adds_parts_and_replaces_same_named_ones(tmp_path):
    """A parts file passed by path adds its parts to the shipped ones for ``compose`` and
    the part readers, and a part it names like a shipped one replaces that part whole; the
    shipped table is unchanged without it."""
    from workbench.machine.parts import part_facts, part_phrases

    faster_h200 = [r.replace("my_gpu", "h200").replace("1.2e12", "9e12") for r in MY_GPU]
    path = _user_parts(tmp_path, MY_GPU + faster_h200)
    m = CostModel.compose(gpu="my_gpu", parts=path)
    assert m.device_memory_bandwidth == 1.2e12 and m.name.startswith("my_gpu+")
    assert part_facts("gpu", "my_gpu", path)["memory_bytes"] == 48e9
    assert ("My Card 48", "my_gpu") in part_phrases("gpu", path)
    assert CostModel.compose(gpu="h200", parts=path).device_memory_bandwidth == 9e12
    assert CostModel.compose(gpu="h200").device_memory_bandwidth == 4.8e12
    with pytest.raises(CostModelError, match="unknown gpu part 'my_gpu'"):
        CostModel.compose(gpu="my_gpu")


@pytest.mark.parametrize(
    "row, message",
    [
        ("gpu,my_gpu,device_memory_bandwidth,-1e12,x", r"device_memory_bandwidth must be > 0"),
        ("gpu,my_gpu,device_flops_bf16,0,x", r"device_flops_bf16 must be > 0"),
        ("link,my_link,pageable_factor,1.5,x", r"pageable_factor is a share in \(0, 1\]"),
        ("host,my_host,sockets,0.5,x", r"sockets is a whole number in \[1, 64\]"),
        ("host,my_host,cores,nan,x", r"not a finite number"),
        ("gpu,My GPU,memory_bytes,1e9,x", r"a part name is a plain name"),
        ("runtime,fast,overlap,2,x", r"overlap is a share in \[0, 1\]"),
    ],
)
def test_a_part_figure_out_of_its_range_is_refused_by_row(tmp_path, row, message):
    """Every figure is checked against its field's range when the table is read: a bad
    row is named with the field and what is valid."""
    good = [r for r in MY_GPU if r.split(",")[2] != row.split(",")[2]] if row.startswith("gpu,my_gpu") else []
    with pytest.raises(CostModelError, match=message):
        parts(_user_parts(tmp_path, good + [row]))


def test_an_edited_parts_file_is_read_again(tmp_path):
    """A read is keyed by the file's size and modification time: an edit is seen, and an
    edit that breaks the file is refused rather than served from a cache."""
    import os

    path = _user_parts(tmp_path, MY_GPU)
    assert CostModel.compose(gpu="my_gpu", parts=path).device_memory_bandwidth == 1.2e12
    path.write_text(path.read_text().replace("1.2e12", "2.5e12"))
    os.utime(path, ns=(1, 2))  # a different modification time, whatever the clock's resolution
    assert CostModel.compose(gpu="my_gpu", parts=path).device_memory_bandwidth == 2.5e12
    path.write_text(path.read_text().replace("2.5e12", "fast"))
    with pytest.raises(CostModelError, match="not a finite number"):
        CostModel.compose(gpu="my_gpu", parts=path)

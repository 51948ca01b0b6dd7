"""Parts files of test machines: a host with its RAM stated, and small GPUs."""

from pathlib import Path

HOST_ROWS = """host,test_host,host_flops,2.0e12,test figure
host,test_host,host_memory_bandwidth,2.0e11,test figure
host,test_host,host_op_overhead,2e-5,test figure
host,test_host,cores,16,test figure
host,test_host,sockets,1,test figure
host,test_host,memory_bytes,{ram},test figure
"""

GPU_ROWS = """gpu,{name},device_flops_fp64,1e12,test figure
gpu,{name},device_flops_fp32,8e13,test figure
gpu,{name},device_flops_bf16,1.6e14,test figure
gpu,{name},device_flops_fp8,3.2e14,test figure
gpu,{name},device_memory_bandwidth,1.0e12,test figure
gpu,{name},pcie_gen,4,test figure
gpu,{name},pcie_lanes,16,test figure
"""


def parts_file(folder: Path, *, ram_gib: float = 64, gpus: dict[str, float] | None = None) -> Path:
    """A parts file with ``test_host`` (``ram_gib`` of RAM) and GPUs ``{name: memory GiB}``."""
    text = "kind,name,field,value,source\n" + HOST_ROWS.format(ram=int(ram_gib * 2**30))
    for name, gib in (gpus or {}).items():
        text += GPU_ROWS.format(name=name) + f"gpu,{name},memory_bytes,{int(gib * 2**30)},test figure\n"
    path = folder / "parts.csv"
    path.write_text(text)
    return path

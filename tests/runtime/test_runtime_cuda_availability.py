"""CUDA availability: one clear answer, no noise, the right default backend."""

import subprocess
import sys

import pytest

from workbench.runtime import (
    CudaUnavailableError,
    cuda_available,
    cuda_unavailable_reason,
    default_backend,
    registry_for_backend,
)


@pytest.mark.slow
def test_probe_in_a_fresh_process_prints_nothing():
    """A first-time check (CuPy imported, runtime queried) writes nothing to stdout or stderr."""
    code = (
        "from workbench.runtime import cuda_available, cuda_unavailable_reason, default_backend\n"
        "cuda_available(); cuda_unavailable_reason(); default_backend()\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "" and result.stderr == ""


def test_probe_prints_nothing(capfd):
    """Running the probe again (runtime query included) and reading the cached answer are silent at the fd level."""
    from workbench.kernels.cuda import _probe

    _probe.cache_clear()
    first = (cuda_available(), cuda_unavailable_reason())
    assert (cuda_available(), cuda_unavailable_reason()) == first
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_reason_is_one_line_and_matches_availability():
    """Available means an empty reason; unavailable means one non-empty line that says CUDA is unavailable."""
    reason = cuda_unavailable_reason()
    if cuda_available():
        assert reason == ""
    else:
        assert reason.startswith("CUDA is unavailable: ") and "\n" not in reason and len(reason) > 25


def test_default_backend_follows_availability():
    """The default backend is 'cuda' exactly when CUDA is available, else 'sim'."""
    assert default_backend() == ("cuda" if cuda_available() else "sim")


def test_disable_variable_forces_the_simulator(monkeypatch):
    """WORKBENCH_DISABLE_CUDA=1 makes CUDA unavailable with that reason, and the cuda registry refuses."""
    monkeypatch.setenv("WORKBENCH_DISABLE_CUDA", "1")
    assert not cuda_available() and default_backend() == "sim"
    assert "WORKBENCH_DISABLE_CUDA" in cuda_unavailable_reason()
    with pytest.raises(CudaUnavailableError, match="needs a CUDA GPU"):
        registry_for_backend("cuda")


@pytest.mark.skipif(cuda_available(), reason="checks the refusal on a machine without CUDA")
def test_cuda_backend_refuses_with_the_reason_without_a_gpu():
    """Without a GPU, asking for the cuda registry raises the one-line reason."""
    with pytest.raises(CudaUnavailableError) as info:
        registry_for_backend("cuda")
    assert cuda_unavailable_reason() in str(info.value)

"""ExecuTorch programs in the workbench (optional dependency ``executorch``).

This package imports without ExecuTorch; its functions import it on first use and say
how to install it when it is missing.
"""

from .dependency import (
    INSTALL_HINT,
    SUPPORTED_VERSION,
    ExecuTorchNotInstalled,
    ExecuTorchWithoutDeviceSupport,
    executorch_api,
    executorch_available,
    installed_version,
    quiet_executorch,
)

__all__ = [
    "INSTALL_HINT",
    "SUPPORTED_VERSION",
    "ExecuTorchNotInstalled",
    "ExecuTorchWithoutDeviceSupport",
    "executorch_api",
    "executorch_available",
    "installed_version",
    "quiet_executorch",
]

"""Human-readable sizes and durations, shared by error messages, tables and views."""

from __future__ import annotations


def format_bytes(nbytes: int | float, digits: int = 1) -> str:
    """``4096`` → ``"4.0 KiB"``; below 1 KiB, whole bytes (``"512 B"``)."""
    value = float(nbytes)
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(value) >= scale:
            return f"{value / scale:.{digits}f} {unit}"
    return f"{int(value)} B"


def format_us(us: float) -> str:
    """Microseconds, shown as µs below 1 ms and as ms above."""
    if abs(us) >= 1000.0:
        return f"{us / 1000.0:.3f} ms"
    return f"{us:.3f} µs"

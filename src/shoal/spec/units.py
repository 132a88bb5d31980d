"""Quantities users write: memory (``4Gi``, ``4096m``), cpu (``2``, ``500m``), durations."""

from __future__ import annotations

import math
import re

# At most 30 digits: no memory size needs more, and float() of 400 digits is inf.
_MEMORY = re.compile(r"^\s*(\d{1,30}(?:\.\d{1,30})?)\s*([A-Za-z]*)\s*$")
_BINARY = {"": 1 << 20, "ki": 1 << 10, "mi": 1 << 20, "gi": 1 << 30, "ti": 1 << 40}
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_DURATION = re.compile(
    r"^\s*(?:(\d{1,12})d)?\s*(?:(\d{1,12})h)?\s*(?:(\d{1,12})m)?\s*(?:(\d{1,12})s)?\s*$"
)

MEMORY_HINT = "write MiB as an integer (4096) or a quantity such as 512Mi, 4Gi or 4G"
CPU_HINT = "write cores as a number (2, 0.5) or millicores as a string ('500m')"
DURATION_HINT = "write seconds as an integer (3600) or a duration such as 90s, 30m, 2h or 1d12h"


def shown(value: object) -> str:
    """A user's value for an error message, at most 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def memory_mib(value: object, *, lowercase_m_is_mib: bool = False) -> int:
    """Memory in MiB (rounded up). Plain numbers are MiB.

    ``lowercase_m_is_mib``: MARO's grass templates write ``4096m``, meaning 4096 MB as docker
    reads it (MiB); Kubernetes would read ``m`` as milli-bytes, which nobody means.
    """
    if isinstance(value, bool):
        raise ValueError("must be a memory size, got a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise ValueError(f"must be a whole number of MiB, got {value}")
        return int(value)
    if not isinstance(value, str):
        raise ValueError(f"must be a memory size, got {type(value).__name__}")
    match = _MEMORY.match(value)
    if not match:
        raise ValueError(f"must be a memory size, got {shown(value)}")
    number, unit = float(match.group(1)), match.group(2)
    if unit == "m" and lowercase_m_is_mib:
        return math.ceil(number)
    lowered = unit.lower()
    if lowered in _BINARY:
        scale = _BINARY[lowered]
    elif unit.endswith("B") and lowered[:-1] in ("k", "m", "g", "t"):  # "MB": decimal
        scale = _DECIMAL[lowered[:-1]]
    elif lowered in _DECIMAL and unit != "m":
        scale = _DECIMAL[lowered]
    else:
        raise ValueError(f"has an unknown memory unit {shown(unit)} in {shown(value)}")
    return math.ceil(number * scale / (1 << 20))


def cpu_millis(value: object) -> int:
    """CPU in millicores: ``2`` → 2000, ``0.5`` → 500, ``"250m"`` → 250."""
    if isinstance(value, bool):
        raise ValueError("must be a cpu amount, got a boolean")
    if isinstance(value, int):
        return value * 1000
    if isinstance(value, float):
        return _finite_millis(value, value)
    if isinstance(value, str):
        text = value.strip()
        if text.endswith("m") and text[:-1].isascii() and text[:-1].isdigit() and len(text) <= 31:
            return int(text[:-1])
        try:
            number = float(text)
        except ValueError:
            pass
        else:
            return _finite_millis(number, value)
    raise ValueError(f"must be a cpu amount, got {shown(value)}")


def _finite_millis(cores: float, value: object) -> int:
    """``inf``, ``nan`` and ``"1e400"`` (inf once read) are no amount of cores."""
    if not math.isfinite(cores):
        raise ValueError(f"must be a finite number of cores, got {shown(value)}")
    return round(cores * 1000)


def duration_seconds(value: object) -> int:
    if isinstance(value, bool):
        raise ValueError("must be a duration, got a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match and any(match.groups()):
            days, hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
            return ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    raise ValueError(f"must be a duration, got {shown(value)}")


def parse_duration(text: str, what: str = "duration") -> int:
    """Seconds from ``3600``, ``30d``, ``12h``, ``10m``, ``1d12h`` (the one parser for ``--since``
    and friends); ValueError naming ``what`` and the forms it takes."""
    value = text.strip()
    try:
        seconds = int(value) if value.isdigit() else duration_seconds(value)
    except ValueError:
        raise ValueError(f"{what} {text!r} is not a duration: {DURATION_HINT}") from None
    return seconds


def format_duration(seconds: int) -> str:
    """``7200`` as ``2h``, ``5400`` as ``1h30m``: what ``parse_duration`` reads back."""
    if seconds <= 0:
        return "0s"
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = zip((days, hours, minutes, secs), "dhms", strict=True)
    return "".join(f"{amount}{unit}" for amount, unit in parts if amount)


def format_memory(mib: int) -> str:
    if mib % 1024 == 0 and mib >= 1024:
        return f"{mib // 1024}Gi"
    return f"{mib}Mi"


def format_cpu(millis: int) -> str:
    if millis % 1000 == 0:
        return str(millis // 1000)
    return f"{millis}m"

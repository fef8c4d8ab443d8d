"""Environment fingerprint stored with every result and baseline (torch imported lazily)."""

from __future__ import annotations

import platform
import re
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

from pytest_gpuperf import __version__

#: Fingerprint fields whose change between baseline and now is reported next to the verdict.
COMPARED_KEYS = (
    "device_name",
    "compute_capability",
    "driver_version",
    "cuda_version",
    "torch_version",
    "python_version",
    "torch_num_threads",
)


@lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (Linux), else ``platform.processor()``, else ``unknown-cpu``."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown-cpu"


def fingerprint(device: Any) -> dict[str, Any]:
    """Describe where a measurement ran. ``device`` is a ``torch.device``.

    Keys: device_type, device_name (GPU name or CPU model), compute_capability ("9.0" or None),
    cpu_model, driver_version (NVML; None without it), cuda_version, torch_version,
    python_version, plugin_version, torch_num_threads, platform, ``cpu`` (governor, frequency,
    load average: :func:`pytest_gpuperf.measure.telemetry.cpu_info`) and ``gpu`` (NVML facts:
    :func:`pytest_gpuperf.measure.telemetry.gpu_info`, plus SM count and L2 size; None on CPU or without
    NVML). The plugin adds ``reference`` (machine-speed reference medians) when measuring.
    """
    import torch

    env: dict[str, Any] = {
        "device_type": device.type,
        "cpu_model": cpu_model(),
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "python_version": platform.python_version(),
        "plugin_version": __version__,
        "torch_num_threads": torch.get_num_threads(),
        "platform": f"{platform.system()}-{platform.machine()}",
        "driver_version": None,
        "compute_capability": None,
    }
    from pytest_gpuperf.measure.telemetry import cpu_info, gpu_info, handle_for

    env["cpu"] = cpu_info()
    env["gpu"] = None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env["device_name"] = props.name
        env["compute_capability"] = f"{props.major}.{props.minor}"
        gpu = gpu_info(handle_for(device.index or 0))
        if gpu is not None:
            env["driver_version"] = gpu.get("driver_version")
            gpu["sm_count"] = props.multi_processor_count
            gpu["l2_cache_bytes"] = getattr(props, "L2_cache_size", None)
        env["gpu"] = gpu
    else:
        env["device_name"] = env["cpu_model"]
    return env


def slug(text: str) -> str:
    """Lower-case ``text`` and keep letters, digits and single dashes: ``NVIDIA H100 80GB HBM3`` -> ``nvidia-h100-80gb-hbm3``."""
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return s or "unknown"


def device_key(env: dict[str, Any]) -> str:
    """Folder name of a device's baselines: ``cpu-<cpu model>`` or ``cuda-<gpu name>``."""
    return f"{env['device_type']}-{slug(str(env['device_name']))}"


def differences(baseline_env: dict[str, Any] | None, current_env: dict[str, Any]) -> list[str]:
    """Human-readable list of fingerprint fields that changed since the baseline (``torch_version 2.12.0 -> 2.13.0``)."""
    if not baseline_env:
        return []
    out = []
    for key in COMPARED_KEYS:
        old, new = baseline_env.get(key), current_env.get(key)
        if old != new and key in baseline_env:
            out.append(f"{key} {old} -> {new}")
    return out


def utc_now() -> str:
    """Current UTC time as ISO 8601 with a ``Z`` suffix, to the second."""
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")

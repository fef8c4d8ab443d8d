"""Environment fingerprint stored with every result and baseline (torch imported lazily)."""

from __future__ import annotations

import copy
import os
import platform
import re
import sys
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

from pytest_gpuperf import __version__
from pytest_gpuperf.core.allocator import describe as describe_allocator

#: Fingerprint fields whose change between baseline and now is reported next to the verdict.
COMPARED_KEYS = (
    "device_name",
    "compute_capability",
    "driver_version",
    "cuda_version",
    "torch_version",
    "python_version",
    "torch_num_threads",
    "allocator",
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


#: The keys of pytest-benchmark's ``machine_info["cpu"]`` kept here (py-cpuinfo's names and values;
#: its ``flags`` and cache sizes are left out: every baseline entry keeps its ``machine_info``).
PB_CPU_KEYS = ("python_version", "arch", "bits", "count", "arch_string_raw", "vendor_id_raw", "brand_raw",
               "hz_advertised_friendly", "hz_actual_friendly", "hz_advertised", "hz_actual")
#: ``platform.machine()`` -> py-cpuinfo's ``arch`` and ``bits``
_ARCHES = {"x86_64": ("X86_64", 64), "amd64": ("X86_64", 64), "i386": ("X86_32", 32), "i686": ("X86_32", 32),
           "x86": ("X86_32", 32), "aarch64": ("ARM_8", 64), "arm64": ("ARM_8", 64), "armv7l": ("ARM_7", 32),
           "ppc64le": ("PPC_64", 64), "ppc64": ("PPC_64", 64), "s390x": ("S390X", 64), "riscv64": ("RISCV_64", 64)}


def pb_cpu_info() -> dict[str, Any]:
    """pytest-benchmark's ``machine_info["cpu"]`` (:data:`PB_CPU_KEYS`): from ``/proc/cpuinfo`` and
    ``platform`` (:func:`cpu_info_from`); where there is no ``/proc/cpuinfo`` (macOS, Windows), from
    py-cpuinfo's ``get_cpu_info()`` where it is installed, as pytest-benchmark does. Not py-cpuinfo
    first: it starts a Python process of its own (``python -m cpuinfo --internal-cpuid``), in every
    worker process. Read once per process; a fresh copy each call (a conftest's hook changes it in
    place, e.g. ``info["cpu"].pop("hz_actual")``)."""
    return copy.deepcopy(_pb_cpu_info())


@lru_cache(maxsize=1)
def _pb_cpu_info() -> dict[str, Any]:
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        text = ""
    info = cpu_info_from(text, platform.machine(), os.cpu_count())
    if text:
        return info
    try:
        import cpuinfo  # py-cpuinfo (pytest-benchmark's dependency), where installed

        got = cpuinfo.get_cpu_info() or {}
    except Exception:  # noqa: BLE001 - not installed, or it failed on this machine: the fallback stands
        got = {}
    for key in PB_CPU_KEYS:
        value = got.get(key)
        if value is not None:
            info[key] = list(value) if isinstance(value, tuple) else value
    return info


def cpu_info_from(text: str, machine: str, count: int | None) -> dict[str, Any]:
    """:data:`PB_CPU_KEYS` as py-cpuinfo makes them, from the text of ``/proc/cpuinfo`` (its first
    processor), ``platform.machine()`` and the CPU count: ``hz_actual`` from ``cpu MHz``,
    ``hz_advertised`` from the brand's ``@ 2.60GHz`` (else the actual), each ``[hz, 0]`` with its
    ``*_friendly`` text (``"2.5961 GHz"``); ``[0, 0]`` where unknown."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip() and fields:
            break
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip().lower(), value.strip())
    brand = fields.get("model name") or fields.get("cpu model") or fields.get("hardware") or platform.processor()
    actual = _hz(fields.get("cpu mhz", ""), 6)
    advertised = re.search(r"(\d+(?:\.\d+)?)\s*([gm])hz", brand or "", re.IGNORECASE)
    advertised_hz = _hz(advertised.group(1), 9 if advertised.group(2).lower() == "g" else 6) if advertised else actual
    if actual == [0, 0]:
        actual = advertised_hz
    arch, bits = _ARCHES.get(machine.lower(), (None, None))
    return {"python_version": "{}.{}.{}.{}.{}".format(*sys.version_info) + f" ({64 if sys.maxsize > 2 ** 32 else 32} bit)",
            "arch": arch, "bits": bits, "count": count, "arch_string_raw": machine,
            "vendor_id_raw": fields.get("vendor_id", ""), "brand_raw": brand or "",
            "hz_advertised_friendly": _hz_friendly(advertised_hz), "hz_actual_friendly": _hz_friendly(actual),
            "hz_advertised": advertised_hz, "hz_actual": actual}


def _hz(ticks: str, scale: int) -> list[int]:
    """py-cpuinfo's ``[hz, fraction]`` of ``ticks`` in units of ``10**scale`` Hz (``"2596.134"``, 6
    -> ``[2596134000, 0]``); ``[0, 0]`` when ``ticks`` is no number."""
    from decimal import Decimal, InvalidOperation

    try:
        hz = Decimal(ticks.strip()).scaleb(scale)
    except (InvalidOperation, ValueError):
        return [0, 0]
    if not hz.is_finite() or hz <= 0:
        return [0, 0]
    whole = int(hz)
    fraction = format(hz - whole, "f").partition(".")[2].rstrip("0")
    return [whole, int(fraction or 0)]


def _hz_friendly(hz: list[int]) -> str:
    """py-cpuinfo's text of ``[hz, fraction]``: ``"2.5961 GHz"`` (4 decimals, the largest unit)."""
    digits = len(str(hz[0]))
    scale, symbol = next(((s, u) for s, u in ((9, "GHz"), (6, "MHz"), (3, "KHz")) if digits > s), (0, "Hz"))
    return f"{float(f'{hz[0]}.{hz[1]}') / 10 ** scale:.4f} {symbol}"


def fingerprint(device: Any) -> dict[str, Any]:
    """Describe where a measurement ran. ``device`` is a ``torch.device``.

    Keys: device_type, device_name (GPU name or CPU model), compute_capability ("9.0" or None),
    cpu_model, driver_version (NVML; None without it), cuda_version, torch_version,
    python_version, plugin_version, torch_num_threads, allocator (glibc's thresholds in this process's
    environment: :func:`pytest_gpuperf.core.allocator.describe`), platform, ``cpu`` (governor, frequency,
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
        "allocator": describe_allocator(),
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

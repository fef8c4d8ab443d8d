"""Drift guard for the simulated CUDA device (issue 22): every ``torch.cuda`` name the package (and
``benchmarks/gpu_validate.py``) uses is simulated, and each simulated function or class takes the
same parameters (names, kinds, defaults) as the installed torch's, so code that runs on the
simulator calls the real API correctly. Runs in both tox environments (torch 2.13 CPU and the
oldest torch CI installs).
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from pytest_gpuperf.testing import SimDeviceProperties, SimulatedCuda  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
#: Names used but deliberately real under the simulator: exception classes and the memory module itself.
REAL = {"OutOfMemoryError", "memory"}
#: Parameters the simulator takes beyond torch's (none) / torch's keyword-only extras it accepts by **kwargs.
SOURCES = sorted((ROOT / "pytest_gpuperf").rglob("*.py")) + [ROOT / "benchmarks" / "gpu_validate.py"]


def used_names() -> set[str]:
    """Every ``torch.cuda.X`` and ``torch.cuda.memory.X`` the package uses (dotted after torch.cuda)."""
    names: set[str] = set()
    for path in SOURCES:
        if path.name == "testing.py":
            continue
        for m in re.finditer(r"torch\.cuda\.([A-Za-z_]+)(?:\.([A-Za-z_]+))?", path.read_text()):
            names.add(f"memory.{m.group(2)}" if m.group(1) == "memory" and m.group(2) else m.group(1))
    return names


def _real(name: str):
    obj = torch.cuda
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def _params(obj) -> list[tuple[str, object, object]]:
    """(name, kind, default) of a callable's parameters, ``self``/``cls``/``obj`` left out; for a
    class, its ``__init__`` (or ``__new__`` when ``__init__`` is object's)."""
    if inspect.isclass(obj):
        candidates = [obj.__init__, obj.__new__]
    else:
        candidates = [obj]
    sig = None
    for target in candidates:
        try:
            sig = inspect.signature(target)
        except (ValueError, TypeError):  # a builtin without a signature (older torch's C++ classes)
            continue
        if target is object.__init__ or "args" in sig.parameters:
            sig = None
            continue
        break
    if sig is None:
        pytest.skip(f"{obj!r} of torch {torch.__version__} exposes no Python signature to compare")
    params = list(sig.parameters.values())
    return [(p.name, p.kind, p.default) for p in params if p.name not in ("self", "cls", "obj")]


def test_every_torch_cuda_name_the_package_uses_is_simulated():
    used = used_names()
    assert {"synchronize", "Event", "graph", "memory._snapshot"} <= used  # the scan finds them
    simulated = set(SimulatedCuda.API) | {f"memory.{n}" for n in SimulatedCuda.MEMORY_API}
    missing = sorted(used - simulated - REAL)
    assert not missing, f"used by the package but not simulated (add them to SimulatedCuda): {missing}"


@pytest.mark.parametrize("name", sorted(set(SimulatedCuda.API) | {f"memory.{n}" for n in SimulatedCuda.MEMORY_API}))
def test_simulated_signatures_match_the_installed_torch(name):
    try:
        real = _real(name)
    except AttributeError:
        pytest.skip(f"torch {torch.__version__} has no torch.cuda.{name}")
    sim = getattr(SimulatedCuda(), name.split(".")[-1])
    real_params = _params(real)
    sim_params = [(n, k, d) for n, k, d in _params(sim) if k is not inspect.Parameter.VAR_KEYWORD]
    # the simulator takes every parameter of torch's, with the same kind and default, in order;
    # keyword arguments of torch's it does not model are accepted by **kwargs
    named = [(n, k, d) for n, k, d in real_params if k is not inspect.Parameter.VAR_KEYWORD]
    modelled = named[:len(sim_params)]
    assert sim_params == modelled, f"torch.cuda.{name}: simulator {sim_params} != torch {modelled}"
    if len(named) > len(sim_params):
        assert any(k is inspect.Parameter.VAR_KEYWORD for _, k, _ in _params(sim)), \
            f"torch.cuda.{name} takes {named[len(sim_params):]} that the simulator neither models nor accepts"


#: Device-property fields the package reads with getattr and a fallback (absent from torch's stubs).
OPTIONAL_PROPERTIES = {"pci_bus_id", "pci_device_id", "pci_domain_id"}


def test_device_properties_fields_exist_in_torchs_type_stubs():
    # a CPU build has no torch._C._CudaDeviceProperties: read the fields from torch's type stubs
    stubs = (Path(torch.__file__).parent / "_C" / "__init__.pyi").read_text()
    body = stubs.split("class _CudaDeviceProperties:", 1)[1].split("\nclass ", 1)[0].split("\n# ", 1)[0]
    declared = set(re.findall(r"^\s+(\w+):", body, flags=re.MULTILINE))
    assert {"name", "total_memory", "multi_processor_count"} <= declared  # the stub was found and parsed
    fields = {f.name for f in dataclasses.fields(SimDeviceProperties)}
    missing = sorted(fields - declared - OPTIONAL_PROPERTIES)
    assert not missing, f"SimDeviceProperties fields not in torch's _CudaDeviceProperties stubs: {missing}"


#: NVML calls the package reaches through getattr with a fallback (an older nvidia-ml-py's name).
NVML_OPTIONAL = {"nvmlDeviceGetCurrentClocksThrottleReasons"}


def test_every_nvml_call_and_constant_is_simulated_like_pynvml():
    pynvml = pytest.importorskip("pynvml")
    from pytest_gpuperf.testing import SimulatedNVML

    text = (ROOT / "pytest_gpuperf" / "measure" / "telemetry.py").read_text()
    calls = set(re.findall(r"\b(nvml[A-Z][A-Za-z]+)\s*[(,)]", text)) - NVML_OPTIONAL  # called or passed
    assert {"nvmlInit", "nvmlDeviceGetHandleByUUID", "nvmlDeviceGetClockInfo"} <= calls
    missing = sorted(c for c in calls if not hasattr(SimulatedNVML, c))
    assert not missing, f"NVML calls the package makes that SimulatedNVML lacks: {missing}"
    for name in sorted(calls):
        if not hasattr(pynvml, name):
            continue  # not in this nvidia-ml-py: the package guards it
        real = [p for p in inspect.signature(getattr(pynvml, name)).parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        sim = [p for p in inspect.signature(getattr(SimulatedNVML, name)).parameters.values()
               if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "self"]
        assert len(sim) == len(real), f"{name}: pynvml takes {[p.name for p in real]}, the simulator {[p.name for p in sim]}"
    for const in set(re.findall(r"\bnv\.(NVML_[A-Z_]+)", text)):
        assert getattr(SimulatedNVML, const) == getattr(pynvml, const), const

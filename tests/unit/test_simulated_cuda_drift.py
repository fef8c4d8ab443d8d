"""Drift guard for the simulated CUDA device (issue 22): every ``torch.cuda`` name the package (and
``benchmarks/gpu_validate.py``) uses is simulated, and each simulated function or class takes the
same parameters (names, kinds, defaults) as the installed torch's, so code that runs on the
simulator calls the real API correctly. The same for the simulated nccl (issue 35): every
``torch.distributed`` function it replaces, ``torch.cuda.nccl.version``, ``torch.tensor`` and the
profiler's ``start``/``stop``. Runs in both tox environments (torch 2.13 CPU and the oldest torch CI
installs).
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from pytest_gpuperf.testing import SimDeviceProperties, SimulatedCuda, SimulatedNccl  # noqa: E402

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


def _params(obj, follow_wrapped: bool = True) -> list[tuple[str, object, object]]:
    """(name, kind, default) of a callable's parameters, ``self``/``cls``/``obj`` left out; for a
    class, its ``__init__`` (or ``__new__`` when ``__init__`` is object's). ``follow_wrapped``:
    a decorated function's (torch's logging decorators), not the simulator's wrapper's wrapped."""
    if inspect.isclass(obj):
        candidates = [obj.__init__, obj.__new__]
    else:
        candidates = [obj]
    sig = None
    for target in candidates:
        try:
            sig = inspect.signature(target, follow_wrapped=follow_wrapped)
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
    assert_same_parameters(getattr(SimulatedCuda(), name.split(".")[-1]), real, f"torch.cuda.{name}")


def assert_same_parameters(sim, real, label: str) -> None:
    """The simulator takes every parameter of torch's, with the same kind and default, in order;
    keyword arguments of torch's it does not model are accepted by ``**kwargs``."""
    real_params = _params(real)
    sim_params = [(n, k, d) for n, k, d in _params(sim, follow_wrapped=False) if k is not inspect.Parameter.VAR_KEYWORD]
    named = [(n, k, d) for n, k, d in real_params if k is not inspect.Parameter.VAR_KEYWORD]
    modelled = named[:len(sim_params)]
    assert sim_params == modelled, f"{label}: simulator {sim_params} != torch {modelled}"
    if len(named) > len(sim_params):
        assert any(k is inspect.Parameter.VAR_KEYWORD for _, k, _ in _params(sim, follow_wrapped=False)), \
            f"{label} takes {named[len(sim_params):]} that the simulator neither models nor accepts"


# ----------------------------------------------------------------------------- the simulated nccl (issue 35)

#: ``torch.distributed`` names the package uses that the simulated nccl leaves to torch (gloo
#: underneath): no tensor on the device, so no kernel to simulate (object collectives, barrier, the
#: group's life cycle and queries, types).
DIST_REAL = {"is_available", "is_initialized", "destroy_process_group", "barrier", "all_gather_object",
             "broadcast_object_list", "get_world_size", "get_rank", "group", "Backend", "ReduceOp", "HashStore",
             "TCPStore",
             # the fault handling's side groups (always gloo, also beside a real nccl default group) and
             # rank 0's answer to the roll call on them
             "new_group", "isend", "irecv"}


def test_every_torch_distributed_function_the_package_calls_on_a_device_is_simulated():
    used: set[str] = set()
    for path in SOURCES:
        if path.name != "testing.py":
            used |= set(re.findall(r"\bdist\.([A-Za-z_]+)", path.read_text()))
    assert {"init_process_group", "broadcast", "get_backend"} <= used  # the scan finds them
    missing = sorted(used - set(SimulatedNccl.API) - DIST_REAL)
    assert not missing, (f"torch.distributed names the package uses that the simulated nccl neither replaces "
                         f"(SimulatedNccl.API) nor leaves to gloo knowingly (DIST_REAL): {missing}")


@pytest.mark.parametrize("name", SimulatedNccl.API)
def test_simulated_distributed_signatures_match_the_installed_torch(name):
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available():
        pytest.skip("torch.distributed is not available in this torch build")
    real = {n: getattr(dist, n) for n in SimulatedNccl.API}
    assert_same_parameters(SimulatedNccl(SimulatedCuda()).functions(real)[name], real[name],
                           f"torch.distributed.{name}")


def test_simulated_nccl_version_and_profiler_hooks_match_the_installed_torch():
    import torch.cuda.nccl
    from torch.profiler import profile

    assert_same_parameters(SimulatedNccl(SimulatedCuda()).version, torch.cuda.nccl.version, "torch.cuda.nccl.version")
    for name in ("start", "stop"):  # wrapped by SimulatedCuda.install as f(prof)
        assert [p.name for p in inspect.signature(getattr(profile, name)).parameters.values()] == ["self"], name


def test_simulated_torch_tensor_takes_torchs_leading_parameters():
    # a builtin without a Python signature: its documented one, "tensor(data, *, dtype=None, device=None, ...)"
    line = torch.tensor.__doc__.strip().splitlines()[0]
    documented = [p.strip() for p in line[line.index("(") + 1:line.rindex(")")].split(",")]
    sim = inspect.signature(SimulatedCuda()._tensor_factory(torch.tensor), follow_wrapped=False)
    rendered: list[str] = []
    for p in sim.parameters.values():
        if p.kind is p.VAR_KEYWORD:
            continue
        if p.kind is p.KEYWORD_ONLY and "*" not in rendered:
            rendered.append("*")
        rendered.append(p.name if p.default is p.empty else f"{p.name}={p.default!r}")
    assert rendered == ["data", "*", "dtype=None", "device=None"]
    assert documented[:len(rendered)] == rendered, f"torch.tensor{documented} != simulator {rendered}"


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


@pytest.mark.parametrize("module, name, wrapper", [
    ("probe", "_build", "_probe_builder"), ("trace", "raw_events", "_raw_events"),
    ("profiling", "calibrate", "_calibrate"), ("communication", "_events", "_communication_events"),
    ("opprofile", "sample_from", "_sample_from")])
def test_the_package_functions_the_simulator_wraps_keep_their_parameters(module, name, wrapper):
    # SimulatedCuda.install replaces these with wrappers that call the package's own: a change of the
    # package's parameters must show here, not as a wrapper that drops an argument
    import importlib

    real = getattr(importlib.import_module(f"pytest_gpuperf.measure.{module}"), name)
    assert_same_parameters(getattr(SimulatedCuda(), wrapper)(real), real, f"pytest_gpuperf.measure.{module}.{name}")

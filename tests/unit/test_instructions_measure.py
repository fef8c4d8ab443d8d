"""Issue 48: the callgrind worker's command line and client requests, without valgrind."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_gpuperf.measure import instructions as I


def test_request_codes_are_callgrinds() -> None:
    # valgrind/callgrind.h: VG_USERREQ_TOOL_BASE('C','T') = 0x43540000, then DUMP_STATS, ZERO_STATS,
    # TOGGLE_COLLECT, DUMP_STATS_AT, START_INSTRUMENTATION, STOP_INSTRUMENTATION
    assert (I.DUMP_STATS, I.TOGGLE_COLLECT, I.DUMP_STATS_AT, I.START_INSTRUMENTATION) == (
        0x43540000, 0x43540002, 0x43540003, 0x43540004)


@pytest.mark.skipif(not I.ctypes_supported(), reason="the ctypes client requests are amd64 code (x86-64 Linux only)")
def test_client_requests_are_no_ops_outside_valgrind() -> None:
    count = I.counter("ctypes")
    assert count.backend == "ctypes" and not count.running_on_valgrind()
    count.start_instrumentation()
    count.toggle()
    count.toggle_and_dump("a name")  # natively: nothing happens, the default comes back
    assert count._requests is not None and count._requests.request(I.TOGGLE_COLLECT, default=7) == 7
    with pytest.raises(I.ValgrindUnavailable, match="not running under valgrind"):
        I.measure_many([("f", lambda: None)], number=2, warmup=0)


def test_measure_many_rejects_no_calls_and_unknown_backends() -> None:
    with pytest.raises(ValueError, match="number"):
        I.measure_many([], number=0)
    with pytest.raises(ValueError, match="backend"):
        I.counter("perf")


def test_measure_one_runs_warmup_and_number_and_toggles_off_after_an_error() -> None:
    calls: list[str] = []

    class Fake:
        def toggle(self) -> None:
            calls.append("on")

        def toggle_and_dump(self, name: str) -> None:
            calls.append(f"off+dump {name}")

    n = []
    I.measure_one(Fake(), "b", lambda: n.append(1), number=4, warmup=2)  # type: ignore[arg-type]
    assert len(n) == 6 and calls == ["on", "off+dump b"]

    def boom() -> None:
        raise RuntimeError("x")

    with pytest.raises(RuntimeError):
        I.measure_one(Fake(), "c", boom, number=3, warmup=0)  # type: ignore[arg-type]
    assert calls[-2:] == ["on", "off+dump c"]


def test_valgrind_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(I.shutil, "which", lambda name: "/usr/bin/valgrind")
    cmd, env = I.valgrind_command(["python", "w.py"], tmp_path, backend="ctypes")
    assert cmd[:2] == ["valgrind", "--tool=callgrind"] and cmd[-2:] == ["python", "w.py"]
    assert "--instr-atstart=no" in cmd and "--collect-atstart=no" in cmd
    assert f"--callgrind-out-file={tmp_path / 'callgrind.out.%p'}" in cmd
    assert env == {"PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                   "GLIBC_TUNABLES": "glibc.malloc.mxfast=0:glibc.malloc.tcache_count=0"}
    cmd, _ = I.valgrind_command(["python"], tmp_path, backend="torch")
    assert "--instr-atstart=yes" in cmd  # torch's requests cannot start instrumentation


def test_valgrind_missing_is_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(I.shutil, "which", lambda name: None)
    assert "not on PATH" in (I.valgrind_missing() or "")
    with pytest.raises(I.ValgrindUnavailable, match="not on PATH"):
        I.valgrind_command(["python"], tmp_path)
    monkeypatch.setattr(I.sys, "platform", "win32")
    assert "does not run on win32" in (I.valgrind_missing() or "")


def test_dump_files_in_dump_order(tmp_path: Path) -> None:
    for name in ["callgrind.out.7", "callgrind.out.7.10", "callgrind.out.7.2", "callgrind.out.7.1",
                 "callgrind.out.8.1", "timing.json"]:
        (tmp_path / name).write_text("")
    assert [p.name for p in I.dump_files(tmp_path, 7)] == ["callgrind.out.7.1", "callgrind.out.7.2",
                                                          "callgrind.out.7.10"]



class _FakeTorchC:
    """torch._C's valgrind requests as a fake records them (no torch imported)."""

    def __init__(self, supported: bool) -> None:
        self.supported, self.calls = supported, []

    def _valgrind_supported_platform(self) -> bool:
        return self.supported

    def _valgrind_toggle(self) -> None:
        self.calls.append("toggle")

    def _valgrind_toggle_and_dump_stats(self) -> None:
        self.calls.append("toggle+dump")


def test_auto_falls_back_to_torchs_requests_where_the_ctypes_ones_cannot_run(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    monkeypatch.setattr(I, "ctypes_supported", lambda: False)
    fake = types.ModuleType("torch")
    fake._C = _FakeTorchC(supported=True)  # type: ignore[attr-defined]
    monkeypatch.setitem(__import__("sys").modules, "torch", fake)
    count = I.counter("auto")
    assert count.backend == "torch" and count.running_on_valgrind()  # torch's requests cannot ask: assumed
    count.start_instrumentation()  # a no-op: the worker starts instrumented with this backend
    I.measure_one(count, "b", lambda: None, number=3, warmup=1)
    assert fake._C.calls == ["toggle", "toggle+dump"]  # type: ignore[attr-defined]
    if I.valgrind_missing() is None:  # instrumented from the start: torch's requests cannot start it
        assert "--instr-atstart=yes" in I.valgrind_command(["python", "w.py"], "/tmp/x", backend="auto")[0]
    fake._C = _FakeTorchC(supported=False)  # type: ignore[attr-defined]
    with pytest.raises(I.ValgrindUnavailable, match="_valgrind_supported_platform"):
        I.counter("auto")
    with pytest.raises(I.ValgrindUnavailable, match="x86-64 Linux"):
        I.counter("ctypes")


def test_the_worker_pins_torch_to_one_intra_op_thread_without_importing_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import types

    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert I.one_intra_op_thread() is False and "torch" not in sys.modules  # never imports torch
    fake = types.ModuleType("torch")
    threads: list[int] = []
    fake.set_num_threads = threads.append  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", fake)
    assert I.one_intra_op_thread() is True and threads == [1]

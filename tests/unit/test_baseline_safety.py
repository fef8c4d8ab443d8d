"""Safety of baseline files (issue 13): one-to-one file names, files of another module, schema
validation of loaded files, symbolic links, orphaned temporary files, per-user lock folders,
and ``gpuperf show | head``."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from pytest_gpuperf.core.files import STALE_TEMP_SECONDS, find_temp_files, is_temp_file_name, write_atomic
from pytest_gpuperf.storage import baseline as bl
from pytest_gpuperf.storage.baseline import (
    SCHEMA_VERSION,
    BaselineError,
    RemovingFileLock,
    baseline_path,
    check_module,
    json_path,
    load,
    lock_folder,
    lock_for,
    module_file_name,
    update,
)
from pytest_gpuperf.cli.reports import EXIT_BROKEN_PIPE, main

ROOT = Path(__file__).resolve().parents[2]
DEVICE_KEY = "cpu-test-device"
MODULE = "tests/perf/test_workloads.py"
posix_only = pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX users, modes and links")


def entry(bid: str, samples=(1.0, 1.1, 0.9, 1.05, 1.2, 0.95), **extra) -> dict:
    e = {
        "schema_version": SCHEMA_VERSION,
        "id": bid,
        "group": None,
        "device": "cpu",
        "stats": {"median_ms": 1.0, "mean_ms": 1.03, "p95_ms": 1.2, "iqr_ms": 0.1, "median_ci_ms": None},
        "samples_ms": list(samples),
        "rounds": len(samples),
        "calls_per_round": 1,
        "warmup_rounds": 2,
        "options": {"threshold": 0.05},
        "environment": {"python": "3.11"},
        "git_commit": "abc123",
        "timestamp_utc": "2025-01-01T00:00:00Z",
    }
    e.update(extra)
    return e


def file_data(module: str = MODULE, **benchmarks) -> dict:
    return {"schema_version": SCHEMA_VERSION, "device_key": DEVICE_KEY, "module": module,
            "benchmarks": benchmarks or {"a": entry("a")}}


def write_file(path: Path, data) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return path.read_bytes()


@pytest.fixture
def private_tmpdir(tmp_path, monkeypatch):
    """``tempfile.gettempdir()`` is a fresh folder: lock folders made by the test land there."""
    d = tmp_path / "systmp"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


# --------------------------------------------------------------------------------------------
# 1. one file name per module
# --------------------------------------------------------------------------------------------


def old_module_file_name(module_path: str) -> str:
    """The mapping before issue 13 (not one-to-one)."""
    p = module_path.replace("\\", "/")
    if p.endswith(".py"):
        p = p[:-3]
    return p.strip("/").replace("/", "__") + ".json"


def decode_file_name(name: str) -> str:
    """The inverse of module_file_name on ``.py`` modules (normalized): proves it one-to-one."""
    assert name.endswith(".json")
    stem, parts, i, current = name[:-5], [], 0, ""
    while i < len(stem):
        if stem[i] == "_":
            j = i
            while j < len(stem) and stem[j] == "_":
                j += 1
            run = j - i
            if run == 1:
                current += "_"
            else:
                assert run % 2 == 0, name  # separators only: no component has "_" at either end
                parts.append(current)
                parts.extend([""] * (run // 2 - 1))
                current = ""
            i = j
        else:
            current += stem[i]
            i += 1
    parts.append(current)
    decoded = [p.replace("%5F", "_").replace("%25", "%") if "%" in p else p for p in parts]
    return "/".join(decoded) + ".py"


def test_issue_example_gets_two_files():
    a, b = "tests/x/y/test_perf.py", "tests/x__y/test_perf.py"
    assert old_module_file_name(a) == old_module_file_name(b) == "tests__x__y__test_perf.json"  # the bug
    assert module_file_name(a) == "tests__x__y__test_perf.json"  # unchanged
    assert module_file_name(b) == "tests__x%5F%5Fy__test_perf.json"
    assert decode_file_name(module_file_name(a)) == a and decode_file_name(module_file_name(b)) == b


@pytest.mark.parametrize("module, expected", [
    ("tests/perf/test_models.py", "tests__perf__test_models.json"),
    ("tests\\perf\\test_win.py", "tests__perf__test_win.json"),
    ("/tests/perf/test_abs.py", "tests__perf__test_abs.json"),
    ("pkg/sub/test_noext", "pkg__sub__test_noext.json"),
    ("tests/test_a_b.py", "tests__test_a_b.json"),  # single inner underscores are ordinary
    ("tests/_private/test_x.py", "tests__%5Fprivate__test_x.json"),
    ("tests/perf_/test_x.py", "tests__perf%5F__test_x.json"),
    ("tests/100%/test_x.py", "tests__100%25__test_x.json"),
    ("tests/__init__.py", "tests__%5F%5Finit%5F%5F.json"),
])
def test_module_file_name_examples(module, expected):
    assert module_file_name(module) == expected


def _paths(alphabet: str, max_len: int):
    for n in range(max_len + 1):
        for t in itertools.product(alphabet, repeat=n):
            yield "".join(t)


@pytest.mark.parametrize("alphabet, max_len", [("a_/", 7), ("a_/%", 5)])
def test_module_file_name_is_one_to_one_on_small_paths(alphabet, max_len):
    """Every path over the alphabet up to max_len characters, plus ".py": two paths share a file
    name only when they are the same path once leading and trailing "/" are dropped (the
    mapping's documented normalization), and each name decodes back to its path."""
    by_name: dict[str, set[str]] = {}
    for p in _paths(alphabet, max_len):
        by_name.setdefault(module_file_name(p + ".py"), set()).add((p + ".py").strip("/"))
    collisions = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not collisions
    for name, (path,) in by_name.items():  # and the name decodes back to the path
        assert decode_file_name(name) == path


def test_ordinary_paths_keep_their_file_names():
    checked = 0
    for p in _paths("a_/", 7):
        parts = (p + ".py").strip("/")[:-3].split("/")
        if all(part and not bl._ambiguous_component(part) for part in parts):
            assert module_file_name(p + ".py") == old_module_file_name(p + ".py"), p
            checked += 1
    assert checked > 100
    # the committed baselines keep their names
    for f in (ROOT / "baselines").glob("*/*.json"):
        assert module_file_name(load(f).module) == f.name


def test_file_of_another_module_is_neither_compared_nor_written(tmp_path):
    ours, theirs = "tests/x/y/test_perf.py", "tests/x__y/test_perf.py"
    path = tmp_path / "dev" / "tests__x__y__test_perf.json"  # what the old mapping gave both
    before = write_file(path, file_data(module=theirs, a=entry("a")))
    loaded = load(path)  # loading alone is fine: the file is valid
    with pytest.raises(BaselineError) as exc:
        check_module(loaded, ours)
    msg = str(exc.value)
    assert repr(theirs) in msg and repr(ours) in msg and str(path) in msg
    assert "tests__x%5F%5Fy__test_perf.json" in msg  # where the file belongs now
    with pytest.raises(BaselineError) as exc:
        update(path, {"a": entry("a")}, device_key=DEVICE_KEY, module=ours)
    assert repr(theirs) in str(exc.value) and repr(ours) in str(exc.value)
    assert path.read_bytes() == before
    assert sorted(os.listdir(path.parent)) == [path.name]
    # the file's own module may update it; so may anyone a file without 'module'
    check_module(loaded, theirs)
    check_module(loaded, "tests\\x__y\\test_perf.py")  # the same module, Windows separators
    check_module(None, ours)
    no_module = tmp_path / "dev" / "plain.json"
    write_file(no_module, {**file_data(), "module": None})
    check_module(load(no_module), ours)
    update(path, {"b": entry("b")}, device_key=DEVICE_KEY, module=theirs)
    assert set(load(path).benchmarks) == {"a", "b"}


# --------------------------------------------------------------------------------------------
# 2. wrong-typed fields: schema validation with the JSON path of the bad field
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("field, value, fragment", [
    pytest.param("stats", None, "benchmarks['a'].stats: None is not of type 'object'", id="stats-null"),
    pytest.param("options", "x", "'options'", id="options-string"),  # the hand check's message
    pytest.param("peak_memory_bytes", "lots", "'peak_memory_bytes'", id="peak-string"),
    pytest.param("rounds", "5", "benchmarks['a'].rounds: '5' is not of type 'integer'", id="rounds-string"),
    pytest.param("rounds", 0, "benchmarks['a'].rounds: 0 is less than the minimum of 1", id="rounds-zero"),
    pytest.param("device", 0, "benchmarks['a'].device: 0 is not of type 'string'", id="device-number"),
    pytest.param("git_commit", ["x"], "benchmarks['a'].git_commit:", id="commit-list"),
    pytest.param("stats", {"median_ms": 1.0, "p95_ms": "slow"}, "benchmarks['a'].stats.p95_ms: 'slow'", id="p95"),
    pytest.param("history", [{"median_ms": 1.0, "iqr_ms": "x"}], "benchmarks['a'].history[0].iqr_ms: 'x'",
                 id="history-iqr"),
    pytest.param("bottleneck", {"kind": "magic", "evidence": {}}, "benchmarks['a'].bottleneck.kind: 'magic'",
                 id="bottleneck-kind"),
    pytest.param("samples_ms", [1.0] * 2001, "benchmarks['a'].samples_ms: [1.0, 1.0", id="too-many-samples"),
])
def test_wrong_typed_field_is_named_and_file_untouched(tmp_path, field, value, fragment):
    path = tmp_path / "dev" / "tests__perf__test_workloads.json"
    before = write_file(path, file_data(good=entry("good"), a=entry("a", **{field: value})))
    mtime = path.stat().st_mtime_ns
    with pytest.raises(BaselineError) as exc:
        load(path)
    assert fragment in exc.value.problem, exc.value.problem
    assert field in exc.value.problem and exc.value.path == str(path)
    assert len(exc.value.problem) < 400  # a long bad value is cut short
    with pytest.raises(BaselineError) as exc:
        update(path, {"good": entry("good")}, device_key=DEVICE_KEY, module=MODULE)
    assert fragment in exc.value.problem
    assert path.read_bytes() == before and path.stat().st_mtime_ns == mtime
    assert sorted(os.listdir(path.parent)) == [path.name]
    # gpuperf compare refuses it too, naming the field
    assert main(["compare", str(path), str(path)]) == 2


@pytest.mark.parametrize("field, value", [
    pytest.param("device_key", 3, id="device-key"),
    pytest.param("module", ["m"], id="module"),
])
def test_wrong_typed_top_level_field(tmp_path, field, value):
    path = tmp_path / "b.json"
    write_file(path, {**file_data(), field: value})
    with pytest.raises(BaselineError, match=re.escape(f"{field}: {value!r} is not of type")):
        load(path)


def test_json_path():
    assert json_path(["benchmarks", "test_a", "stats"]) == "benchmarks['test_a'].stats"
    assert json_path(["benchmarks", "m.py::t[1]", "history", 2, "iqr_ms"]) == "benchmarks['m.py::t[1]'].history[2].iqr_ms"
    assert json_path(["benchmarks", "a", "options", "odd key"]) == "benchmarks['a'].options['odd key']"
    assert json_path([]) == "(top level)"


def test_update_refuses_a_new_entry_that_would_not_load(tmp_path):
    path = tmp_path / "b.json"
    update(path, {"keep": entry("keep")}, device_key=DEVICE_KEY, module=MODULE)
    before = path.read_bytes()
    with pytest.raises(BaselineError, match=r"benchmarks\['bad'\]\.rounds"):
        update(path, {"bad": entry("bad", rounds="many")}, device_key=DEVICE_KEY, module=MODULE)
    assert path.read_bytes() == before


def test_files_the_plugin_writes_and_schema1_files_load():
    for f in (ROOT / "baselines").rglob("*.json"):
        assert load(f).benchmarks
    schema1 = file_data(a={k: v for k, v in entry("a", schema_version=1).items()})
    schema1["schema_version"] = 1
    assert bl.parse("s1.json", json.dumps(schema1)).get("a").run_medians_ms == (1.0,)
    # minimal hand-written entries (only samples) keep loading: 'required' is the writer's contract
    assert bl.parse("min.json", json.dumps(file_data(a={"samples_ms": [1.0, 2.0]}))).get("a")


def test_written_file_follows_the_full_schema(tmp_path):
    from pytest_gpuperf.storage.schema import validate

    path = tmp_path / "b.json"
    update(path, {"a": entry("a", peak_memory_bytes=1024, bottleneck=None, telemetry=None)},
           device_key=DEVICE_KEY, module=MODULE)
    validate(json.loads(path.read_text(encoding="utf-8")), "baseline")


def test_jsonschema_is_imported_only_when_a_file_is_loaded(tmp_path):
    path = tmp_path / "b.json"
    write_file(path, file_data())
    code = (
        "import sys\n"
        "import pytest_gpuperf.storage.baseline as bl, pytest_gpuperf.cli.reports\n"
        "assert 'jsonschema' not in sys.modules\n"
        f"bl.load({str(path)!r})\n"
        "assert 'jsonschema' in sys.modules\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_jsonschema_is_a_runtime_dependency():
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    deps = text.split("dependencies = [", 1)[1].split("]", 1)[0]
    assert '"jsonschema>=4"' in deps


# --------------------------------------------------------------------------------------------
# 3. symbolic links are written through
# --------------------------------------------------------------------------------------------


@posix_only
@pytest.mark.parametrize("relative", [False, True])
def test_update_writes_through_a_symlinked_file(tmp_path, relative):
    store = tmp_path / "store"
    target = store / "real.json"
    update(target, {"a": entry("a")}, device_key=DEVICE_KEY, module=MODULE)
    link = tmp_path / "bl" / "dev" / "tests__perf__test_workloads.json"
    link.parent.mkdir(parents=True)
    link.symlink_to(os.path.relpath(target, link.parent) if relative else target)
    update(link, {"b": entry("b")}, device_key=DEVICE_KEY, module=MODULE)
    assert link.is_symlink()
    assert link.resolve() == target.resolve()
    assert set(load(target).benchmarks) == {"a", "b"}
    assert sorted(os.listdir(link.parent)) == [link.name]  # no temp file next to the link
    assert sorted(os.listdir(store)) == ["real.json"]


@posix_only
def test_write_atomic_through_link_chain_dangling_link_and_linked_folder(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "second").symlink_to(real / "final.json")
    first = tmp_path / "first"
    first.symlink_to(tmp_path / "second")
    write_atomic(first, "one\n")  # dangling chain: the final target is created
    assert first.is_symlink() and (tmp_path / "second").is_symlink()
    assert (real / "final.json").read_text() == "one\n"
    write_atomic(first, "two\n")
    assert (real / "final.json").read_text() == "two\n" and first.is_symlink()
    linked = tmp_path / "linked"
    linked.symlink_to(real, target_is_directory=True)
    write_atomic(linked / "final.json", "three\n")
    assert linked.is_symlink() and (real / "final.json").read_text() == "three\n"
    assert sorted(os.listdir(real)) == ["final.json"]


@posix_only
def test_write_through_link_keeps_the_target_mode(tmp_path):
    target = tmp_path / "t.json"
    target.write_text("x")
    os.chmod(target, 0o640)
    link = tmp_path / "l.json"
    link.symlink_to(target)
    write_atomic(link, "y")
    assert target.stat().st_mode & 0o777 == 0o640 and target.read_text() == "y"


# --------------------------------------------------------------------------------------------
# 4. orphaned temporary files
# --------------------------------------------------------------------------------------------


def _age(path: Path, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_write_removes_stale_temp_files_of_the_same_target_only(tmp_path):
    path = tmp_path / "b.json"
    write_atomic(path, "old\n")
    stale = tmp_path / ".b.json.abc_1234.tmp"
    fresh = tmp_path / ".b.json.zzzz9999.tmp"
    other = tmp_path / ".c.json.abcd1234.tmp"  # another target's orphan
    lookalike = tmp_path / ".b.json.x.tmp"  # not a name mkstemp makes
    for f in (stale, fresh, other, lookalike):
        f.write_text("partial")
    for f in (stale, other, lookalike):
        _age(f, STALE_TEMP_SECONDS + 60)
    _age(fresh, STALE_TEMP_SECONDS - 60)  # young: a concurrent writer may own it
    write_atomic(path, "new\n")
    assert path.read_text() == "new\n"
    assert not stale.exists()
    assert fresh.exists() and other.exists() and lookalike.exists()


def test_update_removes_stale_temp_files(tmp_path):
    path = tmp_path / "dev" / "b.json"
    update(path, {"a": entry("a")}, device_key=DEVICE_KEY, module=MODULE)
    stale = path.parent / ".b.json.k3j4h5g6.tmp"
    stale.write_text("{")
    _age(stale, 2 * STALE_TEMP_SECONDS)
    update(path, {"b": entry("b")}, device_key=DEVICE_KEY, module=MODULE)
    assert sorted(os.listdir(path.parent)) == ["b.json"]


def test_temp_file_names(tmp_path):
    assert is_temp_file_name(".b.json.abcd_123.tmp")
    assert is_temp_file_name(".b.json.abcd_123.tmp", "b.json")
    assert not is_temp_file_name(".b.json.abcd_123.tmp", "c.json")
    assert not is_temp_file_name(".x.b.json.abcd_123.tmp", "b.json")
    assert not is_temp_file_name("b.json")
    assert not is_temp_file_name(".b.json.ABCD1234.tmp")
    # what write_atomic really makes matches
    fd, tmp = tempfile.mkstemp(prefix=".b.json.", suffix=".tmp", dir=tmp_path)
    os.close(fd)
    name = Path(tmp).name
    assert is_temp_file_name(name, "b.json")


def test_show_lists_temp_files(tmp_path, capsys):
    root = tmp_path / "bl"
    path = baseline_path(root, DEVICE_KEY, MODULE)
    update(path, {"a": entry("a")}, device_key=DEVICE_KEY, module=MODULE)
    stale = path.parent / f".{path.name}.abcd1234.tmp"
    stale.write_bytes(b"x" * 2048)
    _age(stale, 3 * 3600)
    fresh = path.parent / f".{path.name}.efgh5678.tmp"
    fresh.write_text("{")
    assert [(p, s) for p, s, _ in find_temp_files(root)] == [(stale, 2048), (fresh, 1)]
    assert main(["show", str(root)]) == 0
    out = capsys.readouterr().out
    assert f"stale temporary file {stale} (2.00 KiB, 3 h old): safe to delete" in out
    assert f"temporary file {fresh} (1 B, " in out and "a write may be in progress" in out
    assert f"stale temporary file {fresh}" not in out
    # also when no baseline file is left
    path.unlink()
    assert main(["show", str(root)]) == 0
    out = capsys.readouterr().out
    assert "no baseline files" in out and f"stale temporary file {stale}" in out


def test_show_notes_a_file_named_by_the_old_mapping(tmp_path, capsys):
    root = tmp_path / "bl"
    module = "tests/x__y/test_perf.py"
    write_file(root / DEVICE_KEY / "tests__x__y__test_perf.json", file_data(module=module))
    assert main(["show", str(root)]) == 0
    out = capsys.readouterr().out
    assert "tests__x%5F%5Fy__test_perf.json" in out and "rename it" in out


# --------------------------------------------------------------------------------------------
# 5. gpuperf show | head
# --------------------------------------------------------------------------------------------


class _ClosedPipe:
    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def test_broken_pipe_in_process_returns_quietly(tmp_path, monkeypatch, capsys):
    write_file(tmp_path / "bl" / DEVICE_KEY / "m.json", file_data())
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())  # no fileno: nothing to redirect
    assert main(["show", str(tmp_path / "bl")]) == EXIT_BROKEN_PIPE
    monkeypatch.undo()
    assert capsys.readouterr().err == ""


# --------------------------------------------------------------------------------------------
# 6. per-user lock folder; lock files removed
# --------------------------------------------------------------------------------------------


@posix_only
def test_lock_folder_is_private_to_the_user(private_tmpdir):
    old = os.umask(0o022)
    try:
        folder = lock_folder()
    finally:
        os.umask(old)
    assert folder == private_tmpdir / f"gpuperf-locks-{os.getuid()}"
    st = folder.stat()
    assert st.st_mode & 0o777 == 0o700 and st.st_uid == os.getuid()
    assert lock_folder() == folder


@posix_only
def test_lock_folder_made_too_open_is_tightened(private_tmpdir):
    folder = private_tmpdir / f"gpuperf-locks-{os.getuid()}"
    folder.mkdir()
    os.chmod(folder, 0o777)
    assert lock_folder() == folder
    assert folder.stat().st_mode & 0o777 == 0o700


@posix_only
def test_planted_link_or_foreign_folder_is_refused(private_tmpdir, tmp_path):
    folder = private_tmpdir / f"gpuperf-locks-{os.getuid()}"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    folder.symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(PermissionError, match="not a folder owned by this user"):
        lock_folder()
    folder.unlink()
    if os.getuid() != 0:
        return  # only root can make a folder owned by another user
    folder.mkdir(mode=0o700)
    os.chown(folder, 65534, 65534)
    with pytest.raises(PermissionError, match="not a folder owned by this user"):
        lock_folder()


@posix_only
def test_shared_folder_of_the_old_version_does_not_matter(private_tmpdir, tmp_path):
    shared = private_tmpdir / "gpuperf-locks"  # made by another user, 0755: not writable for us
    shared.mkdir()
    os.chmod(shared, 0o555)
    path = tmp_path / "b.json"
    update(path, {"a": entry("a")}, device_key=DEVICE_KEY, module=MODULE)
    assert load(path).get("a") is not None
    assert list(shared.iterdir()) == []


def test_update_leaves_no_lock_files(private_tmpdir, tmp_path):
    for i in range(3):
        update(tmp_path / f"b{i}.json", {"a": entry("a")}, device_key=DEVICE_KEY, module=MODULE)
        update(tmp_path / f"b{i}.json", {"b": entry("b")}, device_key=DEVICE_KEY, module=MODULE)
    (folder,) = private_tmpdir.iterdir()
    assert folder.name.startswith("gpuperf-locks-")
    assert list(folder.iterdir()) == []


def test_update_that_fails_leaves_no_lock_file(private_tmpdir, tmp_path):
    path = tmp_path / "b.json"
    path.write_text("{broken")
    with pytest.raises(BaselineError):
        update(path, {"a": entry("a")}, device_key=DEVICE_KEY, module=MODULE)
    (folder,) = private_tmpdir.iterdir()
    assert list(folder.iterdir()) == []


@posix_only
def test_lock_for_the_same_file_through_a_link_is_the_same_lock(private_tmpdir, tmp_path):
    target = tmp_path / "t.json"
    target.write_text("{}")
    link = tmp_path / "l.json"
    link.symlink_to(target)
    assert lock_for(link).lock_file == lock_for(target).lock_file


@posix_only
def test_removing_lock_excludes_and_waiter_rechecks(tmp_path):
    """A waiter that opened the lock file before the holder removed it must not hold a lock on the
    removed file: it starts over, and the lock it ends with is the file at the path."""
    lock_file = tmp_path / "x.lock"
    a = RemovingFileLock(lock_file, timeout=30)
    b = RemovingFileLock(lock_file, timeout=30)
    a.acquire()
    opened = threading.Event()
    real_open = os.open

    def open_and_signal(*args, **kwargs):
        fd = real_open(*args, **kwargs)
        if threading.current_thread() is waiter:
            opened.set()
        return fd

    errors = []

    def run_b():
        try:
            b.acquire()
        except BaseException as exc:  # pragma: no cover
            errors.append(exc)

    waiter = threading.Thread(target=run_b)
    try:
        os.open = open_and_signal
        waiter.start()
        assert opened.wait(10)  # b has opened a's file and polls its flock
    finally:
        os.open = real_open
    a.release()  # removes the file b has open, then unlocks it
    waiter.join(30)
    assert not errors and b.is_locked
    assert os.path.samestat(os.fstat(b._fd), os.lstat(lock_file))  # b holds the file at the path
    with pytest.raises(TimeoutError):
        RemovingFileLock(lock_file, timeout=0.1).acquire()  # so a newcomer is excluded
    b.release()
    assert not lock_file.exists()
    c = RemovingFileLock(lock_file, timeout=1)
    with c:
        assert c.is_locked and lock_file.exists()
    assert not lock_file.exists()


COUNTER = """
import sys
from pathlib import Path
from pytest_gpuperf.storage.baseline import RemovingFileLock

lock_file, counter, n = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
for _ in range(n):
    with RemovingFileLock(lock_file, timeout=60, poll_s=0.001):
        value = int(counter.read_text())
        counter.write_text(str(value + 1))
"""


@posix_only
def test_removing_lock_serializes_processes(tmp_path):
    """Processes that increment a counter under the lock (read, then write) lose no increment,
    although the lock file is removed and re-created at every release."""
    counter = tmp_path / "counter"
    counter.write_text("0")
    procs = [subprocess.Popen([sys.executable, "-c", COUNTER, str(tmp_path / "c.lock"), str(counter), "150"])
             for _ in range(4)]
    assert [p.wait(120) for p in procs] == [0] * 4
    assert counter.read_text() == "600"
    assert not (tmp_path / "c.lock").exists()

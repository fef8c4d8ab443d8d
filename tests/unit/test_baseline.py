"""Unit tests for pytest_gpuperf.storage.baseline: paths, schema validation, atomic read-merge-write."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from pytest_gpuperf.storage import baseline as bl
from pytest_gpuperf.storage.baseline import (
    SCHEMA_VERSION,
    BaselineEntry,
    BaselineError,
    BaselineFile,
    RunRecord,
    baseline_path,
    dumps,
    load,
    module_file_name,
    parse,
    update,
    write_atomic,
)

DEVICE_KEY = "cpu-test-device"
MODULE = "tests/perf/test_workloads.py"


def entry(bid: str, samples=(1.0, 1.1, 0.9, 1.05, 1.2, 0.95), **extra) -> dict:
    e = {
        "schema_version": SCHEMA_VERSION,
        "id": bid,
        "group": None,
        "device": "cpu",
        "stats": {"median_ms": 1.0, "median_ci_ms": None},
        "samples_ms": list(samples),
        "rounds": len(samples),
        "calls_per_round": 1,
        "warmup_rounds": 2,
        "options": {"threshold": 0.05},
        "environment": {"python": "3.11", "gpu": "Ω-accelerator"},
        "git_commit": "abc123",
        "timestamp_utc": "2025-01-01T00:00:00Z",
    }
    e.update(extra)
    return e


def stored(e: dict, *runs: dict) -> dict:
    """What ``update`` stores for the new entry ``e``: ``e`` itself (every field preserved) plus a
    ``history`` of the earlier ``runs`` (entries, oldest first) and ``e``'s own run, appended last."""
    return {**e, "schema_version": SCHEMA_VERSION, "history": [bl.run_record(r) for r in (*runs, e)]}


def write_file(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")


def valid_file_data(**benchmarks) -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "device_key": DEVICE_KEY,
        "module": MODULE,
        "benchmarks": benchmarks or {"a": entry("a")},
    }


# --------------------------------------------------------------------------------------------
# paths
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "module, expected",
    [
        ("tests/perf/test_models.py", "tests__perf__test_models.json"),
        ("test_top.py", "test_top.json"),
        ("tests\\perf\\test_win.py", "tests__perf__test_win.json"),
        ("/tests/perf/test_abs.py", "tests__perf__test_abs.json"),
        ("pkg/sub/test_noext", "pkg__sub__test_noext.json"),
    ],
)
def test_module_file_name(module, expected):
    assert module_file_name(module) == expected


def test_baseline_path(tmp_path):
    p = baseline_path(tmp_path / "baselines", "cuda-nvidia-h100", "tests/perf/test_models.py")
    assert isinstance(p, Path)
    assert p == tmp_path / "baselines" / "cuda-nvidia-h100" / "tests__perf__test_models.json"
    assert baseline_path("baselines", "cpu-x", "t.py") == Path("baselines/cpu-x/t.json")


# --------------------------------------------------------------------------------------------
# round trip and file layout
# --------------------------------------------------------------------------------------------


def test_update_then_load_round_trips(tmp_path):
    path = baseline_path(tmp_path / "bl", DEVICE_KEY, MODULE)
    entries = {"m.py::test_a": entry("m.py::test_a"), "m.py::test_b[2]": entry("m.py::test_b[2]", samples=(3.0, 4.0))}
    update(path, entries, device_key=DEVICE_KEY, module=MODULE)  # creates missing folders
    assert path.is_file()

    loaded = load(path)
    assert isinstance(loaded, BaselineFile)
    assert loaded.path == str(path)
    assert loaded.device_key == DEVICE_KEY
    assert loaded.module == MODULE
    assert set(loaded.benchmarks) == set(entries)
    assert {bid: got.data for bid, got in loaded.benchmarks.items()} == {bid: stored(e) for bid, e in entries.items()}
    for bid, e in entries.items():  # every field of the entry preserved, plus a 1-run history
        got = loaded.benchmarks[bid]
        assert isinstance(got, BaselineEntry)
        assert loaded.get(bid) is got
        assert {k: v for k, v in got.data.items() if k != "history"} == e
        assert got.data["history"] == [bl.run_record(e)]
        assert got.data["history"][0]["median_ms"] == e["stats"]["median_ms"]
        # The typed view agrees with the stored JSON.
        assert got.benchmark_id == bid
        assert got.samples_ms == tuple(e["samples_ms"])
        assert got.history == (RunRecord.from_dict(bl.run_record(e)),)
        assert got.run_medians_ms == (e["stats"]["median_ms"],)
        assert got.median_ms == e["stats"]["median_ms"]
        assert got.options == e["options"]
        assert got.environment == e["environment"]
        assert got.stats == e["stats"]
        assert got.git_commit == e["git_commit"]
        assert got.peak_memory_bytes is None
        assert got.reference is None
    assert loaded.get("m.py::test_b[2]").samples_ms == (3.0, 4.0)
    assert loaded.get("m.py::test_a").samples_ms == tuple(entries["m.py::test_a"]["samples_ms"])
    assert loaded.get("m.py::missing") is None
    # Non-ASCII survives.
    assert loaded.benchmarks["m.py::test_a"].environment["gpu"] == "Ω-accelerator"
    assert loaded.benchmarks["m.py::test_a"].data["environment"]["gpu"] == "Ω-accelerator"


def test_samples_ms_returns_a_copy(tmp_path):
    # The loaded samples are an immutable tuple in a frozen entry: a caller cannot change them.
    path = tmp_path / "b.json"
    update(path, {"a": entry("a")}, device_key=DEVICE_KEY, module=MODULE)
    loaded = load(path)
    got = loaded.get("a").samples_ms
    assert isinstance(got, tuple)
    copy = list(got)
    copy.append(99.0)
    with pytest.raises(AttributeError):
        got.append(99.0)  # type: ignore[attr-defined]
    with pytest.raises(dataclasses.FrozenInstanceError):
        loaded.get("a").samples_ms = (99.0,)  # type: ignore[misc]
    assert loaded.get("a").samples_ms == tuple(entry("a")["samples_ms"])
    assert loaded.get("a").data["samples_ms"] == list(entry("a")["samples_ms"])


def test_file_layout_sorted_indent_trailing_newline(tmp_path):
    path = tmp_path / "b.json"
    update(path, {"z": entry("z"), "a": entry("a")}, device_key=DEVICE_KEY, module=MODULE)
    text = path.read_text(encoding="utf-8")
    data = json.loads(text)
    assert text == json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    assert text.endswith("}\n") and not text.endswith("\n\n")
    assert data == {
        "schema_version": SCHEMA_VERSION,
        "device_key": DEVICE_KEY,
        "module": MODULE,
        "benchmarks": {"a": stored(entry("a")), "z": stored(entry("z"))},
    }
    lines = text.splitlines()
    top_keys = [ln.split('"')[1] for ln in lines if ln.startswith('  "')]
    assert top_keys == ["benchmarks", "device_key", "module", "schema_version"]
    assert '\n    "a": {' in text  # 2-space indent, one level deeper
    assert '\n      "history": [\n        {\n          "environment": {' in text  # nested levels too
    for bid in ("a", "z"):  # keys sorted inside entries and history records too
        body = data["benchmarks"][bid]
        assert list(body) == sorted(body)
        assert list(body["history"][0]) == sorted(body["history"][0])
    assert text.index('"a": {') < text.index('"z": {')
    assert "Ω-accelerator" in text  # written as UTF-8, not \u escapes
    assert "\r" not in text


def test_dumps_format():
    assert dumps({"b": 1, "a": [1, 2]}) == '{\n  "a": [\n    1,\n    2\n  ],\n  "b": 1\n}\n'
    with pytest.raises(ValueError):
        dumps({"x": float("nan")})


def test_rewriting_same_data_is_byte_identical(tmp_path):
    # The same sequence of updates gives the same bytes (no timestamps, ordering or float
    # formatting of its own), and a rewrite that adds no run leaves the file byte-identical.
    path, twin = tmp_path / "b.json", tmp_path / "twin.json"
    for p in (path, twin):
        update(p, {"a": entry("a")}, device_key=DEVICE_KEY, module=MODULE)
        update(p, {"a": entry("a")}, device_key=DEVICE_KEY, module=MODULE)
    first = path.read_bytes()
    assert twin.read_bytes() == first
    assert first.decode("utf-8") == dumps(valid_file_data(a=stored(entry("a"), entry("a"))))
    update(path, {}, device_key=DEVICE_KEY, module=MODULE)
    assert path.read_bytes() == first
    # Re-writing what was loaded, through the same serializer, is the identity.
    loaded = load(path)
    data = {"schema_version": SCHEMA_VERSION, "device_key": loaded.device_key,
            "module": loaded.module, "benchmarks": {bid: e.data for bid, e in loaded.benchmarks.items()}}
    write_atomic(path, dumps(data))
    assert path.read_bytes() == first
    # Recording the same run again only appends one more (identical) history record.
    update(path, {"a": entry("a")}, device_key=DEVICE_KEY, module=MODULE)
    assert load(path).benchmarks["a"].data == stored(entry("a"), entry("a"), entry("a"))
    assert load(path).benchmarks["a"].run_medians_ms == (1.0, 1.0, 1.0)


def test_update_merges_and_keeps_other_entries(tmp_path):
    path = tmp_path / "b.json"
    update(path, {"a": entry("a"), "b": entry("b")}, device_key=DEVICE_KEY, module=MODULE)
    new_b = entry("b", samples=(5.0, 5.5, 6.0))
    update(path, {"b": new_b, "c": entry("c")}, device_key=DEVICE_KEY, module=MODULE)
    loaded = load(path)
    assert set(loaded.benchmarks) == {"a", "b", "c"}
    assert loaded.benchmarks["a"].data == stored(entry("a"))  # not named: kept as it was
    assert loaded.benchmarks["b"].data == stored(new_b, entry("b"))  # new run appended to b's history
    assert loaded.benchmarks["c"].data == stored(entry("c"))
    assert loaded.get("b").samples_ms == (5.0, 5.5, 6.0)
    assert [r["rounds"] for r in loaded.benchmarks["b"].data["history"]] == [6, 3]  # oldest first
    assert [r.rounds for r in loaded.benchmarks["b"].history] == [6, 3]


def test_update_with_no_entries_creates_empty_file(tmp_path):
    path = tmp_path / "sub" / "b.json"
    update(path, {}, device_key=DEVICE_KEY, module=MODULE)
    loaded = load(path)
    assert loaded.benchmarks == {}


def test_load_missing_file_returns_none(tmp_path):
    assert load(tmp_path / "nope.json") is None
    assert load(tmp_path / "no" / "such" / "dir.json") is None


def test_load_accepts_str_path(tmp_path):
    path = tmp_path / "b.json"
    write_file(path, valid_file_data())
    loaded = load(str(path))
    assert {bid: e.data for bid, e in loaded.benchmarks.items()} == {"a": entry("a")}
    assert loaded.path == str(path)


def test_entry_without_schema_version_is_accepted(tmp_path):
    e = entry("a")
    del e["schema_version"]
    path = tmp_path / "b.json"
    write_file(path, valid_file_data(a=e))
    got = load(path).get("a")
    assert got.samples_ms == tuple(e["samples_ms"])
    assert got.data == e


def test_integer_samples_are_accepted(tmp_path):
    path = tmp_path / "b.json"
    write_file(path, valid_file_data(a=entry("a", samples=[1, 2, 3])))
    got = load(path).get("a").samples_ms
    assert got == (1, 2, 3)
    assert all(type(v) is float for v in got)  # converted to float for the statistics


# --------------------------------------------------------------------------------------------
# unusable files
# --------------------------------------------------------------------------------------------


#: Fields of an entry with a value of the wrong type (they must be objects / whole bytes >= 0).
WRONG_TYPED = {
    "options-string": ("options", "x"),
    "options-list": ("options", [1, 2]),
    "environment-list": ("environment", ["python", "3.11"]),
    "environment-number": ("environment", 3),
    "peak-string": ("peak_memory_bytes", "lots"),
    "peak-negative": ("peak_memory_bytes", -1),
    "peak-bool": ("peak_memory_bytes", True),
    "peak-float": ("peak_memory_bytes", 1.5),
}


def _bad_files():
    good = json.dumps(valid_file_data(), indent=2)
    cases = {
        "corrupt-json": "{this is not json",
        "truncated": good[: len(good) // 2],
        "empty": "",
        "top-level-list": json.dumps([valid_file_data()]),
        "top-level-string": json.dumps("hello"),
        "top-level-null": "null",
        "missing-schema-version": json.dumps({k: v for k, v in valid_file_data().items() if k != "schema_version"}),
        "string-schema-version": json.dumps({**valid_file_data(), "schema_version": "1"}),
        "newer-schema-version": json.dumps({**valid_file_data(), "schema_version": SCHEMA_VERSION + 1}),
        "missing-benchmarks": json.dumps({k: v for k, v in valid_file_data().items() if k != "benchmarks"}),
        "benchmarks-is-list": json.dumps({**valid_file_data(), "benchmarks": [entry("a")]}),
        "entry-not-object": json.dumps(valid_file_data(a=[1.0, 2.0])),
        "missing-samples": json.dumps(
            valid_file_data(a={k: v for k, v in entry("a").items() if k != "samples_ms"})
        ),
        "empty-samples": json.dumps(valid_file_data(a=entry("a", samples=[]))),
        "samples-not-list": json.dumps(valid_file_data(a=entry("a", samples_ms="1.0,2.0"))),
        "zero-sample": json.dumps(valid_file_data(a=entry("a", samples=[1.0, 0.0, 2.0]))),
        "negative-sample": json.dumps(valid_file_data(a=entry("a", samples=[1.0, -2.0]))),
        "string-sample": json.dumps(valid_file_data(a=entry("a", samples=[1.0, "2.0"]))),
        "bool-sample": json.dumps(valid_file_data(a=entry("a", samples=[1.0, True]))),
        "null-sample": json.dumps(valid_file_data(a=entry("a", samples=[1.0, None]))),
        "nan-sample": json.dumps(valid_file_data(a=entry("a", samples=[1.0, float("nan")]))),
        "inf-sample": json.dumps(valid_file_data(a=entry("a", samples=[1.0, float("inf")]))),
        "newer-entry-schema": json.dumps(valid_file_data(a=entry("a", schema_version=SCHEMA_VERSION + 1))),
        "string-entry-schema": json.dumps(valid_file_data(a=entry("a", schema_version="1"))),
        **{f"wrong-typed-{name}": json.dumps(valid_file_data(a=entry("a", **{field: value})))
           for name, (field, value) in WRONG_TYPED.items()},
    }
    return [pytest.param(text, id=name) for name, text in cases.items()]


BAD_FILES = _bad_files()


@pytest.mark.parametrize("text", BAD_FILES)
def test_load_unusable_file_raises_baseline_error_naming_path(tmp_path, text):
    path = tmp_path / "dev" / "tests__perf__test_x.json"
    path.parent.mkdir()
    path.write_text(text, encoding="utf-8")
    with pytest.raises(BaselineError) as exc:
        load(path)
    assert str(path) in str(exc.value)
    assert exc.value.path == str(path)
    assert exc.value.problem
    assert "--gpuperf-update-baselines" in str(exc.value)


@pytest.mark.parametrize("text", BAD_FILES)
def test_update_on_unusable_file_raises_and_leaves_file_untouched(tmp_path, text):
    path = tmp_path / "dev" / "tests__perf__test_x.json"
    path.parent.mkdir()
    path.write_text(text, encoding="utf-8")
    before = path.read_bytes()
    mtime = path.stat().st_mtime_ns
    with pytest.raises(BaselineError) as exc:
        update(path, {"new": entry("new")}, device_key=DEVICE_KEY, module=MODULE)
    assert str(path) in str(exc.value)
    assert path.read_bytes() == before
    assert path.stat().st_mtime_ns == mtime
    assert sorted(os.listdir(path.parent)) == [path.name]  # no temp files left behind


def test_specific_problem_messages(tmp_path):
    path = tmp_path / "b.json"
    cases = [
        ("{", "not valid JSON"),
        ("[]", "top level"),
        (json.dumps({**valid_file_data(), "schema_version": 99}), "schema_version 99"),
        (json.dumps(valid_file_data(a=entry("a", samples=[1.0, -2.0]))), "-2.0"),
        (json.dumps(valid_file_data(a={"id": "a"})), "samples_ms"),
    ]
    for text, fragment in cases:
        path.write_text(text, encoding="utf-8")
        with pytest.raises(BaselineError) as exc:
            load(path)
        assert fragment in str(exc.value), (text, str(exc.value))


@pytest.mark.parametrize("field, value", [
    pytest.param("options", "x", id="options-string"),
    pytest.param("environment", ["python", "3.11"], id="environment-list"),
    pytest.param("peak_memory_bytes", "lots", id="peak-string"),
    pytest.param("peak_memory_bytes", -1, id="peak-negative"),
    pytest.param("peak_memory_bytes", True, id="peak-bool"),
])
def test_wrong_typed_field_names_field_and_file_and_leaves_file_untouched(tmp_path, field, value):
    path = tmp_path / "dev" / "tests__perf__test_x.json"
    good = entry("good")
    write_file(path, valid_file_data(good=good, a=entry("a", **{field: value})))
    before = path.read_bytes()
    mtime = path.stat().st_mtime_ns
    with pytest.raises(BaselineError) as exc:
        load(path)
    assert str(path) in str(exc.value) and exc.value.path == str(path)
    assert repr(field) in exc.value.problem  # names the field ...
    assert "'a'" in exc.value.problem  # ... and the entry
    assert repr(value) in exc.value.problem  # ... and the bad value
    with pytest.raises(BaselineError) as exc:
        parse(path, before.decode("utf-8"))
    assert repr(field) in str(exc.value) and str(path) in str(exc.value)
    # An update of another benchmark refuses to touch the file.
    with pytest.raises(BaselineError) as exc:
        update(path, {"good": good}, device_key=DEVICE_KEY, module=MODULE)
    assert repr(field) in str(exc.value) and str(path) in str(exc.value)
    assert path.read_bytes() == before
    assert path.stat().st_mtime_ns == mtime
    assert sorted(os.listdir(path.parent)) == [path.name]


@pytest.mark.parametrize("field, value, typed", [
    pytest.param("options", None, {}, id="options-null"),
    pytest.param("options", {}, {}, id="options-empty"),
    pytest.param("environment", None, None, id="environment-null"),
    pytest.param("peak_memory_bytes", None, None, id="peak-null"),
    pytest.param("peak_memory_bytes", 0, 0, id="peak-zero"),
    pytest.param("peak_memory_bytes", 1 << 40, 1 << 40, id="peak-large"),
])
def test_well_typed_optional_fields_are_accepted(tmp_path, field, value, typed):
    path = tmp_path / "b.json"
    write_file(path, valid_file_data(a=entry("a", **{field: value})))
    got = load(path).get("a")
    assert getattr(got, field) == typed
    assert got.data[field] == value


def test_non_utf8_file(tmp_path):
    path = tmp_path / "b.json"
    path.write_bytes(b'{"schema_version": 1, "benchmarks": {}, "x": "\xff\xfe"}')
    with pytest.raises(BaselineError, match="UTF-8") as exc:
        load(path)
    assert str(path) in str(exc.value)


def test_unreadable_path_is_baseline_error(tmp_path):
    # A directory where the file should be: reading fails with an OSError other than "missing".
    path = tmp_path / "b.json"
    path.mkdir()
    with pytest.raises(BaselineError) as exc:
        load(path)
    assert str(path) in str(exc.value)


def test_parse_directly():
    f = parse("x/y.json", json.dumps(valid_file_data()))
    assert f.path == str(Path("x/y.json"))
    with pytest.raises(BaselineError, match="x/y.json"):
        parse("x/y.json", "nope")


@pytest.mark.parametrize(
    "bad_entry",
    [
        pytest.param({"id": "a"}, id="no-samples"),
        pytest.param(entry("a", samples=[1.0, 0.0]), id="zero-sample"),
        pytest.param(entry("a", schema_version=SCHEMA_VERSION + 1), id="newer-schema"),
        pytest.param("not a dict", id="not-object"),
        pytest.param(entry("a", options="x"), id="options-string"),
        pytest.param(entry("a", environment=["x"]), id="environment-list"),
        pytest.param(entry("a", peak_memory_bytes=-1), id="negative-peak"),
    ],
)
def test_update_rejects_bad_new_entry_without_writing(tmp_path, bad_entry):
    path = tmp_path / "b.json"
    update(path, {"keep": entry("keep")}, device_key=DEVICE_KEY, module=MODULE)
    before = path.read_bytes()
    with pytest.raises(BaselineError) as exc:
        update(path, {"ok": entry("ok"), "bad": bad_entry}, device_key=DEVICE_KEY, module=MODULE)
    assert str(path) in str(exc.value)
    assert path.read_bytes() == before


def test_update_rejects_bad_entry_without_creating_file(tmp_path):
    path = tmp_path / "b.json"
    with pytest.raises(BaselineError):
        update(path, {"bad": {"samples_ms": []}}, device_key=DEVICE_KEY, module=MODULE)
    assert not path.exists()


def test_baseline_error_attributes(tmp_path):
    err = BaselineError(tmp_path / "f.json", "something is off")
    assert err.path == str(tmp_path / "f.json")
    assert err.problem == "something is off"
    assert str(tmp_path / "f.json") in str(err) and "something is off" in str(err)


# --------------------------------------------------------------------------------------------
# write_atomic
# --------------------------------------------------------------------------------------------


def test_write_atomic_writes_and_leaves_no_temp_files(tmp_path):
    path = tmp_path / "deep" / "er" / "out.json"
    write_atomic(path, "hello\n")
    assert path.read_text(encoding="utf-8") == "hello\n"
    write_atomic(path, "second ✓\n")
    assert path.read_bytes() == "second ✓\n".encode("utf-8")
    assert os.listdir(path.parent) == ["out.json"]


def test_write_atomic_keeps_lf_newlines(tmp_path):
    path = tmp_path / "out.txt"
    write_atomic(path, "a\nb\n")
    assert path.read_bytes() == b"a\nb\n"


def test_write_atomic_failure_keeps_old_file_and_cleans_up(tmp_path):
    path = tmp_path / "out.json"
    write_atomic(path, "old\n")
    with pytest.raises(TypeError):
        write_atomic(path, 12345)  # type: ignore[arg-type]  # write() of a non-str fails
    assert path.read_text(encoding="utf-8") == "old\n"
    assert os.listdir(tmp_path) == ["out.json"]


def test_write_atomic_failure_in_replace_cleans_up(tmp_path, monkeypatch):
    path = tmp_path / "out.json"
    write_atomic(path, "old\n")

    def boom(src, dst):
        raise OSError("simulated replace failure")

    monkeypatch.setattr(bl.os, "replace", boom)
    with pytest.raises(OSError, match="simulated"):
        write_atomic(path, "new\n")
    monkeypatch.undo()
    assert path.read_text(encoding="utf-8") == "old\n"
    assert os.listdir(tmp_path) == ["out.json"]


def test_update_leaves_no_temp_files(tmp_path):
    path = tmp_path / "dev" / "b.json"
    for i in range(3):
        update(path, {f"b{i}": entry(f"b{i}")}, device_key=DEVICE_KEY, module=MODULE)
    assert os.listdir(path.parent) == ["b.json"]
    assert set(load(path).benchmarks) == {"b0", "b1", "b2"}


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
def test_write_atomic_new_file_mode_follows_umask(tmp_path, umask_022):
    plain = tmp_path / "plain.json"
    plain.write_text("x", encoding="utf-8")  # what an ordinary open() creates
    assert _mode(plain) == 0o644
    path = tmp_path / "atomic.json"
    write_atomic(path, "x")
    assert _mode(path) == _mode(plain)


@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
def test_update_preserves_existing_file_mode(tmp_path, umask_022):
    path = tmp_path / "b.json"
    update(path, {"a": entry("a")}, device_key=DEVICE_KEY, module=MODULE)
    os.chmod(path, 0o644)
    update(path, {"b": entry("b")}, device_key=DEVICE_KEY, module=MODULE)
    assert _mode(path) == 0o644

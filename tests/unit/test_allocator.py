"""glibc's allocator thresholds in the worker processes (issue 45, pytest_gpuperf.core.allocator)."""

from __future__ import annotations

import pytest

from pytest_gpuperf.core import allocator


def test_fixed_sets_the_thresholds_for_the_block_only_and_a_value_the_user_set_stands() -> None:
    env = {"PATH": "/bin", "MALLOC_TRIM_THRESHOLD_": "123"}
    with allocator.for_workers("fixed", env) as workers:
        assert env["MALLOC_MMAP_THRESHOLD_"] == "4294967296" and env["MALLOC_TRIM_THRESHOLD_"] == "123"
        assert workers == "MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=123" == allocator.describe(env)
    assert env == {"PATH": "/bin", "MALLOC_TRIM_THRESHOLD_": "123"}  # the tests after it get the user's environment


def test_the_environment_is_put_back_when_the_block_raises() -> None:
    env: dict[str, str] = {}
    with pytest.raises(KeyboardInterrupt), allocator.for_workers("fixed", env):
        assert set(env) == set(allocator.FIXED)
        raise KeyboardInterrupt
    assert env == {}


def test_inherit_leaves_the_environment_alone_and_says_glibc_adapts() -> None:
    env = {"GLIBC_TUNABLES": "glibc.rtld.optional_static_tls=512"}
    with allocator.for_workers("inherit", env) as workers:
        assert env == {"GLIBC_TUNABLES": "glibc.rtld.optional_static_tls=512"} and workers == allocator.ADAPTIVE
    tuned = {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=65536:glibc.rtld.x=1"}
    assert allocator.describe(tuned) == "GLIBC_TUNABLES=glibc.malloc.mmap_threshold=65536"


@pytest.mark.parametrize("raw, mode", [("", "fixed"), (None, "fixed"), ("Inherit ", "inherit"), ("fixed", "fixed")])
def test_the_mode_is_parsed(raw: object, mode: str) -> None:
    assert allocator.parse_mode(raw) == mode


def test_a_bad_mode_names_the_option_and_the_accepted_values() -> None:
    with pytest.raises(ValueError, match=r"ini gpuperf_allocator = 'adaptive': expected one of fixed, inherit"):
        allocator.parse_mode("adaptive")


def test_a_process_that_times_in_itself_pins_the_thresholds_with_mallopt_unless_told_or_set(monkeypatch) -> None:
    # --gpuperf-processes 1 times in the user's own process, which the workers'
    # environment variables never reach: glibc's mallopt pins the same thresholds there (issue 45)
    import ctypes

    for name in allocator.FIXED:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(allocator, "_fixed_here", False)
    assert allocator.fix_in_process("inherit") is None and allocator.describe() == allocator.ADAPTIVE
    assert allocator.fix_in_process("fixed", {"MALLOC_TRIM_THRESHOLD_": "1"}) is None  # a value you set stands
    try:
        ctypes.CDLL(None).gnu_get_libc_version
    except AttributeError:
        pytest.skip("not glibc")
    assert allocator.fix_in_process("fixed") == allocator.IN_PROCESS_TEXT == allocator.describe()
    assert allocator.describe({}) == allocator.ADAPTIVE  # a worker's environment is described as it is
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert allocator.describe() == "MALLOC_MMAP_THRESHOLD_=65536"  # the environment's, where set

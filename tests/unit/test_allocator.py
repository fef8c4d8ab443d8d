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

"""Each benchmark's random state (issue 45): the same seed in every process, whatever ran before it."""

from __future__ import annotations

import random
import subprocess
import sys

from pytest_gpuperf.core.seeding import reseed, seed_for


def test_seed_for_is_a_stable_32_bit_value_of_the_test_id():
    a, b = seed_for("tests/test_x.py::test_a[1]"), seed_for("tests/test_x.py::test_a[2]")
    assert a != b and 0 <= a < 2**32 and 0 <= b < 2**32
    assert a == seed_for("tests/test_x.py::test_a[1]")
    # the same value in another process (no hash randomization): it is what workers agree on
    out = subprocess.run([sys.executable, "-c", "from pytest_gpuperf.core.seeding import seed_for; "
                          "print(seed_for('tests/test_x.py::test_a[1]'))"], capture_output=True, text=True,
                         check=True, env={"PYTHONHASHSEED": "123", "PATH": ""})
    assert int(out.stdout) == a


def test_reseed_restarts_the_streams_of_what_was_imported_and_imports_nothing():
    code = ("import sys, random; from pytest_gpuperf.core.seeding import reseed; "
            "print(reseed(7)); print('numpy' in sys.modules, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "['random']" and out[1] == "False False"
    reseed(11)
    first = [random.random() for _ in range(3)]
    random.random()  # what a benchmark before it consumed
    reseed(11)
    assert [random.random() for _ in range(3)] == first

"""The random state each benchmark starts from: the same in every process that measures it.

A benchmark whose inputs a fixture draws from a global random generator (``torch.rand``,
``numpy.random``, ``random``) gets, in a fresh process, whatever the benchmarks before it left of
that generator's stream. Those benchmarks made as many calls as their timing took (a different
number in every worker process), and an update run's extras process makes more calls than a
compare run's (it profiles the ops). So the inputs of a benchmark, and with them its time, its peak
memory and its counts, varied with what ran before it: on ml4gw's suite (issue 45) an unchanged
rerun failed ``test_td_generator_forward`` on peak memory (+6.2%) and bytes per call (886 MiB ->
1.54 GiB), because the length of its waveforms follows its random masses.

Here, where the plugin measures, every benchmark starts from a seed of its own (:func:`seed_for`,
from its test id), as pytest-randomly reseeds every test: :func:`reseed` seeds Python's ``random``,
NumPy's global generator and torch's default generators (CPU and every CUDA device), each only when
the suite already imported it (nothing is imported here). Pure: no pytest.
"""

from __future__ import annotations

import sys
import zlib

#: What the seed of a test id is mixed with (so it differs from pytest-randomly's of the same test).
SALT = "pytest-gpuperf"


def seed_for(test_id: str) -> int:
    """The seed of the benchmark with this pytest node id: CRC-32 of ``SALT`` and the id, an integer
    in [0, 2**32) (NumPy's legacy seeding accepts no more). The same in every process and run."""
    return zlib.crc32(f"{SALT}:{test_id}".encode())


def reseed(seed: int) -> list[str]:
    """Seed the global random generators the process has imported with ``seed`` (an int in
    [0, 2**32)): ``random.seed``, ``numpy.random.seed``, ``torch.manual_seed`` (which seeds every
    CUDA device too, lazily). Returns the names of those seeded, e.g. ``["random", "torch"]``."""
    seeded = []
    rnd = sys.modules.get("random")
    if rnd is not None:
        rnd.seed(seed)
        seeded.append("random")
    np_random = sys.modules.get("numpy.random")
    if np_random is not None and hasattr(np_random, "seed"):
        np_random.seed(seed)
        seeded.append("numpy")
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "manual_seed"):
        torch.manual_seed(seed)
        seeded.append("torch")
    return seeded

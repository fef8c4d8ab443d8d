"""tox.ini's py-oldtorch environment runs the tests that drive torch's own APIs against the oldest
torch CI installs: every unit test file that imports torch or the measuring layer must be listed
there, or a new one would never meet the old torch."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DRIVES_TORCH = re.compile(r"import torch|from torch|importorskip\(.torch|pytest_gpuperf\.(measure|testing|_testing)\b")


def test_every_unit_test_file_that_drives_torch_runs_on_the_oldest_torch() -> None:
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    listed = set(re.findall(r"tests/unit/test_\w+\.py", tox["testenv:py-oldtorch"]["commands"]))
    drives = {f"tests/unit/{p.name}" for p in (ROOT / "tests" / "unit").glob("test_*.py")
              if p.name != "test_tox.py" and DRIVES_TORCH.search(p.read_text(encoding="utf-8"))}
    assert drives, "the scan found no unit test file that imports torch"
    assert sorted(drives - listed) == [], "add these to tox.ini [testenv:py-oldtorch] commands"
    assert sorted(p for p in listed if not (ROOT / p).is_file()) == [], "tox.ini lists files that do not exist"

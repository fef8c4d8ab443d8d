"""The lookup of a benchmark's baseline at a smaller world size (issue 35): the reference of its
scaling efficiency (:class:`~pytest_gpuperf.verdict.scaling.ScalingCheck`), for a rank under
torchrun and for the session that runs ``--gpuperf-nproc`` launches alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable


class ScalingReference:
    """The lookup of a benchmark's baseline at a smaller world size, for its scaling efficiency
    (:class:`~pytest_gpuperf.verdict.scaling.ScalingCheck`; issue 35).

    ``load``: reads a baseline file (once per session, None when absent; raises ``BaselineError``);
    ``baseline_dir``: the session's baseline folder; ``device_key``: this device's key without
    ``-wsN``; ``module``: the test module's path; ``world_size``: this run's ranks; ``shown``: a path
    as messages show it. Calling it with a benchmark id gives ``(world size, newest stored median
    in ms, file as shown)`` of the smallest world size below ``world_size`` (the folder
    ``device_key`` is world size 1, ``device_key-wsM`` world size M) whose file has the benchmark,
    or None. An unreadable file, or one of another module, is passed over (its own run reports it).
    ``folder``: the world-size-1 folder as shown (where a reference would be recorded)."""

    def __init__(self, load: Callable[[Path], Any], baseline_dir: Path, device_key: str, module: str,
                 world_size: int, shown: Callable[[Path], str]) -> None:
        self._load, self._dir, self._key, self._module = load, baseline_dir, device_key, module
        self._world_size, self._shown = world_size, shown
        self.folder = shown(baseline_dir / device_key)

    def __call__(self, bid: str) -> tuple[int, float, str] | None:
        from pytest_gpuperf.storage.baseline import BaselineError, baseline_path, check_module
        from pytest_gpuperf.verdict.scaling import reference_world_size, split_world_size

        found: dict[int, tuple[float, str]] = {}
        for folder in sorted(self._dir.iterdir()) if self._dir.is_dir() else []:
            key, n = split_world_size(folder.name)
            if key != self._key or n >= self._world_size or not folder.is_dir():
                continue
            path = baseline_path(self._dir, folder.name, self._module)
            try:
                stored = self._load(path)
                check_module(stored, self._module)
            except BaselineError:
                continue
            entry = stored.get(bid) if stored is not None else None
            if entry is not None and entry.history:
                found[n] = (entry.history[-1].median_ms, self._shown(path))
        n0 = reference_world_size(found, self._world_size)
        return None if n0 is None else (n0, *found[n0])

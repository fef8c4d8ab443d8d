"""The environment variables the plugin's processes hand to each other, named in one place (stdlib only).

An A/B worker process gets two: :data:`AB_WORKER`, one JSON value with what the worker is (its
side, process pair, tree, the other side's tree and where the measuring plugin is imported from),
which stays for the worker's lifetime (the telemetry and a suite's conftest can tell an A/B worker
and its side by it: :func:`ab_worker`); and :data:`AB_CONNECT`, ``<host>:<port> <token>``, where to
reach the coordinator, removed from the environment as the worker reads it (a nested pytest run,
e.g. pytester's, is then no worker).
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

#: An A/B worker's identity: JSON ``{"side", "process", "root", "other_root", "plugin_path"}``.
AB_WORKER = "GPUPERF_AB_WORKER"
#: An A/B worker's way to its coordinator: ``<host>:<port> <token>`` (read once, then removed).
AB_CONNECT = "GPUPERF_AB_CONNECT"


def ab_worker(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """This process's A/B worker identity (:data:`AB_WORKER`), or ``{}`` outside an A/B worker (or
    when the value is not a JSON object)."""
    raw = (os.environ if environ is None else environ).get(AB_WORKER)
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}

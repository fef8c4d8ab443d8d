"""Versioned JSON Schemas of the files pytest-gpuperf writes (draft 2020-12).

``report.schema.json`` describes ``--gpuperf-json`` reports, ``baseline.schema.json`` baseline
files. :func:`validate` checks a document against one of them with ``jsonschema`` (a test
dependency; ``pip install jsonschema``).
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any


def load_schema(kind: str) -> dict[str, Any]:
    """The schema ``kind`` ("report" or "baseline") as a dict. Raises ``ValueError`` for another kind."""
    if kind not in ("report", "baseline"):
        raise ValueError(f"unknown schema {kind!r}: expected 'report' or 'baseline'")
    return json.loads(resources.files(__name__).joinpath(f"{kind}.schema.json").read_text())


def validate(document: Any, kind: str = "report") -> None:
    """Validate ``document`` against schema ``kind``; raises ``jsonschema.ValidationError``."""
    import jsonschema

    jsonschema.validate(document, load_schema(kind), cls=jsonschema.Draft202012Validator)

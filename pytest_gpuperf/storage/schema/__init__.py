"""Versioned JSON Schemas of the files pytest-gpuperf writes (draft 2020-12).

``report.schema.json`` describes ``--gpuperf-json`` reports, ``baseline.schema.json`` baseline
files. :func:`validate` checks a document against one of them with ``jsonschema``.

The schemas describe what the plugin writes: every field it always writes is ``required``.
:func:`pytest_gpuperf.storage.baseline.load` checks each loaded baseline file against
``baseline.schema.json`` without its ``required`` lists (a field may be missing, as in files
of older versions, but one that is present must have the right type) and names the JSON path
of a bad field.
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

"""Argument types the ``gpuperf`` subcommands share (argparse ``type=`` callables): a bad value is
argparse's usage error (exit code 2) naming the option, the value and what is accepted."""

from __future__ import annotations

import argparse
from typing import Callable


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number >= ``minimum`` (``--processes 0`` -> ``expected a whole
    number >= 1, got '0'``)."""

    def whole_number(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {minimum}, got {text!r}")
        return value

    whole_number.__name__ = f"whole number >= {minimum}"
    return whole_number

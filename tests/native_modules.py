"""The compiled leaf modules' loader for their tests: a module that does not import skips its
tests on a developer's machine and fails them where JOURNAL_REQUIRE_NATIVE=1 (.ci/run sets it)."""

from __future__ import annotations

import importlib
import os
from typing import Any

import pytest


def compiled(name: str, what: str) -> Any:
    """The compiled module ``name`` (``what`` names it in the skip or failure)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        if os.environ.get("JOURNAL_REQUIRE_NATIVE") == "1":
            pytest.fail(f"{what} does not import ({exc}) and JOURNAL_REQUIRE_NATIVE=1")
        pytest.skip(f"{what} does not import here: {exc}")

"""docs/api.md names every public name of the package and of its submodules."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import onlooker

API = (Path(__file__).resolve().parents[1] / "docs" / "api.md").read_text()
MODULES = [
    "onlooker.plugins.history",
    "onlooker.plugins.metrics",
    "onlooker.plugins.audit",
    "onlooker.plugins.summary",
    "onlooker.policies",
    "onlooker.testing",
    "onlooker.integrations",
]


@pytest.mark.parametrize("name", sorted(onlooker.__all__))
def test_every_top_level_name_is_in_the_api_index(name: str) -> None:
    assert f"`{name}" in API


@pytest.mark.parametrize("module", MODULES)
def test_every_submodule_name_is_in_the_api_index(module: str) -> None:
    missing = [n for n in importlib.import_module(module).__all__ if f"`{n}`" not in API]
    assert missing == []

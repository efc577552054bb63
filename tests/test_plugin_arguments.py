"""The summary and metrics factories check their arguments when the plugin is made."""

from __future__ import annotations

import re
from typing import Any

import pytest

from onlooker.plugins import metrics, summary


@pytest.mark.parametrize("keep", ["10", 2.5, True, None])
def test_summary_keep_must_be_a_positive_int(keep: Any) -> None:
    with pytest.raises(ValueError, match=re.escape(f"keep must be a positive int, not {keep!r}")):
        summary.plugin(keep=keep)


@pytest.mark.parametrize("registry", ["not a registry", object(), {}])
def test_metrics_registry_must_be_a_collector_registry(registry: Any) -> None:
    with pytest.raises(TypeError, match="registry must be a prometheus_client CollectorRegistry"):
        metrics.plugin(registry=registry)

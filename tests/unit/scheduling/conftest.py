"""Fixtures for scheduler tests; the factories they use live in :mod:`scheduling_support` (a module of its own name,
so a test imports them without depending on which ``conftest`` pytest loaded last)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from scheduling_support import catalogue

if TYPE_CHECKING:
    from nodesmith.core.model import InstanceType


@pytest.fixture
def types() -> list[InstanceType]:
    """The default catalogue."""
    return catalogue()

"""Fixtures shared by the tests of the published-run model: the shipped runs by id and the
shipped regime model (fitted once per module that imports them)."""

import pytest

from workbench.speed.regime_model import regime_model
from workbench.speed.published_runs import published_runs


@pytest.fixture(scope="module")
def runs():
    return {r.id: r for r in published_runs()}


@pytest.fixture(scope="module")
def model():
    return regime_model()

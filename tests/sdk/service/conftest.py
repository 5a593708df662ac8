"""One deploy of the tiny service pipeline for every fault test of this folder (each test copies its store)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sdk.service.service_helpers import deploy_once


@pytest.fixture(scope="session")
def deployed_service(tmp_path_factory) -> Path:
    return deploy_once(tmp_path_factory, "service")

"""tests/ops parse real server command lines in-process: the servers' ``parse`` installs
their log handlers on the root logger (impl/observe/logs.py), removed after each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from revivify.impl.observe.logs import remove_logging


@pytest.fixture(autouse=True)
def _no_server_logging_left() -> Iterator[None]:
    yield
    remove_logging()

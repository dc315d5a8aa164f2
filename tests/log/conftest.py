"""Fixtures shared by the log layer's tests: ``fio``, the local FileIO of the test's own
directory (``tmp_path``), on which each test writes its partitions."""

from __future__ import annotations

import pytest

from sparklog.storage import FileIO, open_fileio


@pytest.fixture
def fio(tmp_path) -> FileIO:
    """The local FileIO rooted at ``tmp_path``."""
    return open_fileio(tmp_path.as_uri())

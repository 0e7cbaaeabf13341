"""Test-wide setup: keep every data directory (keys, caches, databases) out of $HOME."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

_DATA_DIR = tempfile.mkdtemp(prefix="kforge-test-data-")


def pytest_configure(config: pytest.Config) -> None:
    os.environ["KFORGE_DATA_DIR"] = _DATA_DIR


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_DATA_DIR, ignore_errors=True)

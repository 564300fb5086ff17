"""The lifecycle core's scenario scripts (tests/tserver/testdata/*.txt, format in
lifecycle_script.py): each command's whole output is compared with the script's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from lifecycle_script import run_script

TESTDATA = Path(__file__).parent / "testdata"
SCRIPTS = sorted(TESTDATA.glob("lifecycle_*.txt"))


def test_there_are_scripts() -> None:
    assert len(SCRIPTS) >= 3


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.stem)
def test_script(path: Path) -> None:
    text = path.read_text()
    got = run_script(text)
    if os.environ.get("UPDATE_TESTDATA"):
        path.write_text(got)
        return
    assert got == text, f"{path.name}: output differs (UPDATE_TESTDATA=1 rewrites; review)"

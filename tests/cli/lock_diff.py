"""Read a ``uv pip compile`` lock, and tell how a venv differs from it.

``python tests/cli/lock_diff.py LOCK`` (``make test-latest`` runs it in the newest-versions
venv) prints one line per locked package whose installed version differs from its pin:
``msgspec: lock 0.22.0, installed 0.23.0``, the releases a ``make lock`` would take.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
from pathlib import Path

from packaging.markers import Marker
from packaging.utils import canonicalize_name
from packaging.version import Version

# One pinned line of a `uv pip compile` lock: "name==version [; marker] \".
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+?)\s*(?:;\s*(.+?))?\s*\\?$")


def read_lock(path: Path) -> dict[str, list[tuple[Version, str | None, int]]]:
    """name -> [(version, marker, number of hashes)]: a name may be pinned twice, once per
    marker (numpy for Python 3.11 and for 3.12 and newer)."""
    pins: dict[str, list[tuple[Version, str | None, int]]] = {}
    current: str | None = None
    for line in path.read_text().splitlines():
        match = PIN.match(line)
        if match:
            current = canonicalize_name(match[1])
            pins.setdefault(current, []).append((Version(match[2]), match[3], 0))
        elif line.strip().startswith("--hash=sha256:") and current is not None:
            version, marker, hashes = pins[current][-1]
            pins[current][-1] = (version, marker, hashes + 1)
        elif not line.startswith(" "):
            current = None
    return pins


def differences(lock: Path) -> list[str]:
    """One line per pin that applies here and is not what is installed."""
    lines = []
    for name, versions in sorted(read_lock(lock).items()):
        for version, marker, _ in versions:
            if marker is not None and not Marker(marker).evaluate():
                continue
            try:
                installed = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                lines.append(f"{name}: lock {version}, not installed")
                continue
            if Version(installed) != version:
                lines.append(f"{name}: lock {version}, installed {installed}")
    return lines


if __name__ == "__main__":
    found = differences(Path(sys.argv[1]))
    print("\n".join(found) if found else f"every pin of {sys.argv[1]} is what is installed")

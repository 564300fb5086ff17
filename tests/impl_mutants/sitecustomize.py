"""Seeded implementation bugs in real processes (tests/impl_mutants/impl_mutant_run.py).

Python imports ``sitecustomize`` at start-up from the path: the runner puts this directory
on ``PYTHONPATH`` and names one mutant of ``impl_mutant_list.py`` in
``REVIVIFY_IMPL_MUTANT``, so every Python process it starts (a pytest run, the nemesis and
the tablet servers it spawns) runs with that one bug; nothing in the product knows about it.
"""

from __future__ import annotations

import os

_NAME = os.environ.get("REVIVIFY_IMPL_MUTANT", "")

if _NAME:
    import impl_mutant_list

    impl_mutant_list.BY_NAME[_NAME].apply(impl_mutant_list.Patcher())

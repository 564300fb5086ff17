"""Seeded bugs in a real master process, for tests/master_integration/test_master_mutants.py.

Python imports ``sitecustomize`` at start-up from the path; the test puts this directory on
``PYTHONPATH`` and names a mutant in ``REVIVIFY_MASTER_MUTANT``, so the master process it
starts runs with that one bug, and nothing in the product knows about it. Each mutant
breaks one rule of the masters' ordering contract the way a plausible bug would.
"""

from __future__ import annotations

import os
from typing import Any

_MUTANT = os.environ.get("REVIVIFY_MASTER_MUTANT", "")


def _calls_before_commit() -> None:
    """The calls a plan releases are sent as soon as it is planned, before its write
    commits (seed 004: "CreateTable state visible before replication")."""
    from revivify.impl.master import server
    from revivify.impl.master.errors import MasterError

    original = server.MasterServer.run_plan

    async def run_plan(self: Any, make: Any) -> Any:
        def early(catalog: Any) -> Any:
            planned = make(catalog)
            if not isinstance(planned, MasterError) and self.ready_term is not None:
                self.send_calls(planned._calls, self.ready_term)
            return planned
        return await original(self, early)

    server.MasterServer.run_plan = run_plan  # type: ignore[method-assign]


def _table_before_tablets() -> None:
    """CreateTable commits the table row alone (its tablets "in a later write" that never
    comes): a table visible half-created."""
    import attrs

    from revivify.impl.master import operations, server
    from revivify.impl.master.catalog import CatalogWrite

    original = operations.plan_create_table

    def plan_create_table(*args: Any, **kwargs: Any) -> Any:
        plan = original(*args, **kwargs)
        if isinstance(plan, operations.Plan) and plan.write.tablets:
            return attrs.evolve(plan, write=CatalogWrite(tables=plan.write.tables))
        return plan

    server.plan_create_table = plan_create_table  # type: ignore[attr-defined]


if _MUTANT == "calls_before_commit":
    _calls_before_commit()
elif _MUTANT == "table_before_tablets":
    _table_before_tablets()

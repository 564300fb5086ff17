"""Master: the sans-I/O core of the catalog, heartbeats and placement, and its trio shell.

    catalog      table and tablet records, their catalog-tablet rows, the Catalog snapshot,
                 the state transition tables, the one CatalogWrite of an operation
    operations   CreateTable, DeleteTable, AlterTable, replacement of timed-out tablets as
                 pure planners returning a Plan (one write; calls only after commit) or a
                 typed refusal; creation nudges and the creation watch
    reports      tablet-report processing (seed 004 appendix B with its fixes) as a Plan
    replication  AddReplica, RemoveReplica, MoveReplica (recorded in the tablet's row) and
                 the healing policy decide(catalog, servers, rng) (seed 001, 3-4-3)
    placement    replica placement over the live tablet servers
    tserver_map  registration, liveness and full-report bookkeeping from heartbeats
    queries      ListTables, GetTableLocations over a committed snapshot
    calls        the calls to tablet servers, as values
    messages     the heartbeat and tablet-report wire structs
    errors       the typed refusals (values) and CatalogCorrupt / NotCommitted

The shell: ``server`` (the master process: the catalog tablet on an embedded tablet
server; it composes the rooms below), ``api`` (its RPC methods and errors), ``main``
(``revivify master run``), ``options`` (its settings). The rooms, one concern each:
``embedded`` (the embedded server as the rooms see it), ``gate`` (the leader-ready gate and
the snapshot it guards), ``runner`` (a plan run as one replicated write), ``delivery``
(calls after commit, each attempt re-checked), ``background`` and ``healing`` (the ready
leader's background task and the healing policy's rounds), ``follower_reads``,
``membership`` (bootstrap, the master list, masters joining and leaving) and ``service``
(the thin RPC handlers).

None of the core modules above imports trio (an import-linter contract): inputs are method calls and
values, time is a ``now`` argument, randomness an injected ``random.Random``.
"""

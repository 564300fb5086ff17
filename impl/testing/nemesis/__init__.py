"""The nemesis (issue 20): a seeded fault injector against real server processes, each in a
network namespace of its own so that partitions are the kernel's (issue 32; 127.0.0.1 and
cuts in the RPC layer with ``--partitions rpc``), with a workload whose histories are
checked for linearizability and lost writes, and the servers' traces checked against the
spec.

    python -m revivify.impl.testing.nemesis --profile short|standard|masters|disk --seed N
                                            [--duration S] [--workdir DIR] [--keep]
                                            [--json-out FILE] [--self-test lose-write]
                                            [--partitions kernel|rpc]
    make nemesis DURATION=600 SEED=7 [PROFILE=standard] [PARTITIONS=kernel]

    schedule   profiles and the fault schedule: a pure function of (profile, seed)
    cluster    the processes, their cuts, the fault file (disk faults), admin calls over RPC
    netns      partitions in the kernel: a namespace per server, nft DROP tables per cut pair
    workload   the clients (a register and a map) and their Jepsen-style histories
    report     lost writes, unavailability, latency, the summary table
    runner     the phases of a run and its verdict

Test support: never imported by the rest of impl/. It may use the checker only through the
``revivify`` CLI (``history check``, ``trace check``), as any user would.
"""

"""Real server processes on this machine: starting, watching and stopping them.

    control    one server process: spawn (attached or detached), the "listening" line, SIGKILL
               (a crash), SIGTERM (a clean stop)
    pids       a pid named with its start time (pid_alive): the standard library only, for
               ``revivify cluster status``
    tservers   ProcessCluster: tablet-server processes without masters
    masters    MasterProcesses: master processes with their tablet servers

Its own layer, below both of its users: the CLI (``revivify cluster``, the demo) and test
support (the nemesis, impl/testing/nemesis) run the same clusters, so neither has to import
the other. It imports only the RPC layer's address parser; what a process does is its own
business (it is started as ``python -m revivify.impl.servers.tserver`` or ``...servers.master``).
"""

"""What a running server shows an operator: its metrics (``metrics.py``, Prometheus families
in a registry of the server's own) and its log (``logs.py``: levels, format, rotation and the
tail that the ``/logs`` page shows). The web pages that serve them live in ``impl/web``.

This package sits at the bottom of impl's layers so that every shell (storage, RPC, Raft's
trio shell, the tablet server, the master) may count what it does; it imports nothing of
revivify's own.
"""

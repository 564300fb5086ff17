"""The server processes' entry points: ``revivify tserver run`` (``tserver.py``) and
``revivify master run`` (``master.py``), with what they share (``process.py``: parsing,
signals, exit codes, the web server beside the RPC server).

They sit above impl/web (they start the pages) and so above the servers they run; nothing
in impl imports them but the CLI, lazily, for those two commands (the web stack is then
imported only by a process that serves).
"""

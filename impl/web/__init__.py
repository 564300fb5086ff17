"""Every server shows itself: the status pages of a tablet server and of a master, each
page with a JSON twin under ``/api/v1``, and ``/metrics``, ``/logs``, ``/healthz``.

    serve          hypercorn's trio worker in the server's own trio run (why: its docstring)
    pages          a view per page served twice (HTML, JSON); paging, query checks, errors
    tserver_views  the tablet server's pages: /, /tablets, /tablet?id=, /copies
    master_views   the master's: /, /masters, /tablet-servers, /tables, /table?id=,
                   /operations, /ksck
    apps           the two sites
    templates/     Jinja2, server-rendered, no JavaScript; static/style.css

It sits above the master and the client (the master's pages read the master; /ksck runs
the client's ksck) and below impl/servers, the process entry points that start it.
Read-only: no page changes anything.
"""

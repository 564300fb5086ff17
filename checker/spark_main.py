"""Entry point for ``spark-submit``: ``spark-submit ... spark_main.py PATH... [--out DIR]``.

Runs ``revivify trace validate --engine spark`` with the master spark-submit configured.
"""

from __future__ import annotations

import sys

from revivify.checker.cli import trace_main


def main(argv: list[str]) -> int:
    from pyspark.sql import SparkSession

    master = str(SparkSession.builder.getOrCreate().sparkContext.master)
    # Under spark-submit the driver's stderr and stdout may be joined by the launcher (seen
    # on a loaded machine: a progress line inside the --json document): with --json, the
    # document alone goes out; spark-submit shows its own stage progress.
    quiet = ["--quiet"] if "--json" in argv and "--quiet" not in argv else []
    return trace_main(["validate", *argv, *quiet, "--engine", "spark", "--master", master])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""Entry point for ``spark-submit``: ``spark-submit ... spark_main.py PATH... [--out DIR]``.

Runs ``revivify trace validate --engine spark`` with the master spark-submit configured.
"""

from __future__ import annotations

import sys

from revivify.checker.cli import trace_main


def main(argv: list[str]) -> int:
    from pyspark.sql import SparkSession

    master = str(SparkSession.builder.getOrCreate().sparkContext.master)
    return trace_main(["validate", *argv, "--engine", "spark", "--master", master])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

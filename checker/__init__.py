"""revivify.checker: replays traces against the spec; z3 proofs; model exploration; Spark.

May import revivify.spec, z3 and pyspark; never revivify.impl.
"""

"""revivify.spec: the executable specification of the Kudu replica lifecycle.

No I/O, no trio: only states (``model``), the one transition table (``actions``), the
consensus-metadata merge (``merge``), invariants (``invariants``) and the logic helpers
(``logic``) that let one spec run on Python values (trace replay, Hypothesis, exhaustive
exploration) and on z3 terms (proofs). ``Spec`` bundles a table with its invariants so
that deliberately broken variants (``mutants``) can be checked by the same tools.
"""

from revivify.spec.system import Spec, default_spec

__all__ = ["Spec", "default_spec"]

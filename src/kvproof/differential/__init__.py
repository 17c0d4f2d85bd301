"""The release differential: the same inputs' consumer results on releases in order.

``measure``: one ``diff`` of the inputs' runs, admission by admission (regressions named by
their first bad release, newly failing inputs, jumps, gains). ``chain``: that measure pair by
pair with each finding's input, summed by class with the ledger's word (``kvproof compare``
and bench/bench_differential.py print and table it), the runs per release, the regressions
rerun. ``hitmatrix``: the reference models' hits release by release under their speculative flag sets
(``kvproof compare --models``, ``make matrix``; imported by name, not here). No vLLM import here.
"""

from kvproof.differential.measure import (JUMP_FACTOR, JUMP_MIN, REGRESSION_CHECK, Regression, Report,
                                          admissions, class_weights, diff, first_bad_release, lost_by,
                                          why_not_compared)
from kvproof.differential.chain import (Failing, FailingClass, Found, Input, Pair, RegressionClass,
                                        failing_classes, ledgered, mtp_modules, pairs, regression_classes,
                                        release_counts, reproduce, spec_share)

__all__ = ["JUMP_FACTOR", "JUMP_MIN", "REGRESSION_CHECK", "Regression", "Report", "admissions", "class_weights",
           "diff", "first_bad_release", "lost_by", "why_not_compared",
           "Failing", "FailingClass", "Found", "Input", "Pair", "RegressionClass", "failing_classes", "ledgered",
           "mtp_modules", "pairs", "regression_classes", "release_counts", "reproduce", "spec_share"]

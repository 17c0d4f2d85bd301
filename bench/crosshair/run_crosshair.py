"""Driver run inside a vLLM env: import vLLM first (outside CrossHair's side-effect
wall, which the CLI installs and vLLM's import trips), then analyse each harness."""

import json
import sys
import time

import hybrid_align  # imports vLLM
import crosshair.core_and_libs  # noqa: F401  (registers the library patches)
from crosshair.core import analyze_function, run_checkables
from crosshair.options import AnalysisKind, AnalysisOptionSet

timeout = float(sys.argv[1])
for name in sys.argv[2:]:
    fn = getattr(hybrid_align, name)
    opts = AnalysisOptionSet(per_condition_timeout=timeout, per_path_timeout=timeout / 4,
                             analysis_kind=[AnalysisKind.PEP316])
    t0 = time.perf_counter()
    messages = list(run_checkables(analyze_function(fn, opts)))
    seconds = time.perf_counter() - t0
    states = {m.state.name for m in messages}
    # POST_FAIL: the contract is false on concrete inputs. EXEC_ERR: an exception,
    # possibly CrossHair's own (its math.gcd patch takes at most 2 arguments).
    verdict = ("COUNTEREXAMPLE" if "POST_FAIL" in states else
               "EXCEPTION" if states & {"EXEC_ERR", "POST_ERR"} else "NO COUNTEREXAMPLE (not a proof)")
    print(json.dumps({"function": name, "seconds": round(seconds, 1), "verdict": verdict,
                      "messages": [f"{m.state.name}: {m.message}" for m in messages][:3]}), flush=True)

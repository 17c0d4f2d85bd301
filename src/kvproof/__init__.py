"""kvproof: prove, fuzz and replay vLLM's KV cache block-size resolution.

The data flow is Layout -> bridge -> real vLLM -> Outcome -> contracts ->
report / corpus. Nothing in this package imports vLLM except
``kvproof.bridge.worker``, which runs inside a vLLM environment.
"""

__version__ = "0.1.0"

# In a source checkout the top-level spec/, verify/ and fuzz/ folders are the
# subpackages kvproof.spec, kvproof.verify and kvproof.fuzz (a wheel maps them
# there through package-dir). Extending __path__ keeps one import name whether
# kvproof runs from an editable install or from PYTHONPATH=src inside a vLLM
# environment.
from pathlib import Path as _Path

_checkout = _Path(__file__).resolve().parents[2]
if (_checkout / "spec" / "__init__.py").exists() and str(_checkout) not in __path__:
    __path__.append(str(_checkout))

"""kvproof: prove, fuzz and replay vLLM's KV cache block-size resolution.

The data flow is Layout -> bridge -> real vLLM -> Outcome -> contracts ->
report / corpus. Nothing in this package imports vLLM except
``kvproof.bridge.worker``, which runs inside a vLLM environment.
"""

__version__ = "0.1.0"

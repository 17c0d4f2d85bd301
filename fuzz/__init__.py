"""kvproof.fuzz: atheris harnesses on the real installed vLLM (see fuzz/README.md).

Nothing here imports vLLM at import time; ``kvproof.fuzz.harness`` does, inside
a vLLM environment, when it builds a target.
"""

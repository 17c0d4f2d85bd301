"""Seeded-mutant self-test: does each kvproof layer catch a wrong vLLM resolver?

``mutants`` is the catalogue (edits written by this project, applied at run
time to the installed release's source, never stored vLLM code); ``run``
builds one overlay per mutant (``kvproof.envs.overlay.make``), runs the layers in
``layers`` and prints the kill matrix.
"""

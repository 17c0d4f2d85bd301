"""The input types: what a user hands kvproof, parsed and validated once.

``layout`` (the Layout, the one scenario type), ``config`` (what a user sets), ``stream`` and
``drafts`` (a request stream and its speculative drafts), ``reading`` (JSON text, files and
folders read safely) and ``files`` (the input edge: the loaders that name a type). They import
only the standard library, ``kvproof.errors``, ``kvproof.facts`` and each other, and this file
imports nothing, so importing an input type loads no z3 (tests/unit/test_layers.py).
"""

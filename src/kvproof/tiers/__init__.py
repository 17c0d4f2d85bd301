"""The tiers of the evidence ladder as one family (issue 43 item 1).

``base.TierRunner`` is a tier's interface and ``registry`` maps each ``Tier`` to its member:
``bridge`` (function, manager: the worker's run op), ``consumer``, ``engine`` (real boots, with
``families``, ``boots``, ``boot``, ``classify`` and ``synth`` below it). Every member makes the
one result record, ``kvproof.result.Result`` (its own record as the payload), and judges it into a
``row.Row`` (replay's: ``row.ReplayRow``). This file imports
nothing: ``boot`` runs inside a vLLM environment and must not load the registry's members.
"""

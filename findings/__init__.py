"""Findings with identity and memory: one class per root cause, one ledger.

``key``: a finding's class, ``(tier, check, exception type, vLLM file:function)``,
never the numbers of a message. ``ledger``: the checked-in memory of known
classes (``findings/ledger/<id>.json``), read by verify, the fuzz campaigns,
selftest and replay. ``kvproof findings`` lists it.
"""

"""Judging what a release did: the one judge and what it judges by.

``judge`` ((Layout, Outcome, tier) -> Judgement), ``contracts`` (the catalogue of what vLLM's
consumers assume of the resolver), ``oracle_ids`` (the registry of oracle ids), ``classkey`` (a
finding's class: one identity per root cause) and ``shrinking`` (the one greedy layout shrinker).
"""

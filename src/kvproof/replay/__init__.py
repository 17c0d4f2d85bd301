"""The ``replay`` and ``bisect`` commands: corpus files through every tier on every release.

The tiers themselves (the engine tier's families, boots, classification and synthesiser
included) live in ``kvproof.tiers``; this package runs them and shows their rows.
"""

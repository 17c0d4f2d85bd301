"""The command line: ``cli`` (the parser and its dispatch, the ``kvproof`` entry point) and the
commands that live nowhere else: ``consume`` (``kvproof consumer``), ``explain`` (a vLLM
``block_sizes`` log line back to the configurations that print it) and ``compare`` (the release
differential). The argument-parser base every command folder shares stays on the ground floor
(``kvproof.cliutil``).
"""

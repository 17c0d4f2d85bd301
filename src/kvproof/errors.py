"""The one exception hierarchy of kvproof.

Every error a user can cause maps to exit code 2 with a single line; the CLI
catches ``KvproofError`` and prints ``str(err)``.
"""


class KvproofError(Exception):
    """Base class: a problem kvproof reports in one line."""

    exit_code = 2


class LayoutError(KvproofError):
    """A Layout (JSON or inline) is malformed or out of range."""


class UsageError(KvproofError):
    """A command line asked for something inconsistent."""


class EnvError(KvproofError):
    """A vLLM environment is missing, broken or cannot be built."""


class BridgeError(KvproofError):
    """The worker inside a vLLM environment died or spoke nonsense."""


class CorpusError(KvproofError):
    """A corpus file cannot be read or written safely."""


class NotExpressible(KvproofError):
    """A Layout uses a field the given vLLM release does not have."""


class Unchecked(KvproofError):
    """kvproof does not model what the input asks (its gap, never a fact about vLLM): the
    message says what would lift it. The verdict is UNCHECKED."""


class EnvironmentFailure(KvproofError):
    """The machine or environment cannot run this vLLM code (a platform check, a missing
    kernel): never a verdict about vLLM. Exit 3, like every ERROR."""

    exit_code = 3

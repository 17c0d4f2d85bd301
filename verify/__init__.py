"""The proof run behind ``make verify`` (entry point: ``kvproof.verify.cli.main``)."""


def main(argv=None) -> int:
    from kvproof.verify.cli import main as _main
    return _main(argv)

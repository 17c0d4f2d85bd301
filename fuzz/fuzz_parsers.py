"""ClusterFuzzLite / OSS-Fuzz entry point: kvproof's own parsers (see kvproof.fuzz.parsers)."""

import atheris  # noqa: F401  (compile_python_fuzzer bundles what this file imports)

from kvproof.fuzz.parsers import main

if __name__ == "__main__":
    main()

"""ClusterFuzzLite / OSS-Fuzz entry point: the consumer-tier harness (see kvproof.fuzz.consumers)."""

import atheris  # noqa: F401  (compile_python_fuzzer bundles what this file imports)

from kvproof.fuzz.consumers import main

if __name__ == "__main__":
    main()

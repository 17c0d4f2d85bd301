"""ClusterFuzzLite / OSS-Fuzz entry point: the consumer-tier harness (see kvproof.consumer.fuzz)."""

import atheris  # noqa: F401  (compile_python_fuzzer bundles what this file imports)

from kvproof.consumer.fuzz import main

if __name__ == "__main__":
    main()

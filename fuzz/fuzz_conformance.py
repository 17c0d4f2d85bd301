"""ClusterFuzzLite / OSS-Fuzz entry point: the model conformance harness (see kvproof.fuzz.harness)."""

import atheris  # noqa: F401  (compile_python_fuzzer bundles what this file imports)

from kvproof.fuzz.harness import main

if __name__ == "__main__":
    main("conformance")

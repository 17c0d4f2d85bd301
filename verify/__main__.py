"""``python -m kvproof.verify``: see kvproof.verify.cli."""

from kvproof.verify.cli import main

raise SystemExit(main())

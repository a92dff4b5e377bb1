"""``python -m benchmarks.speed`` (see ``benchmarks/speed/__init__.py``)."""

import sys

from benchmarks.speed.runner import main

if __name__ == "__main__":
    sys.exit(main())

"""``python -m platform.bench`` (see ``platform/bench/__init__.py``)."""

import sys

from platform.bench.runner import main

if __name__ == "__main__":
    sys.exit(main())

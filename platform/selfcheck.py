"""``python -m platform.selfcheck``: prints the OS (through the stdlib API) and this package's file.

A quick check that the stdlib shim of ``platform/__init__.py`` works in this environment."""

import platform

if __name__ == "__main__":
    print(platform.system(), platform.__file__)

"""Declarative search spaces for ``python -m platform.tune --space NAME`` (DESIGN.md §6).

One file per space arrives with the sweep issue.
"""

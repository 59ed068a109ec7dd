"""The package version, in a module of its own so the bottom layer (`_delta.py` names it in every commit
it writes) need not import the package facade."""

__version__ = "0.1.0"

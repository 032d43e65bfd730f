"""One way to attach an axis value's function to its method-floor entry: a registry of functions
keyed by the entry's name, refusing a name without an entry and a second function for one."""

from __future__ import annotations

from typing import Callable


def registrar(entries, functions: dict[str, Callable], kind: str, home: str):
    """A ``register(name)`` decorator that puts the function into ``functions`` under ``name``,
    which must be a key of ``entries`` (named ``home`` in the error)."""
    def register(name: str):
        def attach(fn):
            if name not in entries:
                raise ValueError(f"{kind} {name!r} has no entry in {home}")
            if name in functions:
                raise ValueError(f"{kind} {name!r} has a function already")
            functions[name] = fn
            return fn
        return attach
    return register

"""One way to attach an axis value's function to its method-floor entry: a registry of functions
keyed by the entry's name, refusing a name without an entry and a second function for one."""

from __future__ import annotations

from typing import Callable


def _bare(fn: Callable) -> Callable:
    return fn


def registrar(entries, functions: dict, kind: str, home: str, store: Callable = _bare):
    """A ``register(name, **facts)`` decorator that puts ``store(fn, **facts)`` into ``functions``
    under ``name``, which must be a key of ``entries`` (named ``home`` in the error). ``store`` keeps
    the facts an axis carries beside its function (default: the bare function, and no facts)."""
    def register(name: str, **facts):
        def attach(fn):
            if name not in entries:
                raise ValueError(f"{kind} {name!r} has no entry in {home}")
            if name in functions:
                raise ValueError(f"{kind} {name!r} has a function already")
            functions[name] = store(fn, **facts)
            return fn
        return attach
    return register

"""Python as though the optional engines were not installed: what `pip install -e ".[test]"` alone gives.

tests/engines_absent.py hides them around every test of the edit loop (`-m "not slow"`), in the test's process and,
through this file on PYTHONPATH (Python imports `sitecustomize` at start-up), in every Python process it starts. A
hidden module is gone from sys.modules, `import` raises ModuleNotFoundError and importlib.util.find_spec answers None,
as on a machine without it."""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

ENV = "DRAFTHUB_TEST_ABSENT_MODULES"  # comma-separated top-level module names
asked: list[str] = []  # the hidden modules something tried to import or find, in this process


class _Absent(importlib.abc.MetaPathFinder):
    def __init__(self, names: frozenset[str]):
        self.names = names

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.names:
            asked.append(name)
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def hide(names) -> callable:
    """Hide the modules `names` until the returned function is called (which restores them as they were)."""
    names = frozenset(names)
    finder = _Absent(names)
    real_find_spec = importlib.util._find_spec  # what importlib.util.find_spec calls, however it was imported
    kept = {k: m for k, m in sys.modules.items() if k.partition(".")[0] in names}
    for k in kept:
        del sys.modules[k]

    def find_spec(name, path=None, target=None):
        if name.partition(".")[0] in names:
            asked.append(name)
            return None
        return real_find_spec(name, path, target)

    sys.meta_path.insert(0, finder)
    importlib.util._find_spec = find_spec

    def restore() -> None:
        sys.meta_path.remove(finder)
        importlib.util._find_spec = real_find_spec
        for k in [k for k in sys.modules if k.partition(".")[0] in names]:
            del sys.modules[k]
        sys.modules.update(kept)

    return restore


if os.environ.get(ENV):
    hide(os.environ[ENV].split(","))

"""Puts this folder on sys.path so that the parser tests import the shared helpers as a plain module
(`from fuzzing import ...`) whatever pytest's import mode: the folder is not a package, its test
modules are imported by their base names."""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

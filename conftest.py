"""Loads the clusteraccept pytest plugin when it is not installed as a pytest11 entry point."""

import importlib.metadata
import sys
from pathlib import Path

if not any(ep.name == "clusteraccept" for ep in importlib.metadata.entry_points(group="pytest11")):
    sys.path.insert(0, str(Path(__file__).parent / "src"))
    pytest_plugins = ["clusteraccept.plugin"]

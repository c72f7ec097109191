"""``python -m clusteraccept.parsers TOOL FILE``: print a tool output's parsed structure as JSON."""

import sys

from clusteraccept.errors import run_main
from clusteraccept.parsers.cli import main

sys.exit(run_main(main))

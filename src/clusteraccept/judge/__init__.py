"""Judging: measurements against the site's references -> Verdicts (:mod:`.verdicts`), and baselines proposed
from a run (:mod:`.propose`). The per-family judges that use them are in :mod:`clusteraccept.checks`."""

"""Operations around runs: nightly from cron/scrontab, resume, drain/undrain, attestations, counter deltas.

Everything here works from a run directory's ``results.json`` (and its raw/ evidence) or from the site: the
acceptance flow itself (plan -> submit -> judge) stays in flow.py. Slurm's node-state commands (sinfo,
scontrol update) are run by jobs/slurm_clients.py, like every Slurm client call of the submit host.
"""

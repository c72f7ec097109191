"""Operations around runs: nightly from cron/scrontab, resume, drain/undrain, attestations, counter deltas.

Everything here works from a run directory's ``results.json`` (and its raw/ evidence) or from the site: the
acceptance flow itself (plan -> submit -> judge) stays in session.py. Slurm node-state commands (sinfo,
scontrol update) go through ``hostio.run`` like every other command.
"""

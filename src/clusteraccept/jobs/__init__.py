"""Stage 3, the job layer: planned jobs -> Slurm (submitit in :mod:`.submit`, Slurm's own clients in
:mod:`.slurm_clients`), what runs on the nodes (:mod:`.node_entry`), what a killed campaign leaves
(:mod:`.spool`), and the raw/ archive written before anything is parsed (:mod:`.archive`)."""

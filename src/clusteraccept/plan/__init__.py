"""Stage 2, the plan: pure. Site -> the jobs a run submits (:mod:`.jobs`), their rounds of pair matchings
(:mod:`.matchings`), each step's command line (:mod:`.commands`), and the subjects verdicts name
(:mod:`.subjects`)."""

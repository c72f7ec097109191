"""Stage 1, the site: one cluster's description, loaded from ``site-configs/<name>.yaml`` and fully validated
(:mod:`.load`); the model is :class:`.model.Site`, its sections are read by the modules beside it."""

"""Routes: who is told about an incident, grouped how, and what mutes it. The model and its YAML (:mod:`.model`) and
the plan of messages and muted incidents (:mod:`.planning`), in plain Python."""

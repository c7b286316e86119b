"""Alert rules a user declares: the model and its YAML (:mod:`.model`), the ``alert_rules`` table (:mod:`.catalog`),
and rules as Spark expressions (:mod:`.evaluate`), which the alert query (:mod:`sensorcep.pipeline.alerts`) and the
backtest of a candidate rule set (:mod:`sensorcep.pipeline.backtest`) compile in."""

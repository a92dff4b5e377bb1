"""Training as plain functions, no Ray (docs/architecture.md): ``config`` (TrainConfig, presets,
the one resolver), ``recipes`` (the papers' table rows), ``context`` (rank, device, precision),
``loss``, ``step`` (one update), ``evaluate``, ``metrics``, ``checkpoint`` (saving, loading,
restoring), ``averaging`` (the last epochs' weights) and ``loop`` (``fit``).
``platform.launch`` runs them under Ray Train and Tune; tests and ``benchmarks.speed`` call them
directly."""

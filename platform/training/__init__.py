"""Training as plain functions, no Ray (docs/architecture.md): ``config`` (TrainConfig, presets,
the one resolver), ``recipes`` (the papers' table rows), ``context`` (rank, device, precision),
``loss``, ``step`` (one update), ``evaluate``, ``metrics``, ``checkpoint`` (saving, loading,
restoring), ``retention`` (what a run keeps of its checkpoints), ``averaging`` (the mean of the
kept weights) and ``loop`` (``fit``).
``platform.launch`` runs them under Ray Train and Tune; tests and ``benchmarks.speed`` call them
directly."""

"""MLflow (docs/architecture.md): everything the platform writes to and reads from its tracking store.

- ``store``: which store (``resolve_tracking_uri``), whether it answers, and a client for it
- ``relay``: the Ray actor that makes the MLflow calls where only the driver's node reaches the store
- ``runs``: a run's life: opened with params, tags and config, found again, closed FINISHED or FAILED
- ``logger``: ``RunLogger``, what rank 0 (and a CLI) writes to an open run, kept going through an outage
- ``run_files``: a run's best checkpoint and last checkpoints' weights fetched, an evaluation's test results logged back
- ``registry``: ``--register-model``, a run's model as a registered version with the alias ``champion``
- ``artifacts``: every artifact upload, as bytes or straight from the node to an object store
- ``model``: the best checkpoint as an MLflow pyfunc model (its code: ``platform/serving.py``)
- ``system``: per-node system metrics (CPU, memory, disk, network, GPU)
- ``plots``: PNG plots: learning curves, a sweep's curves and knobs, the parse-attention heat map
- ``diagnostics``: the parse-attention heat map of the best checkpoint, logged as an artifact
- ``tables``: summary tables as markdown and CSV
- ``comparison``: an experiment's runs compared, ``report.md``/``.csv`` and plots (``platform.report``)
- ``significance``: paired significance tests of logged test outputs (``platform.report``, ``--confirm``)
- ``backup``: ``pg_dump`` backups of PostgreSQL databases, MLflow's and the studies' (``platform.backup``)
"""

"""Ray Tune sweeps with Optuna (``python -m platform.tune``), each trial one training run of
``platform.launch.driver``:

- ``tuning``: the whole sweep as the command asks for it (``SweepRequest``, ``tune``), stage by stage.
- ``spaces``: strict loading of search spaces.
- ``searcher``: the chosen Optuna sampler and Tune scheduler; ``optuna_search``: Ray's
  ``OptunaSearch`` and ``Repeater`` as the sweep runs them (pruned trials, state across ``--resume``).
- ``study``: the live Optuna study (an RDB storage) and Optuna's plots.
- ``sweep``: the Tune experiment, each trial a function trainable running ``driver.run``.
- ``console``: what a sweep prints, and where Ray's own console goes; ``callbacks``: the sweep's
  Tune and Train callbacks; ``trial_runs``: a trial's MLflow run as the driver sees it.
- ``summary``: the end of a sweep (summary table, time shares, the parent run's artifacts, closing lines).
- ``confirm``: ``--confirm``, the best configs and the baseline retrained with seeds and tested on test.
- ``continuation``: ``--extend`` (more trials in a finished sweep) and ``--warm-start-from`` (an
  earlier sweep's trials told to a new sweep's study).
"""

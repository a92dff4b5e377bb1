"""Running jobs on Ray: the cluster, one Ray Train run, Tune sweeps, and parsing.

The cluster and one training run (``python -m platform.train``):

- ``training_run``: a training run as the command asks for it (``TrainRequest``, ``train``).
- ``cluster``: starting or joining Ray the same way for every command; how many trials fit;
  what ended sweeps left reserved.
- ``reach``: what every node must reach (the storage, probed; the dataset, copied if local).
- ``driver``: one Ray Train run on the launching process (open the MLflow run, run a
  ``TorchTrainer``, close the run).
- ``worker``: each DDP worker's training (``fit`` with Ray's hooks).
- ``process_group``: the workers' torch process group, listening on the node address only.
- ``warm_start``: ``--init-from``, a run's, a registered model's or a file's checkpoint, checked.

A sweep (``python -m platform.tune``):

- ``tuning``: the whole sweep as the command asks for it (``SweepRequest``, ``tune``), stage by stage.
- ``spaces``: strict loading of search spaces.
- ``searcher``: the chosen Optuna sampler and Tune scheduler; ``optuna_search``: Ray's
  ``OptunaSearch`` and ``Repeater`` as the sweep runs them (pruned trials, state across ``--resume``).
- ``study``: the live Optuna study (an RDB storage) and Optuna's plots.
- ``sweep``: the Tune experiment, each trial a function trainable running ``driver.run``.
- ``console``: what a sweep prints, and where Ray's own console goes.
- ``summary``: the end of a sweep (summary table, time shares, the parent run's artifacts, closing lines).
- ``confirm``: ``--confirm``, the best configs and the baseline retrained with seeds and tested on test.
- ``continuation``: ``--extend`` (more trials in a finished sweep) and ``--warm-start-from`` (an
  earlier sweep's trials told to a new sweep's study).

Parsing (``python -m platform.parse``):

- ``parse_job``: raw text parsed by a pool of actors, shard by shard, resumable.
"""

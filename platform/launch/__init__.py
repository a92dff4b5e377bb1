"""Running jobs on Ray: the cluster, one Ray Train run, and parsing (sweeps: ``platform.sweeps``).

The cluster and one training run (``python -m platform.train``):

- ``training_run``: a training run as the command asks for it (``TrainRequest``, ``train``).
- ``cluster``: starting or joining Ray the same way for every command; how many trials fit;
  what ended sweeps left reserved.
- ``reach``: what every node must reach (the storage, probed; the dataset, copied if local).
- ``driver``: one Ray Train run on the launching process (open the MLflow run, run a
  ``TorchTrainer``, close the run); a sweep's trial runs one too.
- ``worker``: each DDP worker's training (``fit`` with Ray's hooks).
- ``process_group``: the workers' torch process group, listening on the node address only.
- ``init_from``: ``--init-from``, a run's, a registered model's or a file's checkpoint, checked.

Parsing (``python -m platform.parse``):

- ``parse_job``: raw text parsed by a pool of actors, shard by shard, resumable.
"""

"""Running training on Ray: the cluster connection (``cluster``), one Ray Train run (``driver``
on the launching process, ``worker`` on each DDP worker) and Tune sweeps (``sweep``, ``spaces``)."""

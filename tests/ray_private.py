"""The private Ray APIs the tests use, in one place (``platform/compat.py`` holds the platform's).

- ``ray.autoscaler._private.aws.config.bootstrap_aws``: ``ray up``'s AWS bootstrap of
  ``ray_cluster.yaml`` (against a stand-in server).
- ``ray.autoscaler._private.util.prepare_config``/``validate_config``: ``ray_cluster.yaml``
  against the schema ``ray up`` applies.
- ``ray._private.thirdparty.pathspec.PathSpec``: how Ray matches upload excludes.
- ``ray.train.v2._internal.state.state_actor.get_state_actor``: the ranks' pids of a running
  Train run, to kill one on purpose.
- ``ASHAScheduler._brackets[0]._rungs``: the rungs, for the tests of a resumed sweep.
- ``ray._private.services.resolve_ip_for_localhost``: kept from replacing a loopback node
  address by the machine's network address in the suite's ``ray start`` (``ray_command``).

``tests/test_compat.py`` keeps every other test module off private APIs.
"""

from __future__ import annotations


def validate_cluster_config(config: dict) -> None:
    """Raise on an unknown or malformed field of a ``ray up`` cluster config, as ``ray up`` would."""
    from ray.autoscaler._private.util import prepare_config, validate_config

    validate_config(prepare_config(config))


def bootstrap_aws_cluster(config: dict, propagation_waits: bool = True) -> dict:
    """What ``ray up`` does with a cluster config before it launches anything on AWS: Ray's
    validation, then its AWS bootstrap (the head's IAM role and instance profile, the key pair,
    subnets, the security group, the image), against whatever endpoint boto3 is given
    (``AWS_ENDPOINT_URL``).  Returns the bootstrapped config.  Without ``propagation_waits``
    the bootstrap skips its two 15 s sleeps after creating the head's IAM role and instance
    profile (waits for AWS's eventual consistency, which a local stand-in does not have)."""
    import time
    import types

    from ray.autoscaler._private.aws import config as aws_config
    from ray.autoscaler._private.util import prepare_config, validate_config

    prepared = prepare_config(config)
    validate_config(prepared)
    if propagation_waits:
        return aws_config.bootstrap_aws(prepared)
    module_time = aws_config.time
    no_sleep = {name: getattr(time, name) for name in dir(time) if not name.startswith("__")}
    aws_config.time = types.SimpleNamespace(**{**no_sleep, "sleep": lambda seconds: None})
    try:
        return aws_config.bootstrap_aws(prepared)
    finally:
        aws_config.time = module_time


def ray_path_spec(patterns: list[str]):
    """The matcher Ray applies to ``excludes`` and ``.gitignore`` when it uploads a working_dir."""
    from ray._private.thirdparty.pathspec import PathSpec

    return PathSpec.from_lines("gitwildmatch", patterns)


def train_worker_pids() -> dict[int, int]:
    """{world rank: pid} of the running attempt's live Ray Train workers, from Ray Train's state
    actor (the driver needs ``RAY_TRAIN_ENABLE_STATE_TRACKING=1``); {} before it exists."""
    import ray
    from ray.train.v2._internal.state.state_actor import get_state_actor

    actor = get_state_actor()
    if actor is None:
        return {}
    found = {}
    for attempts in ray.get(actor.get_train_run_attempts.remote()).values():
        for attempt in attempts.values():
            if attempt.status.value == "RUNNING":
                found.update({worker.world_rank: worker.pid for worker in attempt.workers
                              if worker.status is None or worker.status.value == "ALIVE"})
    return found


def asha_rungs(scheduler) -> list[tuple[float, dict]]:
    """ASHA's first bracket's rungs: (milestone, {trial id: value})."""
    return scheduler._brackets[0]._rungs



# ``ray``'s CLI with every node on loopback.  Ray 2.60 turns ``--node-ip-address=127.0.0.1`` and
# ``--address=127.0.0.1:PORT`` into the machine's network address (``resolve_ip_for_localhost``:
# what a real multi-node cluster needs), so a cluster of several nodes on one machine would
# listen on that address.  Here the address stays as given: the raylet, the GCS, the agents and
# the workers the raylet starts (it hands them its node address) all bind 127.0.0.1.
LOOPBACK_RAY = """
import sys
from ray._private import services
services.resolve_ip_for_localhost = lambda host: host
from ray.scripts.scripts import main
sys.argv[0] = "ray"
sys.exit(main())
"""


def ray_command(*args: str) -> list[str]:
    """``ray ARGS`` for a node of a test's multi-node cluster on this machine, on 127.0.0.1 only
    (``--node-ip-address=127.0.0.1`` is added)."""
    import sys

    return [sys.executable, "-c", LOOPBACK_RAY, *args, "--node-ip-address=127.0.0.1"]

"""What every node of a multi-node cluster must reach, checked (and arranged) by the driver
before any training starts: the ``--storage-path`` and the dataset.

On one machine every path is shared, so nothing happens.  On a cluster of several nodes
(``ray up``, or nodes that share no disk):

* the storage path must be reachable from every node (Ray Train V2 writes checkpoints there
  from the workers and reads them back on restarts): the driver writes a probe file and a task
  on each node looks for it and writes one of its own beside it; a node that cannot see it, or
  cannot write there, is a one-line error naming the node.
* a local dataset (the demo corpus included) is copied once into the storage, under
  ``datasets/<sha256 of its files>`` (``storage.publish``: its marker last, so a copy that
  died midway is done again), and the workers read it from there; a URI dataset is used as is.
"""

from __future__ import annotations

import uuid

from platform.data import storage
from platform.data.builtin import resolve_dataset
from platform.data.dataset import DatasetRef, read_meta
from platform.errors import UserError
from platform.training.config import TrainConfig, check_dataset


def worker_nodes() -> list[dict]:
    """The alive nodes a Train worker or trial may land on (with CPUs or GPUs), this one included."""
    import ray

    return [node for node in ray.nodes() if node.get("Alive")
            and (node.get("Resources", {}).get("CPU", 0) > 0 or node.get("Resources", {}).get("GPU", 0) > 0)]


def multi_node() -> bool:
    """Whether work may run on a node other than the driver's (the head of a ``ray up`` cluster
    with ``--num-cpus 0`` counts: then every worker is elsewhere)."""
    import ray

    here = ray.get_runtime_context().get_node_id()
    return any(node["NodeID"] != here for node in worker_nodes())


def storage_for_every_node(storage_path: str) -> bool:
    """Whether work may run on a node other than this one, and if so, that every node reaches
    ``storage_path`` (checked before the dataset is resolved: a storage path no node can use is
    one line, not a minute of preparing the demo corpus first).

    Shared storage (a URI) counts as a multi-node cluster even while only the driver's node is
    up: a ``ray up`` head whose GPU workers the autoscaler has not started yet gets them later,
    and they read what the driver put there, never the head's local path."""
    if not multi_node() and not storage.is_uri(storage_path):
        return False
    check_storage(storage_path)
    return True


def dataset_ref(data: str, storage_path: str, shared: bool, config: TrainConfig, log=print) -> DatasetRef:
    """The one step from ``--data`` to what a run's workers read, for ``train``, every trial of
    ``tune`` and the confirmation alike: the dataset resolved (the demo corpus prepared on first
    use), its metadata read once and checked against ``config``, and where every node reads it
    (``dataset_for_every_node``)."""
    dataset = resolve_dataset(data)
    meta = read_meta(dataset)
    check_dataset(config, meta, dataset)  # before any training
    return dataset_for_every_node(dataset, storage_path, shared, meta, log)


def dataset_for_every_node(dataset: str, storage_path: str, shared: bool, meta: dict, log=print) -> DatasetRef:
    """The dataset as the workers read it: ``dataset`` itself, or where other nodes may read it
    (``shared``, from ``storage_for_every_node``) and it is local, its copy under the storage."""
    if not shared or storage.is_uri(dataset):
        return DatasetRef(name=dataset, location=dataset, meta=meta)
    return DatasetRef(name=dataset, location=ship_dataset(dataset, storage_path, log), meta=meta)


def check_storage(storage_path: str) -> None:
    """A probe file written here must be visible from every node, before any training."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    root = storage.locate(storage_path)
    try:
        root.fs.create_dir(root.path, recursive=True)
    except OSError as error:
        raise UserError(f"--storage-path {storage_path}: cannot create it: {error}") from None
    probe = root.child(f".reachable-{uuid.uuid4().hex[:12]}")
    probe.write_bytes(b"written by the driver; looked for from every node\n")
    try:
        nodes = worker_nodes()
        seen = ray.get([
            ray.remote(num_cpus=0)(_sees).options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False),
            ).remote(probe.uri)
            for node in nodes])
    finally:
        probe.delete()
    blind = [f"{node.get('NodeManagerAddress')} ({why})" for node, why in zip(nodes, seen) if why]
    if blind:
        raise UserError(f"--storage-path {storage_path}: not reachable from node {', '.join(blind)}; a multi-node "
                        f"cluster needs storage every node reaches: s3://bucket/prefix, gs://..., or a shared "
                        f"file system mounted at the same path on every node")


def _sees(uri: str) -> str | None:
    """On one node: None if ``uri`` exists there and the node can write beside it (Ray Train's
    workers write their checkpoints there), else why not."""
    try:
        probe = storage.locate(uri)
        if not probe.exists():
            return "the driver's probe file is not there"
        base, mark, options = uri.partition("?")
        written = storage.locate(f"{base}-{uuid.uuid4().hex[:8]}{mark}{options}")
        written.write_bytes(b"written by a node\n")  # a read-only mount fails here, not at the first checkpoint
        written.delete()
        return None
    except Exception as error:  # noqa: BLE001 - any failure is the answer
        return str(error).splitlines()[0] if str(error) else type(error).__name__


def ship_dataset(dataset: str, storage_path: str, log=print) -> str:
    """Copy the local dataset once to ``STORAGE/datasets/<sha256>`` (kept and reused by later
    runs on the same files); returns its URI."""
    digest, size = storage.directory_sha256(dataset)
    target = storage.locate(storage_path).child("datasets").child(digest[:16])
    if target.child(storage.COMMITTED).exists():
        log(f"data: the workers read {dataset} from its copy {target.uri} (made by an earlier run)")
        return target.uri
    storage.publish(dataset, target.uri, overwrite=True)  # a copy that died midway (no marker)
    log(f"data: copied {dataset} ({size / 1e6:.1f} MB) to {target.uri}, which every node of the cluster reads")
    return target.uri

"""The torch process group of a Ray Train worker group, listening on the node's address only.

Ray Train's own set-up (``TorchConfig``) has rank 0 make torch's ``TCPStore`` from a host and
a port, and that store listens on every interface (``*:port``) whatever host it is given; gloo
picks its interface from the host name.  On a local cluster, whose node address is 127.0.0.1,
that exposed training to the network.  Here rank 0 binds the store's socket to the node
address itself and hands it to the store (``master_listen_fd``), and gloo and NCCL are told the
interface that carries that address.  Everything else is what Ray's ``TorchConfig`` does: gloo
on CPU, NCCL with GPUs, the process-group timeout, ``LOCAL_RANK`` and friends.

Only public APIs: Ray Train's ``Backend`` and ``TorchConfig``, torch's ``TCPStore``.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import timedelta

from ray.train.backend import Backend
from ray.train.torch import TorchConfig


def node_address_and_port() -> tuple[str, int]:
    """This node's Ray address and a port free on it (run on rank 0's node)."""
    import ray

    address = ray.util.get_node_ip_address()
    with socket.create_server((address, 0)) as probe:
        return address, probe.getsockname()[1]


def interface_of(address: str) -> str | None:
    """The network interface that carries ``address`` (``lo`` for 127.0.0.1), if any."""
    import psutil

    for name, addresses in psutil.net_if_addrs().items():
        if any(entry.address == address for entry in addresses):
            return name
    return None


def set_rank_variables() -> None:
    """The torchrun variables (``LOCAL_RANK``, ``RANK``, ...) from Ray Train's context."""
    import ray.train

    context = ray.train.get_context()
    os.environ.update({"LOCAL_RANK": str(context.get_local_rank()), "RANK": str(context.get_world_rank()),
                       "LOCAL_WORLD_SIZE": str(context.get_local_world_size()),
                       "WORLD_SIZE": str(context.get_world_size()), "NODE_RANK": str(context.get_node_rank())})


def join_process_group(backend: str, world_rank: int, world_size: int, address: str, port: int, timeout_s: int) -> None:
    """This worker's part of the group: rank 0 serves the store on ``address`` alone.  NCCL
    where the worker was given a GPU it can drive; gloo where it cannot (a node that declares
    GPUs without CUDA, such as a test cluster's logical GPUs)."""
    import torch
    import torch.distributed as dist

    if backend == "nccl" and not torch.cuda.is_available():
        backend = "gloo"

    interface = interface_of(address)
    if interface is not None:  # gloo's and NCCL's own sockets on the same interface
        os.environ.setdefault("GLOO_SOCKET_IFNAME", interface)
        os.environ.setdefault("NCCL_SOCKET_IFNAME", interface)
    if backend == "nccl" and "TORCH_NCCL_BLOCKING_WAIT" not in os.environ:
        # a timed-out collective fails, as under Ray's set-up
        os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    timeout = timedelta(seconds=timeout_s)
    if world_rank == 0:
        listener = socket.create_server((address, port))  # bound to the node address, not to every interface
        store = dist.TCPStore(address, port, world_size, is_master=True, timeout=timeout,
                              master_listen_fd=listener.detach())  # the store owns the socket now
    else:
        store = dist.TCPStore(address, port, world_size, is_master=False, timeout=timeout)
    dist.init_process_group(backend, store=store, rank=world_rank, world_size=world_size, timeout=timeout)


def leave_process_group(destroy: bool) -> None:
    import torch
    import torch.distributed as dist

    if destroy and dist.is_initialized():
        dist.destroy_process_group()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class NodeBoundTorchBackend(Backend):
    def on_start(self, worker_group, backend_config: NodeBoundTorchConfig) -> None:
        import ray

        backend = backend_config.backend or (
            "nccl" if worker_group.get_resources_per_worker().get("GPU", 0) > 0 else "gloo")
        address, port = worker_group.execute_single(0, node_address_and_port)
        worker_group.execute(set_rank_variables)
        ray.get([worker_group.execute_single_async(rank, join_process_group, backend=backend, world_rank=rank,
                                                   world_size=len(worker_group), address=address, port=port,
                                                   timeout_s=backend_config.timeout_s)
                 for rank in range(len(worker_group))])

    def on_shutdown(self, worker_group, backend_config) -> None:
        worker_group.execute(leave_process_group, destroy=len(worker_group) > 1)


@dataclass
class NodeBoundTorchConfig(TorchConfig):
    """``TorchConfig`` whose process group listens on the node address only (module docstring)."""

    @property
    def backend_cls(self):
        return NodeBoundTorchBackend

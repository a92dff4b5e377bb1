"""Updates collated ahead on a thread while the current one trains (``BatchingConfig.prefetch``),
in the same order as the sampler gives them.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

from platform.data.batching import ShardedBatches
from platform.data.tensors import Batch


class Prefetched:
    """The rest of the epoch's updates of ``sampler`` (``ShardedBatches.updates``), collated
    ``prefetch`` updates ahead by a thread (pinned for CUDA where ``pin``), or on the calling
    thread with ``prefetch`` 0: the same updates in the same order either way.

    ``state_dict()`` is the sampler's position after the last update *taken* (the thread may
    have collated further): what a checkpoint saves, so a resumed run continues at the next
    update it did not train.  ``wait_s`` adds up the time the caller waited for updates."""

    _END = object()

    def __init__(self, sampler: ShardedBatches, prefetch: int, pin: bool = False):
        self.sampler, self.prefetch, self.pin = sampler, prefetch, pin
        self.position = sampler.state_dict()
        self.wait_s = 0.0
        self._stop = threading.Event()
        self._queue: queue.Queue = queue.Queue(maxsize=max(prefetch, 1))
        self._thread: threading.Thread | None = None

    def state_dict(self) -> dict[str, Any]:
        return dict(self.position)

    def __iter__(self) -> Iterator[list[Batch]]:
        if self.prefetch == 0:
            yield from self._inline()
            return
        self._thread = threading.Thread(target=self._produce, name="collate", daemon=True)
        self._thread.start()
        while True:
            began = time.perf_counter()
            item = self._queue.get()
            self.wait_s += time.perf_counter() - began
            if item is self._END:
                return
            if isinstance(item, BaseException):
                raise item
            update, self.position = item
            yield update

    def _inline(self) -> Iterator[list[Batch]]:
        updates = self.sampler.updates()
        while True:
            began = time.perf_counter()
            update = next(updates, None)
            self.wait_s += time.perf_counter() - began
            if update is None:
                return
            self.position = self.sampler.state_dict()
            yield update

    def _produce(self) -> None:
        try:
            for update in self.sampler.updates():
                if self.pin:
                    update = [batch.pin_memory() for batch in update]
                if not self._put((update, self.sampler.state_dict())):
                    return
            self._put(self._END)
        except BaseException as error:  # noqa: BLE001 - raised on the training thread
            self._put(error)

    def _put(self, item) -> bool:
        """Queue ``item`` unless ``close`` came first (False then)."""
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def close(self) -> None:
        """Stop the thread (an epoch cut short): what it collated ahead is dropped."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

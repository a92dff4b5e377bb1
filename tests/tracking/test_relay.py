"""The MLflow relay actor stays up while the process that started it runs, whoever looks it up."""

import gc
import time

from platform.tracking import store


def test_the_relay_outlives_the_handle_its_starter_dropped(ray_cluster, tmp_path):
    ray = ray_cluster
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    store.start_relay(uri)  # the handle is dropped at once, as the CLIs do
    gc.collect()
    time.sleep(3)

    @ray.remote(num_cpus=0)
    def look_up(uri):  # a trial or a Train worker, in another process
        relay = store._find_relay(uri)
        return relay is not None and ray.get(relay.call.remote("search_experiments")) is not None

    assert ray.get(look_up.remote(uri)), "the relay was torn down when its starter dropped the handle"
    assert store.start_relay(uri) is not None  # and starting it again finds it

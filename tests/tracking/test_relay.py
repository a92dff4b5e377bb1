"""The MLflow relay actor stays up while the command that started it holds it, whoever looks it up,
and goes with it."""

import gc

from helpers import wait_for

from platform.tracking import relay


def actor_state(name: str) -> str | None:
    """The state Ray's state API gives the named actor (None if it has none)."""
    from ray.util.state import list_actors

    found = list_actors(filters=[("name", "=", name)], limit=10, timeout=10)
    return found[0].state if found else None


def a_dropped_actor_was_torn_down(ray, tmp_path, tag: str) -> None:
    """A control actor made like the relay, whose handle nobody keeps: once Ray has torn it
    down, it would have torn down a relay whose handles were dropped too."""
    control_name = f"nmt-control-{tag}-{tmp_path.name}"
    control = ray.remote(num_cpus=0)(relay.MlflowRelay).options(name=control_name).remote(
        f"sqlite:///{tmp_path}/control-{tag}.db")  # a store of its own: two first users of one sqlite file race
    ray.get(control.call.remote("search_experiments"))  # up and answering
    del control
    gc.collect()
    wait_for(lambda: actor_state(control_name) == "DEAD", 60, "Ray to tear down an actor whose handle was dropped")


def test_the_relay_lives_while_its_command_holds_it_and_goes_after(ray_cluster, tmp_path):
    """While a command holds its relay (``held_relay``) the relay answers other processes even
    after Ray tore down a control actor whose handle was dropped, and a second start that finds
    it and drops its handle does not stop it; once the command's block ends it goes."""
    ray = ray_cluster
    uri = f"sqlite:///{tmp_path}/mlflow.db"

    @ray.remote(num_cpus=0)
    def look_up(uri):  # a trial or a Train worker, in another process
        found = relay.find_relay(uri)
        return found is not None and ray.get(found.call.remote("search_experiments")) is not None

    with relay.held_relay(uri) as held:
        # up and answering, as a command's first call finds it (Ray creates the actor in the background:
        # on a busy machine it can still be PENDING_CREATION after the control actor below has come and gone)
        assert ray.get(held.call.remote("search_experiments")) is not None
        a_dropped_actor_was_torn_down(ray, tmp_path, "first")
        assert actor_state(relay.relay_name(uri)) == "ALIVE"
        assert ray.get(look_up.remote(uri)), "the relay was torn down while its command held it"
        assert relay.start_relay(uri) is not None  # a trial's run finds it and drops the handle
        gc.collect()
        a_dropped_actor_was_torn_down(ray, tmp_path, "second")
        assert actor_state(relay.relay_name(uri)) == "ALIVE", "finding the relay again tore it down"
        assert ray.get(look_up.remote(uri))
    gc.collect()
    wait_for(lambda: actor_state(relay.relay_name(uri)) == "DEAD", 60, "the relay to go with its command")


def test_one_runs_calls_wait_for_each_other_while_another_runs_calls_go_on(tmp_path):
    """The relay's promise for the calls it carries (its actor's threads run several at once):
    a call about a run waits for the one before it about the same run, so a reopen stuck in
    MLflow's retries cannot land after the close that followed it; a call about another run
    does not wait.  The actor's class itself, in threads, on a real store."""
    import threading

    events, release = [], threading.Event()
    actor = relay.MlflowRelay(f"sqlite:///{tmp_path}/mlflow.db")

    def stuck(client, run_id):
        events.append(f"{run_id} first")
        release.wait(30)
        events.append(f"{run_id} first done")

    def then(client, run_id, name):
        events.append(name)

    calls = [threading.Thread(target=actor.run, args=(stuck, ("run-a",), {}))]
    calls[0].start()
    wait_for(lambda: events == ["run-a first"], 30, "run a's first call")
    calls += [threading.Thread(target=actor.run, args=(then, ("run-a", "run-a second"), {})),
              threading.Thread(target=actor.run, args=(then, ("run-b", "run-b's call"), {}))]
    for call in calls[1:]:
        call.start()
    wait_for(lambda: "run-b's call" in events, 30, "run b's call, while run a's first is stuck")
    assert "run-a second" not in events  # behind run a's first
    release.set()
    for call in calls:
        call.join(timeout=30)
    assert events.index("run-a first done") < events.index("run-a second")

"""A trial's MLflow run as the sweep's driver sees it: the tags that identify it, the sweep's
closing of it (``close_trial_run``), and what of the tracking URI a callback that Ray Tune
pickles may hold (``held_tracking_uri``)."""

from __future__ import annotations

import os

from platform.errors import UserError
from platform.redaction import redact
from platform.tracking import runs
from platform.tracking import spool as outage

TRACKING_URI_ENV = "MLFLOW_TRACKING_URI"


def trial_run_tags(parent_run_id: str, trial_id: str) -> dict[str, str]:
    """The tags that identify a trial's MLflow run: its sweep's parent run and its Tune trial id
    (a trial id alone may recur in another sweep of the experiment)."""
    return {"mlflow.parentRunId": parent_run_id, "trial_id": trial_id}


def held_tracking_uri(tracking_uri: str) -> str | None:
    """What a callback that Ray Tune pickles into the sweep's saved state may hold of the tracking
    URI: the URI, or None where it carries a credential.  Such a URI can only come from
    ``$MLFLOW_TRACKING_URI`` (the command line refuses one), where ``tracking_uri_of`` reads it
    when it is needed, in the driver's process."""
    if redact(tracking_uri) == tracking_uri:
        return tracking_uri
    if os.environ.get(TRACKING_URI_ENV) != tracking_uri:
        raise UserError(f"{redact(tracking_uri)}: a tracking URI with a password is read from ${TRACKING_URI_ENV} "
                        f"only (what Ray Tune saves must not hold it)")
    return None


def tracking_uri_of(held: str | None) -> str:
    return held if held is not None else os.environ[TRACKING_URI_ENV]


def close_trial_run(tracking_uri: str, experiment: str, parent_run_id: str, trial_id: str, run_id: str | None,
                    record: outage.Record, spool: str) -> str | None:
    """``record`` (the sweep's closing) sent to the trial's run ``run_id`` (the one its reports
    name, else found by its tags) after what the trial kept in ``spool``, or kept there while the
    store is down (returns the run id then).  A trial that never reported, during an outage,
    closes its run itself (its end is kept in the spool when the store does not answer)."""
    if run_id is None:
        if outage.store_down(tracking_uri) is not None:
            return None
        run_id = runs.find_run(tracking_uri, experiment, trial_run_tags(parent_run_id, trial_id))
        if run_id is None:
            return None
    if outage.close(tracking_uri, run_id, record, spool):
        return None
    print(f"MLflow at {redact(tracking_uri)} does not answer: the close of trial {trial_id}'s run ({run_id}) is "
          f"kept in {outage.Spool(spool)}; it is delivered once the server answers", flush=True)
    return run_id

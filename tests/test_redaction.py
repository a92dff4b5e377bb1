"""The one redaction rule (``platform.redaction``) and the places that apply it: MLflow params,
tags and dataset inputs, the console of every command (stderr; stdout where it is not data), a
sweep's ``console.log``.  The multi-node S3 test and the autoscaling sweep (its head restarted) plant secrets in a
dataset URI and a database URL and search everything a real run leaves for them."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
from helpers import ROOT, runs_of

from platform.redaction import MASK, RedactingFormatter, redact

PLANTED = "pl4nted-S3cret"


@pytest.mark.parametrize("text,shown", [
    (f"s3://AKIAEXAMPLE:{PLANTED}@bucket/datasets/demo", "s3://AKIAEXAMPLE:***@bucket/datasets/demo"),
    (f"postgresql://nmt:{PLANTED}@db.example:5432/mlflow", "postgresql://nmt:***@db.example:5432/mlflow"),
    (f"error: s3://k:{PLANTED}@b/x: Access Denied", "error: s3://k:***@b/x: Access Denied"),
    (f"s3://b/p?endpoint_override=127.0.0.1:9000&secret_key={PLANTED}&scheme=http",
     "s3://b/p?endpoint_override=127.0.0.1:9000&secret_key=***&scheme=http"),
    (f"https://h/x?X-Amz-Signature={PLANTED}&X-Amz-Credential={PLANTED}",
     "https://h/x?X-Amz-Signature=***&X-Amz-Credential=***"),
    (f"NMT_TRACKING_DB=postgresql://u:{PLANTED}@h/m mlflow server",
     "NMT_TRACKING_DB=postgresql://u:***@h/m mlflow server"),
    (f"s3://AKIAEXAMPLE:wJal/{PLANTED}+nF@bucket/x", "s3://AKIAEXAMPLE:***@bucket/x"),  # AWS secrets hold "/"
    (f"postgresql://u:p#{PLANTED}?x@h/db", "postgresql://u:***@h/db"),
    (f"s3://b/x?X-Amz-Security-Token={PLANTED}&sslpassword={PLANTED}&token={PLANTED}",
     "s3://b/x?X-Amz-Security-Token=***&sslpassword=***&token=***"),
])
def test_a_password_in_a_uri_or_a_credential_in_its_query_is_masked(text, shown):
    assert redact(text) == shown and PLANTED not in redact(text)
    assert redact(redact(text)) == redact(text)


P = PLANTED
# what users paste: headers, environment lines, JSON and YAML, tokens as a URL's user, camelCase
# names, other separators; each keeps everything but the secret
ADVERSARIAL = [
    (f"Authorization: Bearer {P}", "Authorization: Bearer ***"),
    (f"authorization: basic {P}", "authorization: basic ***"),
    (f"curl -H 'Authorization: Bearer {P}' https://h/api", "curl -H 'Authorization: Bearer ***' https://h/api"),
    (f'-H "Authorization: Token {P}"', '-H "Authorization: Token ***"'),
    (f"AWS_SECRET_ACCESS_KEY={P}", "AWS_SECRET_ACCESS_KEY=***"),
    (f"export AWS_SECRET_ACCESS_KEY={P} AWS_REGION=us-east-1", "export AWS_SECRET_ACCESS_KEY=*** AWS_REGION=us-east-1"),
    (f"GITHUB_TOKEN={P} python -m platform.tune", "GITHUB_TOKEN=*** python -m platform.tune"),
    (f"PGPASSWORD={P} psql", "PGPASSWORD=*** psql"),
    (f"password={P}", "password=***"),
    (f"the password={P} did not work", "the password=*** did not work"),
    (f"api_key={P}", "api_key=***"),
    (f"--api-key={P}", "--api-key=***"),
    (f"MLFLOW_TRACKING_PASSWORD={P}", "MLFLOW_TRACKING_PASSWORD=***"),
    (f'{{"password": "{P}", "user": "nmt"}}', '{"password": "***", "user": "nmt"}'),
    (f'{{"api_key":"{P}"}}', '{"api_key":"***"}'),
    (f"{{'secret': '{P}'}}", "{'secret': '***'}"),
    (f"password: {P}", "password: ***"),
    (f"  aws_secret_access_key: {P}\n  region: us-east-1", "  aws_secret_access_key: ***\n  region: us-east-1"),
    (f"client_secret = {P}", "client_secret = ***"),
    (f"https://{P}@github.com/org/repo.git", "https://***@github.com/org/repo.git"),
    (f"git+https://{P}@github.com/org/repo", "git+https://***@github.com/org/repo"),
    (f"http://{P}@127.0.0.1:5000", "http://***@127.0.0.1:5000"),
    (f"https://user:{P}@h/x", "https://user:***@h/x"),
    (f"apiKey={P}", "apiKey=***"),
    (f"sessionToken={P}", "sessionToken=***"),
    (f'{{"accessToken": "{P}"}}', '{"accessToken": "***"}'),
    (f"clientSecret: {P}", "clientSecret: ***"),
    (f"https://h/x?a=1;token={P}", "https://h/x?a=1;token=***"),
    (f"https://h/x?a=1&amp;token={P}&amp;b=2", "https://h/x?a=1&amp;token=***&amp;b=2"),
    (f"https://h/x?key={P}", "https://h/x?key=***"),
    (f"https://h/x?sig={P}&se=2026", "https://h/x?sig=***&se=2026"),
    (f"postgresql://u@h/db?password={P}", "postgresql://u@h/db?password=***"),
    (f"postgresql://u@h/db?sslmode=require&sslpassword={P}", "postgresql://u@h/db?sslmode=require&sslpassword=***"),
    (f"mysql://root:{P}@db/mlflow", "mysql://root:***@db/mlflow"),
    (f"POSTGRESQL://u:{P}@h/db", "POSTGRESQL://u:***@h/db"),
    (f"cockroachdb://u:{P}@h:26257/db", "cockroachdb://u:***@h:26257/db"),
    (f"Cookie: session_id=1; auth_token={P}", "Cookie: session_id=1; auth_token=***"),
    (f"X-Api-Key: {P}", "X-Api-Key: ***"),
    (f"private_key={P}", "private_key=***"),
    (f"db passphrase: '{P}'", "db passphrase: '***'"),
    (f"error: s3://k:{P}@b/x and Authorization: Bearer {P}", "error: s3://k:***@b/x and Authorization: Bearer ***"),
    (f"[{{\"token\": \"{P}\"}}]", "[{\"token\": \"***\"}]"),
]


@pytest.mark.parametrize("text,shown", ADVERSARIAL)
def test_what_users_paste_is_masked(text, shown):
    assert len(ADVERSARIAL) >= 40
    assert redact(text) == shown and PLANTED not in redact(text)
    assert redact(redact(text)) == redact(text)


@pytest.mark.parametrize("text", ["postgresql://nmt@127.0.0.1:5432/mlflow", "sqlite:////tmp/runs/mlflow.db",
                                  "s3://b/x?tokenizer=spm&max_tokens=4096&keyword=a&passfile=/p&sslkey=/k",
                                  "http://127.0.0.1:5000/#/experiments/1?workflowType=machine_learning",
                                  "http://127.0.0.1:5000", "s3://bucket/runs?region=us-east-1", "optim.lr=0.002",
                                  "trial 3f2a epoch 1/2  dev_bleu 12.5", "/data/ja-en/train.parquet",
                                  "error: --set expects key=value, got 'x'", "unknown key: model.p_encc",
                                  "tokenizer: 13a", "max_tokens=4096", "monkey=1", "keyword: x",
                                  "[  0:06] trial e343c9e7 started  p_enc=1", "RAY_AUTH_MODE=token",
                                  "passfile=/home/u/.pgpass", "--tokenize ja-mecab", "time: 0m46s",
                                  "Ray session: /tmp/ray/session_2026-11-28", "postgresql://mlflow@127.0.0.1/optuna"])
def test_everything_else_is_left_as_it_was(text):
    assert redact(text) == text


def test_params_tags_errors_and_dataset_inputs_are_recorded_redacted(tmp_path):
    """Against a real MLflow store: what ``runs`` records never holds the password."""
    from platform.tracking import runs

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    data = f"s3://AKIAEXAMPLE:{PLANTED}@bucket/datasets/demo"
    meta = {"splits": {"train": {"files": ["train.ja"], "pairs_written": 10}}, "src_lang": "ja", "tgt_lang": "en"}
    run_id = runs.start_run(uri, "secrets", "r1", {"data": data}, {"source_data": data}, "model: {}\n")
    runs.log_dataset_inputs(uri, run_id, data, meta)
    runs.tag_run(uri, run_id, {"init_from": data})
    runs.end_run(uri, run_id, error=OSError(f"cannot read {data}/train.parquet"))
    _, (run,) = runs_of(uri, "secrets")
    recorded = [*run.data.params.values(), *run.data.tags.values(),
                *(i.dataset.source + i.dataset.name for i in run.inputs.dataset_inputs)]
    assert not [value for value in recorded if PLANTED in value]
    assert run.data.params["data"] == f"s3://AKIAEXAMPLE:{MASK}@bucket/datasets/demo"
    assert (tmp_path / "mlflow.db").read_bytes().count(PLANTED.encode()) == 0


CLI = """
import sys
from platform.errors import UserError, run_cli

def main(argv):
    print("reading s3://AKIAEXAMPLE:{planted}@bucket/data")
    print("writing s3://AKIAEXAMPLE:{planted}@bucket/data", file=sys.stderr)
    raise UserError("s3://AKIAEXAMPLE:{planted}@bucket/data: Access Denied")

run_cli(main, data_on_stdout=sys.argv[1] == "data")
"""


def test_every_commands_console_shows_no_password_but_data_on_stdout_stays_as_it_was():
    """``run_cli``, which every command runs through: its stdout and stderr, the error line
    included, are redacted; a command whose stdout is its data (translations) keeps that stdout."""
    def command(kind: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", CLI.format(planted=PLANTED), kind], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)

    shown = command("console")
    assert shown.returncode == 2 and PLANTED not in shown.stdout + shown.stderr
    assert "reading s3://AKIAEXAMPLE:***@bucket/data" in shown.stdout
    assert "error: s3://AKIAEXAMPLE:***@bucket/data: Access Denied" in shown.stderr
    data = command("data")
    assert f"reading s3://AKIAEXAMPLE:{PLANTED}@bucket/data" in data.stdout and PLANTED not in data.stderr


def test_a_sweeps_log_file_shows_no_password():
    record = logging.LogRecord("mlflow", logging.WARNING, __file__, 1, "retrying %s",
                               (f"postgresql://nmt:{PLANTED}@127.0.0.1:5432/mlflow",), None)
    assert RedactingFormatter("%(message)s").format(record) == "retrying postgresql://nmt:***@127.0.0.1:5432/mlflow"


FAKE_PG_DUMP = """#!/bin/sh
printf '%s\\n' "$@" > "$(dirname "$0")/argv"
printf '%s' "$PGPASSWORD" > "$(dirname "$0")/password"
printf 'PGDMP'
"""


def test_a_backup_hands_pg_dump_the_password_in_its_environment_not_on_its_command_line(tmp_path):
    """``ps`` shows every process's command line to every user: ``pg_dump`` gets the URL
    without its password, and the password in ``PGPASSWORD``; the console line hides it."""
    fake = tmp_path / "bin" / "pg_dump"
    fake.parent.mkdir()
    fake.write_text(FAKE_PG_DUMP)
    fake.chmod(0o755)
    (fake.parent / "pg_restore").write_text("#!/bin/sh\ncat\n")  # the dump's content, as is
    (fake.parent / "pg_restore").chmod(0o755)
    database = f"postgresql://nmt:{PLANTED}@127.0.0.1:5432/mlflow"
    result = subprocess.run([sys.executable, "-m", "platform.backup", "--database", database, "--to",
                             str(tmp_path / "backups"), "--pg-dump", str(fake),
                             "--pg-restore", str(fake.parent / "pg_restore")],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    argv = (fake.parent / "argv").read_text()
    assert PLANTED not in argv and "--dbname=postgresql://nmt@127.0.0.1:5432/mlflow" in argv
    assert (fake.parent / "password").read_text() == PLANTED
    assert "backed up postgresql://nmt:***@127.0.0.1:5432/mlflow" in result.stderr
    assert PLANTED not in result.stdout + result.stderr



def test_a_study_storage_password_stays_out_of_what_tune_pickles(postgres, monkeypatch, tmp_path):
    """The Optuna storage the searcher holds (Ray Tune pickles it into the sweep's saved state)
    keeps the URL without its password, in whatever form the URL carries it; libpq reads it from
    a password file of this storage's own (the role below may log in with its password only), and
    the process's environment is left alone, so other connections keep their ``~/.pgpass``."""
    import pickle
    import stat

    import optuna
    import psycopg

    from platform.errors import UserError
    from platform.sweeps.study import kept_url, load_study, open_storage

    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("NMT_PASSWORD_FILES", str(tmp_path / "pgpass"))
    url = postgres.database("pickled_study")
    with psycopg.connect(url, autocommit=True) as connection:  # a role that must give its password
        connection.execute(f"create role sweeper login password '{PLANTED}:x'")
        connection.execute("grant all on schema public to sweeper")
        connection.execute("alter database pickled_study owner to sweeper")
    hba = postgres.data / "pg_hba.conf"
    hba.write_text("host all sweeper 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
    postgres._run("pg_ctl", "-D", str(postgres.data), "reload")
    with_password = url.replace("://nmt@", f"://sweeper:{PLANTED}%3Ax@")
    for form in (with_password, with_password.replace("postgresql", "POSTGRESQL"),
                 url.replace("://nmt@", "://sweeper@") + f"?password={PLANTED}%3Ax"):
        storage = open_storage(form)
        optuna.create_study(study_name="s", storage=storage, load_if_exists=True).optimize(
            lambda trial: trial.suggest_float("x", 0, 1), 1)
        assert PLANTED.encode() not in pickle.dumps(storage), form
        assert "PGPASSWORD" not in os.environ
    assert len(load_study(with_password, "s").trials) == 3
    files = list((tmp_path / "pgpass").iterdir())
    assert files and all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)
    with pytest.raises(UserError, match="without a passphrase"):
        kept_url(f"postgresql://u@h/db?sslpassword={PLANTED}")
    with pytest.raises(UserError, match="option file") as refused:
        kept_url(f"mysql://root:{PLANTED}@db/optuna")
    assert PLANTED not in str(refused.value)


def test_a_prepared_datasets_metadata_keeps_no_credential_of_its_command_line(tmp_path, monkeypatch):
    """``meta.json`` records the command that made the dataset, as typed: without the secret of a
    URI in it (an ``--out s3://KEY:SECRET@bucket/...``)."""
    from platform.prepare import main

    out = tmp_path / "small"
    monkeypatch.setattr(sys, "argv", ["platform.prepare", "--out", f"s3://AKIAEXAMPLE:{PLANTED}@bucket/small"])
    assert main(["--data", "demo", "--demo-sizes", "200,20,20", "--vocab-size", "200", "--out", str(out),
                 "--quiet"]) == 0
    meta = (out / "meta.json").read_text()
    assert "s3://AKIAEXAMPLE:***@bucket/small" in meta and PLANTED not in meta


@pytest.mark.parametrize("module,flag", [("tune", "--study-storage"), ("tune", "--tracking-uri"),
                                         ("train", "--tracking-uri")])
def test_a_password_on_the_command_line_is_refused_before_anything_runs(module, flag, capsys):
    """A command line shows in ``ps`` and is kept as a Ray job's entrypoint: the password comes
    from the environment or ``~/.pgpass`` instead."""
    import importlib

    from helpers import run_in_process

    main = importlib.import_module(f"platform.{module}").main
    extra = ["--model", "dbsa"] if module == "train" else ["--space", "dbsa"]
    result = run_in_process(main, [*extra, flag, f"postgresql://nmt:{PLANTED}@127.0.0.1:5432/db"], capsys)
    assert result.returncode == 2 and "shows in ps" in result.stderr and PLANTED not in result.stderr


def test_the_sweeps_callbacks_that_tune_pickles_hold_no_tracking_password(monkeypatch):
    """Ray Tune pickles the sweep's callbacks into its saved state (``tuner.pkl``): the one that
    closes trial runs holds a tracking URI with a password as nothing, and reads it from
    ``$MLFLOW_TRACKING_URI`` (where alone such a URI comes from) when it closes a run."""
    import ray.cloudpickle

    from platform.errors import UserError
    from platform.sweeps.callbacks import CloseTrialRuns
    from platform.sweeps.trial_runs import held_tracking_uri, tracking_uri_of

    uri = f"postgresql://nmt:{PLANTED}@127.0.0.1:5432/mlflow"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    callback = CloseTrialRuns(uri, "sweep", "0123abcd", 4, "/tmp/runs/mlflow-spool")
    assert PLANTED.encode() not in ray.cloudpickle.dumps(callback)
    assert tracking_uri_of(held_tracking_uri(uri)) == uri
    assert held_tracking_uri("http://127.0.0.1:5000") == "http://127.0.0.1:5000"
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    with pytest.raises(UserError, match="MLFLOW_TRACKING_URI"):
        held_tracking_uri(uri)

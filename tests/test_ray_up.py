"""``ray up ray_cluster.yaml`` for real, through Ray's own launcher: the head is this machine,
reached over SSH on loopback as a user of its own, and the cluster file's setup and start
commands run as Ray runs them on AWS (``bash --login -c -i '...'`` through ``ssh``).

The file the test brings up is ``ray_cluster.yaml`` with only what cannot run here replaced:
the provider (Ray's ``local`` provider, head 127.0.0.1, no workers), the authentication (a key
of the test's, through an ``sshd -i`` the test runs as ssh's ProxyCommand: no SSH port is
opened), no Docker (and so no ``initialization_commands``, which only prepare the container's
mount), and the bucket (moto's S3 server on loopback).  Every ``setup_commands``,
``head_setup_commands`` and ``head_start_ray_commands`` line runs as written."""

from __future__ import annotations

import grp
import hashlib
import json
import os
import pwd
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

import psutil
import pytest
import yaml
from helpers import ROOT, fail_or_skip, wait_for
from servers import MotoServer

BUCKET = "nmt-ray-up"
SERVICES = ("mlflow", "backup", "optuna-dashboard")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _missing() -> str | None:
    """What this machine lacks for a loopback ``ray up``, or None."""
    if os.geteuid() != 0:
        return "needs root (it makes the head's user and runs sshd)"
    for program in ("/usr/sbin/sshd", "ssh", "ssh-keygen", "rsync", "useradd", "runuser"):
        if shutil.which(program) is None:
            return f"needs {program} (Debian: openssh-server, openssh-client, rsync, passwd)"
    if not list(Path("/usr/lib/postgresql").glob("*/bin/initdb")):
        return "needs PostgreSQL's server programs (Debian: postgresql)"
    return None


class LoopbackHead:
    """This machine as a ``ray up`` head: a user of its own (the head's PostgreSQL refuses
    root), its home a fresh directory, and ``sshd -i`` as ssh's ProxyCommand, so Ray's
    SSHCommandRunner logs in with the test's key to 127.0.0.1 and no SSH port is opened.

    The user's ``~/.bashrc`` (which Ray's login shells source) holds what the node's image and
    instance role would give it on AWS: the project's Python on PATH (the install stamp already
    there, as on a reused node, so nothing is downloaded), moto's S3 endpoint and keys, Ray's
    files under the home, and Ray's node address on loopback."""

    def __init__(self, moto: MotoServer):
        self.base = Path(tempfile.mkdtemp(prefix="nmt-up-"))  # short: Ray's socket paths live under it
        self.base.chmod(0o755)
        self.user = f"nmtup{secrets.token_hex(3)}"
        self.home, self.laptop = self.base / "home", self.base / "laptop"
        self.moto, self.opened = moto, []  # opened: (directory, its mode before) for the user's Python
        self.down = False  # whether the test reached its ray down

    def create(self) -> None:
        # password "*": none, but not a locked account ("!"), which sshd refuses without PAM
        subprocess.run(["useradd", "--home-dir", str(self.home), "--create-home", "--shell", "/bin/bash",
                        "--user-group", "--password", "*", self.user], check=True, capture_output=True, timeout=60)
        self._let_the_user_run_python()
        keys = self.base / "keys"
        keys.mkdir()
        for key in ("host", "user"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / key)], check=True,
                           timeout=60)
        shutil.copy(keys / "user.pub", keys / "authorized_keys")
        (keys / "sshd_config").write_text(
            f"HostKey {keys / 'host'}\nAuthorizedKeysFile {keys / 'authorized_keys'}\nAllowUsers {self.user}\n"
            "StrictModes no\nUsePAM no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "PermitRootLogin no\nPidFile none\nLogLevel ERROR\n")
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation directory
        self.key, self.proxy = keys / "user", f"/usr/sbin/sshd -i -f {keys / 'sshd_config'}"
        env = {**self.moto.env(), "PATH": f"{Path(sys.executable).parent}:$PATH", "RAY_TMPDIR": str(self.base / "ray"),
               "TMPDIR": str(self.base / "ray"),
               "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # a single-machine head: Ray's node address 127.0.0.1
               "RAY_USAGE_STATS_ENABLED": "0"}
        (self.base / "ray").mkdir()
        stamp = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + (ROOT / "constraints.txt").read_bytes())
        (self.home / f".syntax-nmt-installed-{stamp.hexdigest()[:16]}").touch()
        (self.home / ".bashrc").write_text("".join(f'export {k}="{v}"\n' for k, v in env.items()))
        for path in (self.home, self.base / "ray"):
            for found in [path, *path.rglob("*")]:
                shutil.chown(found, self.user, self.user)
        # the laptop: its own home, with the cluster's token that ray up copies to the head
        (self.laptop / ".ray").mkdir(parents=True)
        (self.base / "laptop-tmp").mkdir()
        (self.laptop / ".ray" / "auth_token").write_text(secrets.token_hex(32))
        (self.laptop / ".ray" / "auth_token").chmod(0o600)

    def _let_the_user_run_python(self) -> None:
        """Every directory above this interpreter, its venv and the checkout that others cannot
        enter (``/root`` where Python came with pyenv) is opened for entering (o+x, not
        listing) until the test ends."""
        needed = {Path(sys.executable).resolve(), Path(sys.prefix), Path(sys.base_prefix), ROOT}
        for path in needed:
            for directory in path.parents:
                mode = directory.stat().st_mode
                if not mode & stat.S_IXOTH and directory not in [d for d, _ in self.opened]:
                    self.opened.append((directory, stat.S_IMODE(mode)))
                    directory.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)

    def cluster_file(self) -> Path:
        """``ray_cluster.yaml`` with the provider, authentication, Docker and bucket of this machine."""
        text = (ROOT / "ray_cluster.yaml").read_text()
        assert text.count("CHANGE-ME-bucket") == 1
        config = yaml.safe_load(text.replace("CHANGE-ME-bucket", BUCKET))
        config["provider"] = {"type": "local", "head_ip": "127.0.0.1", "worker_ips": []}
        config["auth"] = {"ssh_user": self.user, "ssh_private_key": str(self.key), "ssh_proxy_command": self.proxy}
        for docker_only in ("docker", "initialization_commands", "available_node_types", "head_node_type"):
            config.pop(docker_only)
        path = self.base / "cluster.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def laptop_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
        return {**env, "HOME": str(self.laptop), "RAY_TMPDIR": str(self.base / "laptop-ray"), "RAY_AUTH_MODE": "token",
                "TMPDIR": str(self.base / "laptop-tmp"),
                "RAY_USAGE_STATS_ENABLED": "0"}

    def ray(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        """A ``ray`` command run from the laptop (``ray up``, ``ray down``, ``ray job submit``)."""
        result = subprocess.run([str(Path(sys.executable).parent / "ray"), *args], cwd=ROOT, env=self.laptop_env(),
                                capture_output=True, text=True, timeout=timeout)
        assert result.returncode == 0, f"ray {' '.join(args)}:\n{result.stdout[-6000:]}\n{result.stderr[-6000:]}"
        return result

    def git_status(self) -> list[str]:
        return git_status(self.home / "syntax-nmt", "runuser", "-u", self.user, "--")

    @property
    def state(self) -> Path:
        return self.home / "syntax-nmt-state"

    def recorded(self) -> dict[str, dict]:
        return {name: json.loads((self.state / f"{name}.pid").read_text()) for name in SERVICES
                if (self.state / f"{name}.pid").exists()}

    def processes(self) -> list[psutil.Process]:
        uid = pwd.getpwnam(self.user).pw_uid
        return [p for p in psutil.process_iter(["uids"]) if p.info["uids"] and p.info["uids"].real == uid]

    def end(self) -> list[str]:
        """End what the head's commands started, by the pids they recorded (the services' pid
        files, PostgreSQL's postmaster.pid); returns the command lines of any process of the
        head's user still running after that (and ends those too), then removes the user."""
        left: list[str] = []
        try:
            for name in SERVICES:
                subprocess.run([sys.executable, "-m", "platform.service", "stop", name, "--state", str(self.state)],
                               cwd=ROOT, capture_output=True, timeout=60)
            postmaster = self.state / "postgres" / "postmaster.pid"
            if postmaster.exists():
                pid = int(postmaster.read_text().split()[0])
                pg = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))[-1]
                subprocess.run(["runuser", "-u", self.user, "--", str(pg), "-D", str(self.state / "postgres"),
                                "-m", "fast", "-w", "stop"], capture_output=True, timeout=60)
                wait_for(lambda: not psutil.pid_exists(pid), 30, "PostgreSQL's postmaster to end")
            # ray up's SSH sessions (ssh's ControlPersist keeps them 10 s): the test's own sshd -i
            sessions = [p for p in self.processes() if p.name() == "sshd"]
            for session in sessions:
                session.terminate()
            psutil.wait_procs(sessions, timeout=10)
            still = self.processes()
            left = [" ".join(p.cmdline()[:4]) for p in still if p.is_running()]
            for process in still:  # the head's user is the test's own: nothing else runs as it
                process.kill()
            psutil.wait_procs(still, timeout=10)
        finally:
            subprocess.run(["userdel", self.user], capture_output=True, timeout=60)
            try:
                grp.getgrnam(self.user)
                subprocess.run(["groupdel", self.user], capture_output=True, timeout=60)
            except KeyError:
                pass
            for directory, mode in reversed(self.opened):
                directory.chmod(mode)
            shutil.rmtree(self.base, ignore_errors=True)
        return left


def git_status(checkout: Path, *user: str) -> list[str]:
    """What ``git status`` reports changed in tracked files (as the drivers' commit tag reads it)."""
    result = subprocess.run([*user, "git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=no"],
                            capture_output=True, text=True, timeout=60, check=True)
    return sorted(result.stdout.splitlines())


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - loopback
            return response.status == 200
    except OSError:
        return False


@pytest.fixture
def loopback_head(own_cluster):
    missing = _missing()
    if missing:
        fail_or_skip(f"a loopback ray up {missing}")
    moto = MotoServer()
    moto.start({**os.environ})
    moto.create_bucket(BUCKET)
    head = LoopbackHead(moto)
    try:
        head.create()
        yield head
    finally:
        left = head.end()
        moto.stop()
    assert not left or not head.down, f"still running after ray down and the recorded pids were ended: {left}"


def test_ray_up_starts_the_heads_services_once_and_a_sweep_submitted_as_a_job_lands_in_its_mlflow(loopback_head):
    head = loopback_head
    cluster = head.cluster_file()
    head.ray("up", "-y", "--no-config-cache", str(cluster))
    # the services: MLflow's server on its database, both databases, optuna-dashboard, a backup
    assert http_ok("http://127.0.0.1:5000/health")
    assert http_ok("http://127.0.0.1:8080/")
    first = head.recorded()
    assert set(first) == set(SERVICES), first
    # the checkout reached the head entry by entry: git there sees what it sees here (the runs'
    # commit is not "-dirty" for a missing file), and no virtual environment came with it
    assert head.git_status() == git_status(ROOT)
    assert not [p.name for p in (head.home / "syntax-nmt").iterdir() if (p / "pyvenv.cfg").exists()]
    import boto3

    s3 = boto3.client("s3", endpoint_url=head.moto.endpoint, aws_access_key_id="testing",
                      aws_secret_access_key="testing", region_name="us-east-1")

    def dumps():
        listed = s3.list_objects_v2(Bucket=BUCKET, Prefix="syntax-nmt/backups/").get("Contents", [])
        names = {Path(o["Key"]).name.split("-")[0] for o in listed}
        return names if names >= {"mlflow", "optuna"} else None

    wait_for(dumps, 60, "the backup loop's first dumps of both databases in the bucket")
    assert {"mlflow", "optuna"} <= databases(head)

    # a smoke sweep submitted as docs/cluster.md says (a Ray job, through the dashboard's port),
    # with the environment the head's shells have: it logs to the head's MLflow server, and its
    # live study is in the head's PostgreSQL
    sweep = ("cd ~/syntax-nmt && python -m platform.prepare --data demo --demo-sizes 1000,50,50 --out data/small "
             "--quiet && python -m platform.tune --space dbsa --smoke --address auto --data data/small "
             "--num-trials 1 --max-epochs 1 --cpus-per-worker 1 --set max_steps_per_epoch=3 --set eval.max_sentences=8 "
             "--name up-1")
    job = head.ray("job", "submit", "--address", "http://127.0.0.1:8265", "--", "bash", "-c", sweep)
    assert "best: trial" in job.stdout, job.stdout[-3000:]
    from helpers import runs_of

    client, runs = runs_of("http://127.0.0.1:5000", "syntax-nmt")
    assert len(runs) == 2 and {r.info.status for r in runs} == {"FINISHED"}, [(r.info.run_name, r.info.status)
                                                                              for r in runs]
    assert "up-1" in studies(head)
    with urllib.request.urlopen("http://127.0.0.1:8080/api/studies", timeout=10) as answer:
        assert [s["study_name"] for s in json.loads(answer.read())["study_summaries"]] == ["up-1"]

    # a second ray up (a changed file, a restarted laptop) starts no second copy of any service
    head.ray("up", "-y", "--no-config-cache", str(cluster))
    assert head.recorded() == first
    assert http_ok("http://127.0.0.1:5000/health")
    servers = [p for p in head.processes() if p.cmdline()[1:3] == [str(Path(sys.executable).parent / "mlflow"),
                                                                     "server"]]
    assert [p.pid for p in servers] == [first["mlflow"]["pid"]], servers
    head.ray("down", "-y", str(cluster))
    head.down = True
    # what the head's commands started ends by the pids they recorded (the fixture's end(),
    # which fails the test if anything of the head's user outlives it)


def psql(head: LoopbackHead, query: str, database: str = "postgres") -> list[str]:
    pg = sorted(Path("/usr/lib/postgresql").glob("*/bin/psql"))[-1]
    result = subprocess.run([str(pg), "-h", "127.0.0.1", "-U", "mlflow", "-d", database, "-tAc", query],
                            capture_output=True, text=True, timeout=60, check=True)
    return result.stdout.split()


def databases(head: LoopbackHead) -> set[str]:
    return set(psql(head, "select datname from pg_database"))


def studies(head: LoopbackHead) -> set[str]:
    return set(psql(head, "select study_name from studies", database="optuna"))

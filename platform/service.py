"""``python -m platform.service``: start, stop and look at the long-running services of a
``ray up`` head (the MLflow server, the backup loop, optuna-dashboard), each known by the pid file
it recorded, never by a search of the process table.

    python -m platform.service start mlflow --state ~/syntax-nmt-state --cwd ~ \
        --ready http://127.0.0.1:5000/health -- mlflow server ...
    python -m platform.service status mlflow --state ~/syntax-nmt-state
    python -m platform.service stop mlflow --state ~/syntax-nmt-state

``start`` does nothing when the service its pid file names still runs (a second ``ray up``
starts no second copy); otherwise it starts the command in a session of its own (it outlives
the shell ``ray up`` ran it from, and ``stop`` ends it with every process it started), its
output appended to ``STATE/NAME.log``, and records ``STATE/NAME.pid``.  With ``--ready URL`` it
returns once the URL answers, and fails (exit 1, the log's last line) if the service exits first
or does not answer in ``--wait`` seconds, so ``ray up`` fails instead of reporting a head
without its tracking server.

Why not ``pgrep -f "mlflow server" || ...``: Ray runs each of the cluster file's commands as
``bash --login -c -i '<the command>'``, and that shell's own command line holds the pattern, so
``pgrep`` always found it and the service never started.  A pid is checked with its process's
start time, recorded beside it, so a pid the kernel gave to another process since is not taken
for the service.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from platform import atomic, flags
from platform.errors import UserError, run_cli


@dataclass(frozen=True)
class Service:
    """One service's files in the state directory: ``NAME.pid`` (its pid and start time) and
    ``NAME.log`` (its output)."""

    name: str
    state: Path

    @property
    def pid_file(self) -> Path:
        return self.state / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return self.state / f"{self.name}.log"

    def recorded(self) -> dict | None:
        """The pid file's record, or None without one (or with a torn one)."""
        try:
            record = json.loads(self.pid_file.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        return record if isinstance(record, dict) and {"pid", "started"} <= record.keys() else None

    def running(self) -> psutil.Process | None:
        """The service's process if the pid file names one that still runs, else None."""
        record = self.recorded()
        if record is None:
            return None
        try:
            process = psutil.Process(int(record["pid"]))
            alive = process.status() != psutil.STATUS_ZOMBIE
            same = abs(process.create_time() - float(record["started"])) < 0.5  # not a reused pid
        except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
            return None
        return process if alive and same else None


def start(service: Service, command: Sequence[str], cwd: Path | None, ready: str | None, wait: float) -> str:
    """Start ``command`` as ``service`` unless it runs; returns what was done, in words."""
    if not command:
        raise UserError("start: no command after --")
    process = service.running()
    if process is not None:
        return f"{service.name} already running (pid {process.pid})"
    service.state.mkdir(parents=True, exist_ok=True)
    with open(service.log_file, "ab") as log:
        try:
            child = subprocess.Popen(list(command), cwd=cwd, stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        except FileNotFoundError:
            raise UserError(f"{command[0]}: not found (is the project installed on this node?)") from None
    started = psutil.Process(child.pid).create_time()
    record = json.dumps({"pid": child.pid, "started": started, "command": command[0]})
    atomic.write_file(service.pid_file, lambda handle: handle.write(record.encode()))
    if ready is not None:
        _wait_until_ready(service, child, ready, wait)
    return f"{service.name} started (pid {child.pid}, log {service.log_file})"


def _wait_until_ready(service: Service, child: subprocess.Popen, url: str, wait: float) -> None:
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise UserError(f"{service.name} exited with status {child.returncode} before {url} answered: "
                            f"{_last_line(service.log_file)}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - the service's own URL
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise UserError(f"{service.name}: {url} did not answer in {wait:g} s (its log: {service.log_file})")


def _last_line(path: Path) -> str:
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(nothing in its log)"


def stop(service: Service, grace: float = 10.0) -> str:
    """End the service and every process of its session (SIGTERM, then SIGKILL after ``grace``)."""
    process = service.running()
    if process is None:
        service.pid_file.unlink(missing_ok=True)
        return f"{service.name} not running"
    try:
        os.killpg(process.pid, signal.SIGTERM)  # its session's group: the server's workers too
    except ProcessLookupError:
        pass
    _, alive = psutil.wait_procs([process], timeout=grace)
    if alive:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    service.pid_file.unlink(missing_ok=True)
    return f"{service.name} stopped (pid {process.pid})"


def status(service: Service) -> tuple[str, int]:
    process = service.running()
    if process is None:
        return f"{service.name} not running", 3  # LSB's "not running"
    return f"{service.name} running (pid {process.pid})", 0


def build_parser() -> argparse.ArgumentParser:
    parser = flags.ArgumentParser(prog="python -m platform.service", description=__doc__.split("\n\n")[0],
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument("name", help="the service's name: its files are STATE/NAME.pid and STATE/NAME.log")
    parser.add_argument("--state", required=True, type=Path, help="the directory of the pid and log files")
    parser.add_argument("--cwd", type=Path, help="start: the service's working directory (default: this one)")
    parser.add_argument("--ready", metavar="URL", help="start: return once URL answers 200 (fail if it does not)")
    parser.add_argument("--wait", type=float, default=120.0, metavar="SECONDS",
                        help="start: how long --ready waits (default 120)")
    parser.epilog = "start: the service's command follows --"
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    args, command = build_parser().parse_args(argv[:split]), argv[split + 1:]
    service = Service(args.name, args.state.expanduser())
    if args.action != "start" and command:
        raise UserError(f"{args.action}: takes no command")
    if args.action == "start":
        print(start(service, command, args.cwd, args.ready, args.wait), file=sys.stderr)
        return 0
    if args.action == "stop":
        print(stop(service), file=sys.stderr)
        return 0
    line, code = status(service)
    print(line)
    return code


if __name__ == "__main__":
    run_cli(main)

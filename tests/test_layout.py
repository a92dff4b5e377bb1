"""Layout rules (docs/architecture.md): ``models/`` is pure PyTorch; commands are thin and no
command imports another; every model row of the table has what the platform derives from it."""

import ast
import sys
from pathlib import Path

from helpers import ROOT

# what models/ may import: torch, numpy, itself and the standard library (whose ``platform`` is
# this project's name, so not that)
ALLOWED = (set(sys.stdlib_module_names) - {"platform"}) | {"torch", "numpy", "models", "__future__"}


def imported_roots(path: Path) -> set[str]:
    return {name.split(".")[0] for name in imported_modules(path)}


def test_models_import_only_torch_numpy_and_the_stdlib():
    files = list((ROOT / "models").rglob("*.py"))
    assert files
    for path in files:
        bad = imported_roots(path) - ALLOWED
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_the_purity_check_catches_an_orchestration_import(tmp_path):
    sample = tmp_path / "m.py"
    sample.write_text("import torch, math\nfrom ray import train\nimport pyarrow.parquet as pq\nimport einops\n"
                      "from platform.data import batching\nfrom models.layers import Embedding\n")
    assert imported_roots(sample) - ALLOWED == {"ray", "pyarrow", "einops", "platform"}


def test_ray_cluster_yaml_passes_rays_own_schema():
    import yaml
    from ray_private import validate_cluster_config

    config = yaml.safe_load((ROOT / "ray_cluster.yaml").read_text())
    validate_cluster_config(config)  # raises on an unknown or malformed field
    commands = " ".join(config["head_start_ray_commands"])
    assert "mlflow server" in commands and "--host 127.0.0.1" in commands and "--dashboard-host=127.0.0.1" in commands
    from platform.tracking.store import SERVER_ENV

    assert all(f"{name}={value} python -m platform.service start mlflow" in commands
               for name, value in SERVER_ENV.items())
    assert "0.0.0.0" not in (ROOT / "ray_cluster.yaml").read_text()  # nothing listens on all interfaces
    # the tracking database: PostgreSQL on the head (or a managed one), backed up to the bucket
    assert '--backend-store-uri "${NMT_TRACKING_DB:-postgresql://mlflow@127.0.0.1:5432/mlflow}"' in commands
    assert "python -m platform.backup" in commands and "s3://$NMT_BUCKET/syntax-nmt/backups" in commands
    # the sweeps' studies: a database of their own on the same server, backed up with MLflow's,
    # their dashboard on loopback for the forwarded port
    assert "for DB in mlflow optuna" in commands and "--database postgresql://mlflow@127.0.0.1:5432/optuna" in commands
    assert 'optuna-dashboard "$NMT_STUDY_STORAGE" --host 127.0.0.1 --port 8080' in commands
    # artifacts straight to S3 from every node: the server hands out s3:// locations, proxies no bytes
    assert '--default-artifact-root "$MLFLOW_ARTIFACTS" --no-serve-artifacts' in commands
    assert config["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"  # Ray's token
    node_types = config["available_node_types"]
    assert node_types["gpu_worker"]["node_config"]["InstanceType"].startswith("g")
    assert node_types["gpu_worker"]["min_workers"] == 0
    # workers may use the bucket (Ray gives only the head a profile)
    assert node_types["gpu_worker"]["node_config"]["IamInstanceProfile"]["Name"]
    # the bucket is named once, on every node, and storage, artifacts and the CLIs' default derive from it
    text = (ROOT / "ray_cluster.yaml").read_text()
    assert text.count("CHANGE-ME-bucket") == 1
    setup = " ".join(config["setup_commands"])
    for variable in ("RAY_STORAGE=s3://$NMT_BUCKET", "MLFLOW_ARTIFACTS=s3://$NMT_BUCKET",
                     "NMT_STORAGE_PATH=$RAY_STORAGE", "MLFLOW_TRACKING_URI=http://127.0.0.1:5000",
                     "NMT_STUDY_STORAGE=postgresql://mlflow@127.0.0.1:5432/optuna"):
        assert variable in setup


def test_the_yamls_setup_sets_every_nodes_storage_and_follows_an_edited_bucket(tmp_path):
    """The setup commands as Ray runs them (bash, ~/.bashrc read by later commands), twice, as on
    a reused node after the bucket was edited: the new bucket wins, and .bashrc gains one line."""
    import subprocess

    import yaml

    setup = yaml.safe_load((ROOT / "ray_cluster.yaml").read_text())["setup_commands"][1]
    home = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    for bucket in ("first-bucket", "edited-bucket"):
        command = setup.replace("CHANGE-ME-bucket", bucket)
        subprocess.run(["bash", "-c", command], env=home, check=True, timeout=30)
    echo = ". ~/.bashrc; echo $NMT_STORAGE_PATH $MLFLOW_ARTIFACTS $MLFLOW_TRACKING_URI $NMT_STUDY_STORAGE"
    shown = subprocess.run(["bash", "-c", echo], env=home, capture_output=True, text=True, timeout=30)
    assert shown.stdout.split() == ["s3://edited-bucket/syntax-nmt/ray", "s3://edited-bucket/syntax-nmt/mlflow",
                                    "http://127.0.0.1:5000", "postgresql://mlflow@127.0.0.1:5432/optuna"]
    assert (tmp_path / ".bashrc").read_text().count("syntax-nmt.env") == 1


def test_ray_cluster_yamls_example_command_parses_as_written():
    """The command the YAML tells a user to run on a fresh head: valid flags, the built-in
    corpus by name (``data/demo`` does not exist on a fresh head), storage from the environment."""
    import shlex

    from platform import tune

    text = (ROOT / "ray_cluster.yaml").read_text()
    lines = [line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")]
    start = next(i for i, line in enumerate(lines) if "python -m platform.tune" in line)
    command = lines[start].split("&&", 1)[1] + " " + lines[start + 1]
    argv = shlex.split(command.replace("\\", " "))
    assert argv[:3] == ["python", "-m", "platform.tune"]
    args = tune.build_parser().parse_args(argv[3:])
    assert args.data == "demo" and args.address == "auto" and args.gpus_per_worker == 1
    assert args.max_concurrent == 4  # the GPU workers' max count: trials wait for the autoscaler, not refused
    assert ".git" not in config_rsync_exclude()  # the head's drivers read the commit they run


def config_rsync_exclude() -> list[str]:
    import yaml

    return yaml.safe_load((ROOT / "ray_cluster.yaml").read_text())["rsync_exclude"]


COMMANDS = {"platform.prepare", "platform.parse", "platform.train", "platform.tune", "platform.evaluate",
            "platform.translate", "platform.report", "platform.selfcheck", "benchmarks.speed.__main__"}


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, by full name (``from platform import train`` → platform.train)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def test_no_command_imports_another_command():
    files = list((ROOT / "platform").rglob("*.py")) + list((ROOT / "benchmarks").rglob("*.py"))
    assert len(files) > 30
    for path in files:
        bad = (imported_modules(path) & COMMANDS) - {module_name(path)}
        assert not bad, f"{path.relative_to(ROOT)} imports the command(s) {sorted(bad)}"


def test_the_command_check_catches_a_command_import(tmp_path):
    sample = tmp_path / "m.py"
    sample.write_text("from platform import train\nimport platform.tune\nfrom platform.training import loop\n")
    assert imported_modules(sample) & COMMANDS == {"platform.train", "platform.tune"}


def test_every_model_row_has_sizes_and_builds():
    from models import MODELS, build_model
    from platform.training.config import SIZES, resolve_config

    for name, spec in MODELS.items():
        for size, table in SIZES.items():
            assert spec.config_class in table, f"{name}: no {size} dimensions for {spec.config_class.__name__}"
        config = resolve_config(name, "smoke")
        assert type(config.model) is spec.config_class
        assert sum(p.numel() for p in build_model(config.model, 50, 50).parameters()) > 0


def test_every_code_file_reaches_git_the_ray_workers_and_the_cluster():
    """The run-time directories (./data, ./runs, ./mlruns) are ignored and excluded from Ray's
    working_dir upload; the code package ``platform/data`` is none of them.  ``ray up`` mounts
    the checkout entry by entry (every top-level entry git tracks, and .git), so that no virtual
    environment, corpus or checkpoint in the checkout is read to hash the mounts (Ray hashes
    every byte under a mount's source, rsync_exclude or not); its rsync_exclude, matched inside
    each mount, leaves every code file."""
    import subprocess

    import yaml
    from ray_private import ray_path_spec  # what Ray matches excludes and .gitignore with

    from platform.launch.cluster import RUNTIME_EXCLUDES

    code = [p.relative_to(ROOT).as_posix()
            for d in ("platform", "models", "search_spaces") for p in (ROOT / d).rglob("*.py")]
    assert "platform/data/encode.py" in code
    cluster = yaml.safe_load((ROOT / "ray_cluster.yaml").read_text())
    gitignore = (ROOT / ".gitignore").read_text().splitlines()
    for what, patterns in (("RUNTIME_EXCLUDES", RUNTIME_EXCLUDES), (".gitignore", gitignore)):
        spec = ray_path_spec(patterns)
        assert [f for f in code if spec.match_file(f)] == [], what
        assert spec.match_file("data/demo/train.parquet") and spec.match_file("runs/sweep/x"), what
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, timeout=30, check=True)
    top = {line.split("/")[0] for line in tracked.stdout.splitlines()} | {".git"}
    mounts = {k: v for k, v in cluster["file_mounts"].items() if k.startswith("~/syntax-nmt")}
    assert mounts == {f"~/syntax-nmt/{name}": f"./{name}" for name in sorted(top)}
    spec = ray_path_spec(cluster["rsync_exclude"])
    assert [f for f in code if spec.match_file(f.split("/", 1)[1])] == []  # as rsync sees them, inside their mount


def untimed_subprocesses(path: Path) -> list[str]:
    """``subprocess.run``-style calls without ``timeout=``, and ``.wait()`` / ``.communicate()``
    without one, in a test file: a hung child would hang CI until its 90-minute limit."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        timed = any(keyword.arg == "timeout" for keyword in node.keywords)
        starts = (node.func.attr in ("run", "check_output", "check_call", "call")
                  and isinstance(node.func.value, ast.Name) and node.func.value.id == "subprocess")
        waits = node.func.attr in ("wait", "communicate") and not node.args
        if (starts or waits) and not timed:
            found.append(f"{path.name}:{node.lineno} {node.func.attr}")
    return found


def test_every_subprocess_a_test_starts_has_a_timeout():
    files = list((ROOT / "tests").rglob("*.py"))
    assert len(files) > 20
    assert [found for path in files for found in untimed_subprocesses(path)] == []


def test_the_timeout_check_catches_an_untimed_call(tmp_path):
    sample = tmp_path / "t.py"
    sample.write_text("import subprocess\nsubprocess.run(['x'], timeout=5)\np = subprocess.Popen(['x'])\n"
                      "p.wait()\np.communicate(timeout=3)\nsubprocess.run(['y'])\n")
    assert untimed_subprocesses(sample) == ["t.py:4 wait", "t.py:6 run"]


def test_a_virtual_environment_of_any_name_stays_out_of_the_jobs_working_dir(monkeypatch, tmp_path):
    """A checkout's venv named anything (``.v``, ``env311``) holds gigabytes of torch that Ray
    refuses to upload (its 512 MiB limit): every directory with a ``pyvenv.cfg`` is excluded."""
    import subprocess
    import sys

    from ray_private import ray_path_spec

    from platform.launch import cluster

    checkout = tmp_path / "checkout"
    (checkout / "platform").mkdir(parents=True)
    (checkout / "platform" / "train.py").write_text("")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(checkout / "env311")], check=True, timeout=120)
    monkeypatch.setattr(cluster, "ROOT", checkout)
    spec = ray_path_spec(cluster.runtime_excludes())
    assert spec.match_file("env311/bin/python") and not spec.match_file("platform/train.py")

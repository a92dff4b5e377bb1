"""Layout rules of DESIGN.md §2: ``models/`` is pure PyTorch."""

import ast
from pathlib import Path

from conftest import ROOT

FORBIDDEN = {"ray", "mlflow", "optuna", "pyarrow", "platform", "yaml", "sacrebleu"}


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_models_import_only_torch_numpy_and_the_stdlib():
    files = list((ROOT / "models").rglob("*.py"))
    assert files
    for path in files:
        bad = imported_roots(path) & FORBIDDEN
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_the_purity_check_catches_an_orchestration_import(tmp_path):
    sample = tmp_path / "m.py"
    sample.write_text("import torch\nfrom ray import train\nimport pyarrow.parquet as pq\n")
    assert imported_roots(sample) & FORBIDDEN == {"ray", "pyarrow"}


def test_ray_cluster_yaml_passes_rays_own_schema():
    import yaml
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = yaml.safe_load((ROOT / "ray_cluster.yaml").read_text())
    validate_config(prepare_config(config))  # raises on an unknown or malformed field
    commands = " ".join(config["head_start_ray_commands"])
    assert "mlflow server" in commands and "--host 127.0.0.1" in commands and "--dashboard-host=127.0.0.1" in commands
    assert "0.0.0.0" not in (ROOT / "ray_cluster.yaml").read_text()  # nothing listens on all interfaces
    assert "--backend-store-uri sqlite:///" in commands and "--artifacts-destination s3://" in commands
    assert config["file_mounts"] == {"~/syntax-nmt": "."}
    node_types = config["available_node_types"]
    assert node_types["gpu_worker"]["node_config"]["InstanceType"].startswith("g") and node_types["gpu_worker"]["min_workers"] == 0

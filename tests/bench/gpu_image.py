"""The GPU machine's Python, for the GPU run's dry run: the packages its image holds (read on a
machine running it, 2026-11-17; Python 3.12, torch 2.11), and ``blocked_env``, an environment in
which every other third-party import fails here as it would there.

The prepared GPU run once failed on the GPU for an import the CPU's environment had
(``sacremoses``): six of fifteen lent minutes lost.  The dry run under ``blocked_env`` fails here
instead, wherever the run would fail there for a missing package."""

from __future__ import annotations

import os
import sys
from pathlib import Path

IMAGE = """absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build
certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin
jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax
llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict
multipledispatch mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro nvidia-cublas
nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile
nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13
nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript opencv-python-headless
optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft pillow pip
pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing
pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist
python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core
scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson
six sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl
tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision
tqdm transformers treescope triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug
wheel wrapt xarray xxhash yarl zipp""".split()

# distributions whose top-level modules are not their names with "-" as "_"
MODULES = {"pyyaml": ["yaml"], "pillow": ["PIL"], "protobuf": ["google"], "python-dateutil": ["dateutil"],
           "scikit-learn": ["sklearn"], "scikit-image": ["skimage"], "opencv-python-headless": ["cv2"],
           "py-cpuinfo": ["cpuinfo"], "attrs": ["attr", "attrs"], "absl-py": ["absl"], "nvidia-ml-py": ["pynvml"],
           "setuptools": ["setuptools", "pkg_resources", "_distutils_hack"], "pytest": ["pytest", "_pytest", "py"],
           "msgpack": ["msgpack"], "grpcio": ["grpc"], "pyre-extensions": ["pyre_extensions"],
           "jax-cuda13-pjrt": ["jax_plugins"], "jax-cuda13-plugin": ["jax_cuda13_plugin", "jax_plugins"],
           "cupy-cuda13x": ["cupy", "cupyx", "cupy_backends"], "pytest-xdist": ["xdist"],
           "tensorboard-data-server": ["tensorboard_data_server"], "markdown-it-py": ["markdown_it"]}
MODULES["torch"] = ["torch", "torchgen", "functorch"]
ROOT = Path(__file__).resolve().parents[2]
CHECKOUT = ["platform", "models", "search_spaces", "benchmarks"]  # the GPU run carries the checkout


def import_names() -> frozenset[str]:
    names = set(CHECKOUT)
    for distribution in IMAGE:
        names.update(MODULES.get(distribution, [distribution.replace("-", "_")]))
        if distribution.startswith(("nvidia-", "cuda-")):
            names.update(("nvidia", "cuda"))
    return frozenset(names)


SITE = '''"""Written by tests/bench/gpu_image.py: imports the GPU image lacks fail here too."""
import sys
from importlib.machinery import PathFinder

ALLOWED = frozenset({allowed!r})


def _own():
    """The path's entries that are not installed packages: the standard library and
    lib-dynload (such as _sysconfigdata_*), the checkout, carried wheels."""
    return [entry for entry in sys.path if not entry.rstrip("/").endswith(("site-packages", "dist-packages"))]


class _OnlyTheGpuImage:
    """Python's path finder, blind to the installed packages the image lacks: importing one
    fails, and ``importlib.util.find_spec`` says None, as there."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if path is None and name not in ALLOWED and name not in sys.stdlib_module_names \\
                and PathFinder.find_spec(name, _own()) is None:
            return None
        return PathFinder.find_spec(name, path, target)

    invalidate_caches = PathFinder.invalidate_caches


sys.meta_path[sys.meta_path.index(PathFinder)] = _OnlyTheGpuImage
'''


def blocked_env(directory: Path) -> dict[str, str]:
    """``os.environ`` with a ``sitecustomize`` first on the path that fails every import of a
    third-party module the GPU image lacks (in this process and the processes it starts)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "sitecustomize.py").write_text(SITE.format(allowed=sorted(import_names())), encoding="utf-8")
    path = os.pathsep.join([str(directory), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {**os.environ, "PYTHONPATH": path}


def probe(env: dict[str, str], module: str) -> bool:
    """Whether ``module`` imports in ``env``."""
    import subprocess

    return subprocess.run([sys.executable, "-c", f"import {module}"], env=env, capture_output=True, cwd=ROOT,
                          timeout=120).returncode == 0

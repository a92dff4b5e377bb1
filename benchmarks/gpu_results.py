"""Every GPU run's results, one file each in ``benchmarks/gpu_results/`` (committed), and the docs
built from all of them: each lent GPU minute, whoever spends it, adds to the record instead of
replacing it.

A results file, ``DATE-DEVICE-COMMIT.json.gz``, holds ``meta`` (the device, torch, CUDA, Python,
the checkout's commit, the command, the date), ``loop`` (what ``gpu_run loop`` measured, or
null) and ``study`` (what ``gpu_run study`` trained and decoded, every run's test hypotheses
included, or null).  ``gpu_run all`` writes one into its ``--out-dir``; it goes into
``benchmarks/gpu_results/`` with the commit that brings it.

    python -m benchmarks.gpu_run record --from OUT --commit C --command "..."   # an older run's outputs
    python -m benchmarks.gpu_run table       # docs/results.md and docs/performance.md from every file

Only the standard library here: the GPU machine writes these files.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "gpu_results"
REFERENCE = "reference"  # gpu_run's row of torch.nn.Transformer
LOOP_BEGIN, LOOP_END = "<!-- GPU_LOOP_BEGIN: written by benchmarks/gpu_run.py table -->", "<!-- GPU_LOOP_END -->"


def file_name(meta: dict[str, Any]) -> str:
    device = re.sub(r"[^a-z0-9]+", "-", str(meta.get("device", "gpu")).lower()).strip("-")
    return f"{meta['date']}-{device}-{str(meta.get('commit') or 'unknown')[:7]}.json.gz"


def write(directory: Path, meta: dict[str, Any], loop: dict | None, study: dict | None) -> Path:
    """One run's results file in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / file_name(meta)
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        json.dump({"meta": meta, "loop": loop, "study": study}, handle)
    return path


def record(source: Path, commit: str, command: str, date: str, directory: Path = RESULTS) -> Path:
    """The results file of an earlier run's outputs in ``source`` (``meta.json``, ``loop.json``,
    ``study.json``, as ``gpu_run`` wrote them before it wrote results files)."""

    def read(name: str) -> dict | None:
        path = source / name
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None

    meta = {**(read("meta.json") or {}), "commit": commit, "command": command, "date": date}
    return write(directory, meta, read("loop.json"), read("study.json"))


def read_all(paths: list[Path]) -> list[dict[str, Any]]:
    """Every results file under ``paths`` (files, or folders of them), oldest first by name;
    each with its ``name``."""
    files = sorted({file for path in paths for file in ([path] if path.is_file() else path.glob("*.json.gz"))},
                   key=lambda file: file.name)
    results = []
    for file in files:
        with gzip.open(file, "rt", encoding="utf-8") as handle:
            results.append({**json.load(handle), "name": file.name})
    return results


def setting(result: dict[str, Any], what: str) -> str:
    meta = result["meta"]
    return (f"{meta.get('device', 'GPU')}, torch {meta.get('torch', '?')}, commit {meta.get('commit', '?')[:7]} "
            f"({meta.get('date', '?')}): {what}")


def device_kind(result: dict[str, Any]) -> str:
    """``cpu`` for a run on the CPU (``GPU_RUN_DEVICE=cpu``), else ``gpu``: the two devices' runs
    are never pooled (the same seed and config score differently on them)."""
    return "cpu" if result["meta"].get("device") == "cpu" else "gpu"


def pooled_budgets(results: list[dict[str, Any]], kind: str = "gpu", converged: bool = False) -> list[list[dict]]:
    """The results of ``kind``'s device with a study of one sort, early stopping (``converged``: a
    ``patience``) or a fixed number of updates, grouped by budget, each group in its files' order:
    the budget first run most recently first (seeds added to an older budget keep its place).
    Runs of another budget train another function: each budget is pooled and tabled on its own,
    and none is dropped for a newer one; within one, a (row, seed) counts once (``latest_runs``)."""
    studies = [result for result in results  # a study none of whose runs finished adds nothing
               if device_kind(result) == kind
               and any("failed" not in run for run in (result.get("study") or {}).get("runs", []))
               and early_stopping(result["study"]) == converged]
    budgets: dict[str, list[dict[str, Any]]] = {}
    for result in studies:
        budgets.setdefault(budget_key(result["study"]), []).append(result)
    return [latest_runs(group) for group in reversed(budgets.values())]


def latest_runs(studies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One budget's studies with each (row, seed) kept from its latest file only: a seed trained
    twice (a rerun, a call given another ``--results-dir``) is one sample, not two, or the tests
    over seeds would count it twice; a file left without a finished run drops out."""
    latest = {(run["row"], run["seed"]): index for index, result in enumerate(studies)
              for run in result["study"]["runs"] if "failed" not in run}
    kept = []
    for index, result in enumerate(studies):
        runs = [run for run in result["study"]["runs"]
                if "failed" in run or latest[run["row"], run["seed"]] == index]
        if any("failed" not in run for run in runs):
            kept.append({**result, "study": {**result["study"], "runs": runs}})
    return kept


def budget_of(study: dict[str, Any]) -> dict[str, Any]:
    """What makes two studies' runs comparable: updates, validation interval and early stopping
    (files from before ``patience`` existed had none)."""
    return {"max_updates": study.get("max_updates"), "epoch_updates": study.get("epoch_updates"),
            "patience": study.get("patience")}


def budget_key(study: dict[str, Any]) -> str:
    """A study's budget as a key: two studies' runs are pooled, or set side by side across devices, at one key."""
    return json.dumps(budget_of(study), sort_keys=True)


def early_stopping(study: dict[str, Any]) -> bool:
    """Whether a study's budget is a converged one: each run stopped by its dev BLEU's patience."""
    return study.get("patience") is not None


def budget_words(study: dict[str, Any]) -> str:
    """A study's budget as the docs say it."""
    budget = budget_of(study)
    words = f"at most {budget['max_updates']:,} updates, dev BLEU every {budget['epoch_updates']:,}"
    if early_stopping(study):
        words += f", a run stopped after {budget['patience']} validations without a better dev BLEU"
    return words


def loop_table(results: list[dict[str, Any]]) -> str:
    """Every GPU run's loop measurements, one row per (run, row, compile mode)."""
    lines = ["| GPU run | row | `compile` | ms / update | target tokens/s | MFU | × reference | kernels / update "
             "| GPU busy | host waiting | losses |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for result in results:
        loop = result.get("loop") or {}
        meta = result["meta"]
        run = f"{meta.get('device', 'GPU')}, {meta.get('commit', '?')[:7]}"
        # the same call's torch.nn.Transformer at the baseline's size, at its fastest (gpu_run.reference_one)
        reference = max((entry["tokens_per_s"] for entry in loop.get("runs", [])
                         if entry.get("row") == REFERENCE and "tokens_per_s" in entry), default=None)
        for entry in loop.get("runs", []):
            if "failed" in entry:
                lines.append(f"| {run} | `{entry.get('row', '?')}` | `{entry.get('compile', '?')}` | failed: "
                             f"{entry['failed']} | | | | | | | |")
                continue
            profile = entry.get("profile") or {}
            kernels = f"{profile['kernels_per_update']:,.0f}" if "kernels_per_update" in profile else "–"
            # the profiled updates' kernel time against the timed updates' wall time: the profiler slows a
            # launch-bound update's host side, not its kernels (and the first files' profiled wall spans
            # one update too few: gpu_run.profiled_stamps)
            busy = (f"{profile['kernel_ms_per_update'] / entry['ms_per_update']:.0%}"
                    if "kernel_ms_per_update" in profile else "–")
            # the share of the profiled update the host spends waiting for the device (step.WAIT_PHASE)
            host = profile.get("host_ms_per_update")
            waiting = (f"{host['wait for the device'] / profile['wall_ms_per_update']:.0%}"
                       if host and profile.get("wall_ms_per_update") else "–")
            # the reference trains the loop's own batch: no ratio for a run at another (@N)
            ratio = f"{entry['tokens_per_s'] / reference:.2f}×" if reference and "@" not in entry["compile"] else "–"
            lines.append(f"| {run} | `{entry['row']}` | `{entry['compile']}` | {entry['ms_per_update']:.1f} | "
                         f"{entry['tokens_per_s']:,.0f} | {entry['mfu']:.1%} | {ratio} | {kernels} | {busy} | "
                         f"{waiting} | "
                         f"{entry.get('losses_digest', '–')} |")
    notes = ("`× reference`: target tokens/s against the same GPU run's `torch.nn.Transformer` at the baseline's "
             "size, compiled, fused AdamW (`reference`; \"–\" for a run without it). `compile`: the mode, "
             "`+deterministic` for `deterministic=true`, `@N` for N target positions an update, `#2` for a rerun. "
             "`losses`: a digest of every update's loss and gradient norm: a rerun with the same digest "
             "repeated every update's loss and gradient norm bit for bit. `GPU busy`: the profiled updates' kernel "
             "time against the timed updates' wall time (`ms / update`), the ranges `record_function` marks "
             "on the GPU's timeline left out (the first file counts `Optimizer.step`'s range twice: 0.88 ms "
             "of the compiled baseline's update). `host waiting`: the share of a profiled update the host "
             "waits for the device (the rest it works while the GPU may idle; each phase's time is in the "
             "results file, `profile.host_ms_per_update`; \"–\" for the files before it).\n\n")
    commands = "\n".join(f"- {setting(result, '`' + result['meta'].get('command', '?') + '`')}"
                         for result in results if result.get("loop"))
    return ("\n".join(lines) + f"\n\n{notes}The GPU runs (`benchmarks/gpu_results/`), each with its command:\n\n"
            f"{commands}\n")


AFTERNOON_BEGIN, AFTERNOON_END = ("<!-- AFTERNOON_BEGIN: written by benchmarks/gpu_run.py table -->",
                                  "<!-- AFTERNOON_END -->")
# measured on this project's 2-core machine (docs/data.md): GiNZA parsing Tanaka's Japanese,
# sentences per second and worker (python -m benchmarks.parse_speed); prepare, pairs per second
# of one process on 5M synthetic pairs of 20-40 words a side (python -m benchmarks.scale)
PARSE_PER_CORE = 104.0
PREPARE_PER_S = 5_000_000 / 2173
PAIRS = 3_000_000
# the papers' Transformer rows and their epochs (Deguchi: 20, Omote: 30; Omote's baseline is
# Deguchi's config, trained for 30 epochs as Omote's own, so a run of its own here), each with the
# loop row whose measured speed it takes (the DBSA rows enc+dec's, Omote's dep row dep+rel's)
TRANSFORMER_RUNS = {
    "deguchi2019/baseline": (20, "deguchi2019/baseline"), "deguchi2019/enc": (20, "deguchi2019/enc+dec"),
    "deguchi2019/dec": (20, "deguchi2019/enc+dec"), "deguchi2019/enc+dec": (20, "deguchi2019/enc+dec"),
    "omote2019/baseline": (30, "deguchi2019/baseline"), "omote2019/rel": (30, "omote2019/rel"),
    "omote2019/dep": (30, "omote2019/dep+rel"), "omote2019/dep+rel": (30, "omote2019/dep+rel")}
SEEDS = 3
TARGET_TOKENS = 30  # illustrative target subwords a pair: ASPEC's are not measured here (Tanaka's: 9 with EOS)


def row_shares(result: dict[str, Any]) -> dict[str, float]:
    """Each syntax row's target tokens/s against the baseline's in the same mode of one GPU run
    (the first mode both ran, eager first), at the loop's own batch."""
    speeds: dict[tuple[str, str], float] = {(entry["row"], entry["compile"]): entry["tokens_per_s"]
                                            for entry in (result.get("loop") or {}).get("runs", [])
                                            if "tokens_per_s" in entry and "@" not in entry["compile"]
                                            and "#" not in entry["compile"]}
    shares = {}
    for row in {source for _, source in TRANSFORMER_RUNS.values()} - {"deguchi2019/baseline"}:
        modes = [mode for (name, mode) in speeds if name == row and ("deguchi2019/baseline", mode) in speeds]
        if modes:
            mode = min(modes, key=lambda m: (m != "off", m))
            shares[row] = speeds[row, mode] / speeds["deguchi2019/baseline", mode]
    return shares


def afternoon(results: list[dict[str, Any]]) -> str:
    """What a 3M-pair corpus costs through parse, prepare and the Transformer rows of the
    papers × 3 seeds on 4 GPUs, from the measured rates: the newest GPU run's fastest baseline
    (a CPU's file, ``GPU_RUN_DEVICE=cpu``, is no GPU rate), each syntax row at that rate times its
    own speed against the baseline in one mode of the same run (the slowest measured where a row
    has none: none measured, the baseline's)."""
    rates = [(entry["tokens_per_s"], result) for result in results if device_kind(result) == "gpu"
             for entry in (result.get("loop") or {}).get("runs", [])
             if entry.get("row") == "deguchi2019/baseline" and "tokens_per_s" in entry
             and "@" not in entry.get("compile", "")]  # at the loop's own batch, as the reference
    if not rates:
        return "No GPU run has measured the baseline's training rate yet.\n"
    newest = max(result["name"] for _, result in rates)
    rate, result = max(((rate, result) for rate, result in rates if result["name"] == newest), key=lambda x: x[0])
    share = row_shares(result)
    slowest = min(share.values(), default=1.0)
    share["deguchi2019/baseline"] = 1.0
    parse_core_h = 2 * PAIRS / PARSE_PER_CORE / 3600
    prepare_min = PAIRS / PREPARE_PER_S / 60
    runs = len(TRANSFORMER_RUNS) * SEEDS
    gpu_h = sum(SEEDS * epochs * PAIRS * TARGET_TOKENS / (rate * share.get(source, slowest)) / 3600
                for epochs, source in TRANSFORMER_RUNS.values())
    measured = ", ".join(f"`{row.split('/')[1]}` {value:.2f}×" for row, value in sorted(share.items())
                         if row != "deguchi2019/baseline")
    rows = f"the syntax rows at {measured} of it" if measured else "no syntax row measured: each at this rate"
    return (f"| step | measured rate | where it comes from | {PAIRS / 1e6:.0f}M pairs |\n|---|---|---|---|\n"
            f"| parse (GiNZA; spaCy's English assumed no slower) | {PARSE_PER_CORE:.0f} sentences/s a core | "
            f"`benchmarks.parse_speed`, Tanaka ja ([data.md](data.md)) | {parse_core_h:.0f} core-hours, both sides |\n"
            f"| prepare (one process) | {PREPARE_PER_S:,.0f} pairs/s | `benchmarks.scale`, 5M pairs "
            f"([data.md](data.md)) | {prepare_min:.0f} min |\n"
            f"| train the papers' {runs} Transformer runs ({SEEDS} seeds; Deguchi's 4 rows × 20 epochs, Omote's 4 "
            f"× 30) | {rate:,.0f} target tokens/s a GPU, paper size, for the baseline ({rows}) | "
            f"{setting(result, 'the fastest baseline mode')}"
            f" | {gpu_h:,.0f} GPU-hours, {gpu_h / 4:,.0f} h on 4 GPUs |\n\n"
            f"The training row assumes {TARGET_TOKENS} target subwords a pair (ASPEC's are not measured here; "
            f"Tanaka's are 9 with the end-of-sentence token, on the dataset `platform.prepare` makes by default): "
            f"time scales with it. The RNN papers' rows (Yang's 7, Currey's 3) have no GPU "
            f"rate measured yet, nor has an A10G (g5); their rows are left out rather than guessed. The goal "
            f"(the four papers in one afternoon on 4 GPUs) needs the training rate about "
            f"{gpu_h / 4 / 4:.0f}× today's: the GPU work in [performance.md](performance.md#the-prepared-gpu-run).\n")

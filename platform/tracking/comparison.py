"""An experiment's runs compared (``python -m platform.report``): ``report.md`` and
``report.csv`` (one row per training run: model, sweep, the papers' knobs, best dev
BLEU/chrF/UAS, test scores where ``platform.evaluate --run`` logged them, parameters, tokens/s)
and PNG plots: dev BLEU against each knob, dev BLEU curves of the top runs, and a
parallel-coordinates view of knobs and BLEU; mean ± std over seeds where a setting was trained
with several.  Where the best ``transformer`` baseline and other models' runs have test
hypotheses of the same test set, the paired tests of ``tracking.significance`` say whether the
differences are significant.  Each sweep's confirmation table follows.  Everything is also
logged to the experiment's latest sweep parent run (if there is one).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from platform.errors import UserError
from platform.tracking import plots
from platform.tracking.logger import RunLogger
from platform.tracking.significance import logged_tokenizer, methods, significance_table, test_outputs
from platform.tracking.store import client as tracking_client
from platform.tracking.store import resolve_tracking_uri
from platform.tracking.tables import format_table, mean_std, to_csv
from platform.training.metrics import shown


def compare(experiment: str, out: Path, knobs: list[str], tracking_uri: str | None = None) -> None:
    """Write the report of ``experiment`` into ``out`` (columns for those of ``knobs`` its runs
    have), log it to the latest sweep parent run, and print it."""
    uri = resolve_tracking_uri(tracking_uri)
    client = tracking_client(uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise UserError(f"no experiment {experiment!r} in {uri}")
    rows, curves = collect(client, found.experiment_id, knobs)
    if not rows:
        raise UserError(f"experiment {experiment!r} has no training runs")
    out.mkdir(parents=True, exist_ok=True)
    images = report_plots(rows, curves, knobs, out)
    with tempfile.TemporaryDirectory() as scratch:
        tests = significance(client, rows, Path(scratch))
        confirmations = confirmation_sections(client, found.experiment_id, Path(scratch))
    seeds = over_seeds(rows, knobs)
    seeds_text = (f"## Over seeds\n\nMean ± standard deviation over the seeds of each setting trained with "
                  f"several (finished runs only).\n\n{format_table(seeds)}\n\n" if seeds else "")
    text = (f"# Experiment {experiment}\n\n{len(rows)} training runs, best first.\n\n{format_table(rows)}\n\n"
            f"{seeds_text}{tests}\n\n{confirmations}" + "".join(f"![{p.stem}]({p.name})\n" for p in images))
    (out / "report.md").write_text(text, encoding="utf-8")
    (out / "report.csv").write_text(to_csv(rows), encoding="utf-8")
    parent = latest_sweep_parent(client, found.experiment_id)
    if parent is not None:
        logger = RunLogger(uri, parent, reopen=False)
        for path in [out / "report.md", out / "report.csv", *images]:
            logger.artifact(path, "report")
    print(text)
    print(f"wrote {out / 'report.md'}, {out / 'report.csv'} and {len(images)} plots"
          + (f"; logged to sweep run {parent}" if parent else ""), file=sys.stderr)


def report_plots(rows: list[dict[str, Any]], curves: dict[str, list[float]], knobs: list[str], out: Path) -> list[Path]:
    """The sweep plots (``tracking.plots``) over every run, and the parallel coordinates."""
    present = [k for k in knobs if any(k in r for r in rows)]
    histories = {r["run_id"]: curves[r["run_id"]] for r in rows}
    table_rows = [{**r, "trial": r["run_id"]} for r in rows]
    images = plots.sweep_plots(table_rows, histories, present, "dev_bleu", out)
    coordinates = parallel_coordinates(rows, knobs, out / "parallel_coordinates.png")
    return images + ([coordinates] if coordinates else [])


def collect(client, experiment_id: str, knobs: list[str]) -> tuple[list[dict[str, Any]], dict[str, list[float]]]:
    """One row per training run of the experiment (its model, recipe, sweep, ``knobs``, seed and
    metrics), best dev BLEU first, and each run's dev BLEU per epoch."""
    rows, curves = [], {}
    for run in client.search_runs([experiment_id], max_results=5000):
        params, metrics, tags = run.data.params, run.data.metrics, run.data.tags
        if "model" not in params or "sweep_parent" in tags:
            continue  # sweep parents and foreign runs are not training runs
        logged = client.get_metric_history(run.info.run_id, "dev_bleu")
        history = [m.value for m in sorted(logged, key=lambda m: m.step)]
        row: dict[str, Any] = {"run": run.info.run_name, "run_id": run.info.run_id, "model": params["model"],
                               "recipe": tags.get("recipe", ""), "sweep": tags.get("sweep", ""),
                               "status": run.info.status.lower()}
        row.update({knob: params[knob] for knob in knobs if knob in params})
        row["seed"] = params.get("seed", "")
        for key in shown("best"):
            values = [m.value for m in client.get_metric_history(run.info.run_id, key)]
            if values:
                row[key] = max(values)
        row.update({key: metrics[key] for key in shown("last") if key in metrics})
        rows.append(row)
        curves[row["run_id"]] = history
    rows.sort(key=lambda r: -r.get("dev_bleu", -1.0))
    return rows, curves


SEED_METRICS = ("dev_bleu", "dev_chrf", "test_bleu", "test_chrf")


def over_seeds(rows: list[dict[str, Any]], knobs: list[str]) -> list[dict[str, Any]]:
    """Mean ± standard deviation (n - 1) over the seeds of each setting run with several:
    finished runs with the same model, recipe, sweep and knobs, best mean dev BLEU first."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        if row["status"] == "finished":
            key = tuple(row.get(k, "") for k in ("model", "recipe", "sweep", *knobs))
            groups.setdefault(key, []).append(row)
    table = []
    for members in groups.values():
        if len({r["seed"] for r in members}) < 2:
            continue
        first = members[0]
        entry = {"model": first["model"], "recipe": first["recipe"], "sweep": first["sweep"],
                 **{k: first[k] for k in knobs if k in first},
                 "seeds": " ".join(sorted((str(r["seed"]) for r in members), key=lambda v: (len(v), v)))}
        for metric in SEED_METRICS:
            values = [r[metric] for r in members if metric in r]
            if len(values) == len(members):
                entry[f"{metric}_mean"] = statistics.fmean(values)
                entry[metric] = mean_std(values)
        table.append(entry)
    table.sort(key=lambda e: -e.get("dev_bleu_mean", -1.0))
    return [{k: v for k, v in e.items() if not k.endswith("_mean")} for e in table]


def parallel_coordinates(rows: list[dict[str, Any]], knobs: list[str], path: Path) -> Path | None:
    """Every run as a line through its numeric ``knobs`` and dev BLEU, each axis scaled to [0, 1]."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    numeric = [k for k in knobs if any(_number(r.get(k)) is not None for r in rows)]
    scored = [r for r in rows if "dev_bleu" in r]
    if not numeric or len(scored) < 2:
        return None
    frame = pd.DataFrame([{**{k: _number(r.get(k)) for k in numeric}, "dev_bleu": r["dev_bleu"]} for r in scored])
    frame = frame.dropna(axis=1, how="all").fillna(frame.mean(numeric_only=True))
    scaled = (frame - frame.min()) / (frame.max() - frame.min()).replace(0, 1)
    figure, axis = plt.subplots(figsize=(1.3 * len(scaled.columns) + 2, 4))
    colors = plt.cm.viridis(scaled["dev_bleu"].to_numpy())
    for (_, values), color in zip(scaled.iterrows(), colors):
        axis.plot(range(len(scaled.columns)), values.to_numpy(), color=color, alpha=0.8)
    axis.set_xticks(range(len(scaled.columns)), scaled.columns, rotation=30)
    axis.set_ylabel("scaled to [0, 1]"), axis.set_title("knobs and dev_bleu (colour = dev_bleu)")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def _number(value: Any) -> float | None:
    if value in ("True", "False"):
        return float(value == "True")
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def significance(client, rows: list[dict[str, Any]], directory: Path) -> str:
    """Every system against the baseline (``tracking.significance``), as a markdown section.
    The baseline is the best finished ``transformer`` run with test hypotheses; each other model
    is represented by its best finished run with hypotheses of the same test set (best by dev
    BLEU, ``rows``' order; a failed run is never chosen, whatever it reached before failing)."""
    evaluated = [r for r in rows if "test_bleu" in r and r["status"] == "finished"]
    baseline = next((r for r in evaluated if r["model"] == "transformer"), None)
    systems: list[dict[str, Any]] = []
    for row in evaluated:  # best first: each model's first row is its best run
        if row["model"] != "transformer" and all(row["model"] != chosen["model"] for chosen in systems):
            systems.append(row)
    if baseline is None or not systems:
        return ("## Significance\n\nneeds test hypotheses (platform.evaluate --run) of a finished transformer baseline "
                "and of a finished run of another model")
    outputs = {row["run_id"]: test_outputs(client, row["run_id"], directory) for row in [baseline, *systems]}
    missing = [row["run"] for row in [baseline, *systems] if outputs[row["run_id"]] is None]
    if missing:
        return f"## Significance\n\nno test hypotheses logged for run(s) {', '.join(missing)}"
    references = outputs[baseline["run_id"]]["ref"]
    other_sets = [row["run"] for row in systems if outputs[row["run_id"]]["ref"] != references]
    compared = [baseline, *(row for row in systems if row["run"] not in other_sets)]
    if len(compared) == 1:
        return "## Significance\n\nno other model was evaluated on the baseline's test set"
    tokenizer = logged_tokenizer(client, baseline["run_id"])
    table = significance_table([{"model": row["model"], "run": row["run"]} for row in compared],
                               [outputs[row["run_id"]]["hyp"] for row in compared], references, tokenizer)
    skipped = f"\n\nNot compared (another test set): {', '.join(other_sets)}." if other_sets else ""
    return (f"## Significance\n\nEach model's best finished run against the `transformer` baseline {baseline['run']} "
            f"on {len(references)} test sentences ({methods(tokenizer)}).\n\n{format_table(table)}{skipped}")


def confirmation_sections(client, experiment_id: str, directory: Path) -> str:
    """Each sweep's confirmation table (``platform.tune --confirm``), as its parent run holds it."""
    sections = []
    for run in client.search_runs([experiment_id], filter_string="tags.confirmation != ''",
                                  order_by=["attributes.start_time ASC"]):
        local = Path(client.download_artifacts(run.info.run_id, run.data.tags["confirmation"],
                                               str(directory / run.info.run_id)))
        text = local.read_text(encoding="utf-8").replace(
            "## Confirmation on test", f"## Confirmation on test: sweep {run.info.run_name}", 1)
        sections.append(text.rstrip() + "\n\n")
    return "".join(sections)


def latest_sweep_parent(client, experiment_id: str) -> str | None:
    runs = client.search_runs([experiment_id], filter_string="tags.sweep_parent != ''",
                              order_by=["attributes.start_time DESC"],
                              max_results=1)
    return runs[0].info.run_id if runs else None

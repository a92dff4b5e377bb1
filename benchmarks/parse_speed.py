"""How much faster ``platform.parse`` goes on 2 workers than on 1, on real Japanese text.

Parses the first ``--lines`` lines of the Tanaka corpus's ``train.ja.gz`` with ja_ginza through
the job ``python -m platform.parse`` runs (``parse_job.parse_corpus``, the CLI's defaults), once
per worker count, on one local Ray cluster that it starts; checks that the outputs are the same
bytes; prints sentences/s while parsing (the actors' pipeline loading apart) and end to end::

    flock /tmp/nmt-ray.lock python -m benchmarks.parse_speed [--lines 4000] [--workers 1 2] [INPUT]

Run it when no other Ray cluster runs on the machine.  The last line is the results as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from platform.data.storage import open_text_lines
from platform.launch.cluster import start_ray
from platform.launch.parse_job import ParseConfig, parse_corpus

ROOT = Path(__file__).resolve().parents[1]


DATA = Path(os.environ.get("NMT_TEST_DATA") or ROOT.parent / "shared" / "data")


def write_first_lines(source: str, count: int, path: Path) -> int:
    with open(path, "w", encoding="utf-8") as handle:
        written = 0
        for written, (_, line) in enumerate(open_text_lines(source), 1):
            handle.write(line + "\n")
            if written == count:
                break
    return written


def one_run(source: Path, out: Path, workers: int, shard_size: int) -> dict:
    config = ParseConfig(source=str(source), out=out, model="ja_ginza", strip_spaces=True, pretokenized=False,
                         shard_size=shard_size, workers=workers)
    result = parse_corpus(config, log=lambda line: None)
    return {"workers": result.workers, "sentences": result.sentences, "shards": result.shards,
            "startup_s": round(result.startup_s, 2), "parse_s": round(result.parse_s, 2),
            "wall_s": round(result.wall_s, 2), "parse_sentences_per_s": round(result.sentences / result.parse_s, 1),
            "wall_sentences_per_s": round(result.sentences / result.wall_s, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("input", nargs="?", default=str(DATA / "tanaka-enja" / "train.ja.gz"),
                        help="one Japanese sentence per line (default: $NMT_TEST_DATA/tanaka-enja/train.ja.gz)")
    parser.add_argument("--lines", type=int, default=4000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--shard-size", type=int, default=ParseConfig.shard_size)
    args = parser.parse_args()
    start_ray(None, num_cpus=max(max(args.workers), os.cpu_count() or 1), log_to_driver=False)
    with tempfile.TemporaryDirectory(prefix="nmt-parse-speed-") as directory:
        source = Path(directory) / "input.ja"
        count = write_first_lines(args.input, args.lines, source)
        runs, outputs = [], []
        for workers in args.workers:
            out = Path(directory) / f"out-{workers}.conllu"
            runs.append(one_run(source, out, workers, args.shard_size))
            outputs.append(out.read_bytes())
            print(f"{workers} worker(s): {runs[-1]['parse_sentences_per_s']:7.1f} sentences/s parsing, "
                  f"{runs[-1]['wall_sentences_per_s']:7.1f} end to end (pipeline loaded in {runs[-1]['startup_s']} s)")
    identical = all(output == outputs[0] for output in outputs)
    speedup = runs[-1]["parse_sentences_per_s"] / runs[0]["parse_sentences_per_s"]
    wall_speedup = runs[0]["wall_s"] / runs[-1]["wall_s"]
    print(f"{count} lines; {args.workers[-1]} against {args.workers[0]} worker(s): {speedup:.2f}x parsing, "
          f"{wall_speedup:.2f}x end to end; outputs identical: {identical}; load average {os.getloadavg()[0]:.2f}")
    print(json.dumps({"lines": count, "runs": runs, "speedup": round(speedup, 3),
                      "wall_speedup": round(wall_speedup, 3), "identical": identical,
                      "cpus": os.cpu_count(), "load_average_1min": os.getloadavg()[0]}))
    if not identical:
        sys.exit("the outputs differ")


if __name__ == "__main__":
    main()

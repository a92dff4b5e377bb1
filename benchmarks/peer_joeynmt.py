"""Learning per update against a peer: JoeyNMT and the platform on the same prepared data.

    python -m benchmarks.peer_joeynmt platform --data data/demo --seeds 1,2,3 --at 200,400,800
    python -m benchmarks.peer_joeynmt platform --set optim.clip_norm=1.0 --label clip   # one change
    python -m benchmarks.peer_joeynmt platform --seconds 600 --seeds 1       # a wall-clock budget
    python -m benchmarks.peer_joeynmt joeynmt --data data/demo --seeds 1,2,3 --at 200,400,800
    python -m benchmarks.peer_joeynmt table results.jsonl

Both train the Transformer of ``platform.train --model transformer --size cpu`` (2+2 layers,
d 128, 4 heads, d_ff 512, post-LN, tied target embeddings, dropout 0.1, Adam (0.9, 0.98),
label smoothing 0.1, peak learning rate 2e-3 after 100 warm-up updates, inverse square root,
the same at every update), as the platform resolves it (``--set`` applies to both sides), on
the same sentences, splits and SentencePiece models (the prepared dataset's own), with as many
target tokens per update (JoeyNMT's token batch size is chosen by simulating its batcher on the
same lengths), and decode all dev sentences greedily at the given updates.  Every curve point
is one JSON line (``--out``): run label, seed, update, dev BLEU (sacrebleu, the platform's
scorer), dev loss where measured, target tokens/s of the training so far (evaluation
excluded), training seconds and wall seconds.

The platform side runs in this process with the platform's own pieces (``ShardedBatches``,
``train_step``, ``evaluate``): what ``platform.train`` runs per update, without Ray.  The peer
is installed on first use into its own virtual environment (``--peer-venv``; never a
dependency of the project): JoeyNMT 2.3.0 beside the same torch, with ``importlib_metadata``
and ``sentencepiece==0.2.0``.  Its dev BLEU is scored here, from the hypotheses it writes at
each validation, with the same scorer as the platform's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PEER = ["joeynmt==2.3.0", "importlib_metadata", "sentencepiece==0.2.0"]
SETTING = {"lr": 2e-3, "warmup": 100, "tokens": 1500, "clip": 1.0, "smoothing": 0.1}


# ----------------------------------------------------------------------------- the platform


def platform_config(seed: int, overrides: list[str], model: str = "transformer"):
    """``platform.train --model MODEL --size cpu`` with ``overrides``, seeded."""
    from platform.training.config import resolve_config

    return resolve_config(model, "cpu", overrides=[f"seed={seed}", f"batching.seed={seed}", *overrides],
                          max_epochs=10_000)


def platform_tokens_per_update(data: Path, config) -> float:
    """The mean target tokens (incl. EOS) per update of the platform's first epoch."""
    from platform.data.batching import ShardedBatches
    from platform.data.dataset import PreparedDataset

    train = PreparedDataset.open(str(data), with_dev=False).train
    plan = ShardedBatches(train, config.batching).plan(0)
    return float(sum(int((train.tgt_lengths[b] + 1).sum()) for b in plan) / len(plan))


def platform_curve(data: Path, seed: int, at: list[int], overrides: list[str], threads: int,
                   seconds: float | None = None, model: str = "transformer"):
    """(update, metrics) at each of ``at`` (or once, after ``seconds`` of training): the
    platform's training step by step, dev decoded greedily there."""
    import torch

    from platform.data.batching import ShardedBatches
    from platform.data.dataset import PreparedDataset
    from platform.data.subwords import SubwordModel
    from platform.training.context import Context
    from platform.training.evaluate import evaluate
    from platform.training.step import build_training, train_step

    torch.set_num_threads(threads)
    config = platform_config(seed, overrides, model)
    dataset = PreparedDataset.open(str(data), with_dev=True)
    ctx = Context()
    sampler = ShardedBatches(dataset.train, config.batching)
    vocab = dataset.meta["vocab_size"]
    model, optimizer, scheduler = build_training(config, vocab["src"], vocab["tgt"], ctx)
    tgt_model = SubwordModel(dataset.subword_bytes["tgt"])
    update, tokens, train_s, began = 0, 0, 0.0, time.perf_counter()
    epoch, last = 0, time.perf_counter()
    while True:
        sampler.set_epoch(epoch)
        for batches in sampler.updates():  # collating the batch counts as training time
            tokens += train_step(model, optimizer, scheduler, batches, config, ctx).num_tokens
            train_s += time.perf_counter() - last
            update += 1
            done = train_s >= seconds if seconds is not None else update >= max(at)
            if done or (seconds is None and update in at):
                metrics = evaluate(model, dataset.dev, config, tgt_model, dataset.meta["tgt_lang"], ctx).metrics
                yield update, {"dev_bleu": metrics["dev_bleu"], "dev_loss": metrics["dev_loss"],
                               "tokens_per_s": tokens / train_s, "tokens_per_update": tokens / update,
                               "train_s": train_s, "wall_s": time.perf_counter() - began}
            if done:
                return
            last = time.perf_counter()
        epoch += 1


# ----------------------------------------------------------------------------- JoeyNMT


def setup_peer(venv: Path) -> Path:
    """JoeyNMT in its own virtual environment (created once); returns its python."""
    python = venv / "bin" / "python"
    if not (venv / "bin" / "joeynmt").exists() and not _has_joeynmt(python):
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=600)
        import torch

        torch_version = torch.__version__.split("+")[0]
        subprocess.run([str(python), "-m", "pip", "install", "-q", f"torch=={torch_version}", *PEER], check=True,
                       timeout=3600)
    return python


def _has_joeynmt(python: Path) -> bool:
    return python.exists() and subprocess.run([str(python), "-c", "import joeynmt"], capture_output=True,
                                              timeout=120).returncode == 0


def export_for_joeynmt(data: Path, out: Path) -> dict[str, str]:
    """The prepared dataset's splits as JoeyNMT's plain text files, and its SentencePiece
    models and vocabularies (specials first, as JoeyNMT orders them): the same pieces."""
    import pyarrow.parquet as pq
    import sentencepiece as spm

    from platform.data.dataset import read_meta

    meta = read_meta(data)
    src, tgt = meta["src_lang"], meta["tgt_lang"]
    out.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev", "test"):
        table = pq.read_table(data / f"{split}.parquet", columns=["src_text", "tgt_text"])
        for column, lang in (("src_text", src), ("tgt_text", tgt)):
            (out / f"{split}.{lang}").write_text("\n".join(table.column(column).to_pylist()) + "\n",
                                                 encoding="utf-8")
    for side in ("src", "tgt"):
        model = spm.SentencePieceProcessor(model_file=str(data / f"{side}.model"))
        specials = {"<unk>", "<pad>", "<s>", "</s>"}
        pieces = [model.id_to_piece(i) for i in range(model.get_piece_size())]
        vocab = ["<unk>", "<pad>", "<s>", "</s>"] + [p for p in pieces if p not in specials]
        (out / f"{side}.vocab").write_text("\n".join(vocab) + "\n", encoding="utf-8")
        (out / f"{side}.model").write_bytes((data / f"{side}.model").read_bytes())
    return {"src": src, "tgt": tgt}


def peer_batch_size(data: Path, target_tokens: float, seed: int = 1) -> int:
    """JoeyNMT's ``batch_size`` (tokens incl. padding and EOS, ``max(src, trg) + 1`` per
    sentence, a batch closed once it reaches the size) at which its random batches hold
    ``target_tokens`` target tokens on average: its batcher simulated on the same lengths."""
    import numpy as np

    from platform.data.dataset import PreparedDataset

    train = PreparedDataset.open(str(data), with_dev=False).train
    order = np.random.default_rng(seed).permutation(len(train))
    cost = np.maximum(train.src_lengths, train.tgt_lengths)[order] + 1
    target = train.tgt_lengths[order] + 1  # target tokens incl. EOS

    def mean_target_tokens(size: int) -> float:
        sums, current, widest, count = [], 0, 0, 0
        for width, tokens in zip(cost.tolist(), target.tolist()):
            widest, count, current = max(widest, width), count + 1, current + tokens
            if widest * count >= size:
                sums.append(current)
                current, widest, count = 0, 0, 0
        return float(np.mean(sums))

    low, high = 1, 64 * int(target_tokens)
    while low < high:  # the smallest size reaching the target
        middle = (low + high) // 2
        low, high = (middle + 1, high) if mean_target_tokens(middle) < target_tokens else (low, middle)
    return low


def joeynmt_config(config, exported: Path, langs: dict[str, str], model_dir: Path, at: list[int],
                   batch_size: int) -> dict:
    """The platform's resolved ``TrainConfig`` (a Transformer) in JoeyNMT's terms."""
    model, optim = config.model, config.optim

    def side(name: str, lang: str) -> dict:
        return {"lang": lang, "level": "bpe", "lowercase": False, "normalize": False,
                "voc_file": str(exported / f"{name}.vocab"), "tokenizer_type": "sentencepiece",
                "tokenizer_cfg": {"model_file": str(exported / f"{name}.model")}}

    def stack(layers: int) -> dict:
        return {"type": "transformer", "num_layers": layers, "num_heads": model.num_heads, "hidden_size": model.d_model,
                "ff_size": model.d_ff, "dropout": model.dropout, "layer_norm": "pre" if model.pre_norm else "post",
                "embeddings": {"embedding_dim": model.d_model, "scale": True}}

    embed_init = ({"embed_initializer": "xavier_uniform"} if model.embed_init == "xavier" else  # JoeyNMT's default
                  {"embed_initializer": "normal", "embed_init_weight": model.d_model ** -0.5})
    return {
        "name": "peer", "joeynmt_version": "2.3.0", "use_cuda": False, "num_workers": 0, "random_seed": config.seed,
        "data": {"train": str(exported / "train"), "dev": str(exported / "dev"), "dataset_type": "plain",
                 "src": side("src", langs["src"]), "trg": side("tgt", langs["tgt"])},
        "testing": {"beam_size": 1, "batch_size": config.eval.max_tokens, "batch_type": "token",
                    "max_output_length": 200, "eval_metrics": ["bleu"], "sacrebleu_cfg": {"tokenize": "13a"}},
        "training": {"model_dir": str(model_dir), "overwrite": True, "optimizer": "adam",
                     "adam_betas": list(optim.betas), "scheduling": "warmupinversesquareroot",
                     "learning_rate": optim.lr, "learning_rate_warmup": optim.warmup_steps, "learning_rate_min": 1e-8,
                     "clip_grad_norm": optim.clip_norm or None, "label_smoothing": optim.label_smoothing,
                     "weight_decay": optim.weight_decay, "loss": "crossentropy", "normalization": "tokens",
                     "batch_type": "token", "batch_size": batch_size, "epochs": 10_000, "updates": max(at),
                     "validation_freq": min(at), "logging_freq": 100, "early_stopping_metric": "bleu",
                     "keep_best_ckpts": 1, "shuffle": True, "print_valid_sents": []},
        "model": {"initializer": "xavier_uniform", "bias_initializer": "zeros", **embed_init,
                  "tied_embeddings": False, "tied_softmax": model.tie_target_embeddings,
                  "encoder": stack(model.num_encoder_layers), "decoder": stack(model.num_decoder_layers)},
    }


def joeynmt_curve(peer: Path, data: Path, seed: int, at: list[int], overrides: list[str], threads: int, work: Path):
    """(update, metrics) at each of ``at``: JoeyNMT trained in the platform's setting (its
    resolved config, ``overrides`` applied), batches as many target tokens per update as the
    platform's, its dev hypotheses scored here."""
    import yaml

    from platform.data.dataset import PreparedDataset
    from platform.training.metrics import translation_scores

    config = platform_config(seed, overrides)
    exported = work / "joeynmt-data"
    langs = export_for_joeynmt(data, exported)
    batch_size = peer_batch_size(data, platform_tokens_per_update(data, config), seed)
    model_dir = work / f"joeynmt-seed{seed}"
    config_file = work / f"joeynmt-seed{seed}.yaml"
    config_file.write_text(yaml.safe_dump(joeynmt_config(config, exported, langs, model_dir, at, batch_size)))
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    began = time.perf_counter()
    subprocess.run([str(peer), "-m", "joeynmt", "train", str(config_file), "--skip-test"], check=True, env=env,
                   timeout=24 * 3600, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - began
    dataset = PreparedDataset.open(str(data), with_dev=True)
    references = dataset.dev.texts["tgt_text"]
    speed = _joeynmt_speed(model_dir / "train.log")
    for update in at:
        hyps = (model_dir / f"{update}.hyps").read_text(encoding="utf-8").splitlines()
        scores = translation_scores(hyps, references, dataset.meta["tgt_lang"])
        per_update = _joeynmt_tokens_per_update(model_dir)
        yield update, {"dev_bleu": scores.bleu, "tokens_per_s": speed, "tokens_per_update": per_update,
                       "train_s": update * per_update / speed, "wall_s": wall, "batch_size": batch_size}


def _joeynmt_tokens_per_update(model_dir: Path) -> float:
    """Target tokens per update, from the counts in JoeyNMT's last checkpoint."""
    import torch

    state = torch.load(model_dir / "latest.ckpt", map_location="cpu", weights_only=True)
    return state["stats_state"]["total_tokens"] / state["stats_state"]["steps"]


def _joeynmt_speed(log: Path) -> float:
    """Target tokens per second over JoeyNMT's logged intervals (its "Tokens per Sec")."""
    found = [float(x) for x in re.findall(r"Tokens per Sec:\s*([\d.]+)", log.read_text(errors="replace"))]
    return statistics.fmean(found) if found else float("nan")


# ----------------------------------------------------------------------------- the table


def table(lines: list[dict]) -> str:
    """Mean ± std over seeds of dev BLEU per label and update, and tokens/s."""
    labels = list(dict.fromkeys(line["label"] for line in lines))
    updates = sorted({line["update"] for line in lines})
    rows = ["| run | seeds | " + " | ".join(f"{u}" for u in updates) + " | tokens/s |",
            "|---|---|" + "---|" * len(updates) + "---|"]
    for label in labels:
        mine = [line for line in lines if line["label"] == label]
        cells = []
        for update in updates:
            scores = [line["dev_bleu"] for line in mine if line["update"] == update]
            spread = f" ± {statistics.pstdev(scores):.1f}" if len(scores) > 1 else ""  # one seed: no spread to show
            cells.append(f"{statistics.fmean(scores):.1f}{spread}" if scores else "–")
        last = max(line["update"] for line in mine)
        speed = statistics.fmean(line["tokens_per_s"] for line in mine if line["update"] == last)
        seeds = len({line["seed"] for line in mine})
        rows.append(f"| {label} | {seeds} | " + " | ".join(cells) + f" | {speed:,.0f} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("side", choices=["platform", "joeynmt", "table"])
    parser.add_argument("results", nargs="?", help="table: the JSON-lines file(s) to summarise")
    parser.add_argument("--data", type=Path, default=ROOT / "data" / "demo", help="a prepared dataset")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--at", default="200,400,800", help="updates at which dev is decoded")
    parser.add_argument("--seconds", type=float, default=None,
                        help="platform: decode dev once, after this many seconds of training (not --at)")
    parser.add_argument("--set", action="append", default=[], dest="overrides", help="platform: a config override")
    parser.add_argument("--model", default="transformer",
                        help="platform: another model of the Transformer family (JoeyNMT trains the transformer)")
    parser.add_argument("--label", default=None, help="the run's name in the table (default: the side, overrides)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--peer-venv", type=Path, default=Path.home() / ".cache" / "syntax-nmt" / "joeynmt-venv",
                        help="JoeyNMT's own environment (outside the repository: Ray uploads the working tree)")

    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "peer", help="JoeyNMT's data, configs, models")
    parser.add_argument("--out", type=Path, default=None, help="append the JSON lines here too")
    args = parser.parse_args(argv)
    if args.side == "table":
        lines = [json.loads(line) for line in Path(args.results).read_text().splitlines() if line.strip()]
        print(table(lines))
        return 0
    if args.side == "joeynmt" and args.model != "transformer":
        parser.error("--model: JoeyNMT trains the transformer only")
    at = sorted(int(x) for x in args.at.split(","))
    label = args.label or " ".join([args.side, *args.overrides])
    for seed in (int(s) for s in args.seeds.split(",")):
        if args.side == "platform":
            curve = platform_curve(args.data, seed, at, args.overrides, args.threads, args.seconds, args.model)
        else:
            args.work.mkdir(parents=True, exist_ok=True)
            curve = joeynmt_curve(setup_peer(args.peer_venv), args.data, seed, at, args.overrides, args.threads,
                                  args.work)
        for update, metrics in curve:
            line = json.dumps({"label": label, "seed": seed, "update": update, **metrics})
            print(line, flush=True)
            if args.out is not None:
                with args.out.open("a") as out:
                    out.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Artifacts that show what a model learned: the DBSA parse attention against the reference tree."""

from __future__ import annotations

from pathlib import Path

import torch

from platform.data import dataset as ds
from platform.data.subwords import SubwordModel
from platform.tracking import plots
from platform.training.checkpoint import load_checkpoint, model_from_checkpoint
from platform.training.loss import teacher_forcing, to_source


@torch.no_grad()
def parse_heat_map(checkpoint: str | Path, dataset_dir: str | Path, out: str | Path,
                   num_sentences: int = 3) -> Path | None:
    """Heat maps of the encoder parse head on the first dev sentences; None for models without one."""
    state = load_checkpoint(checkpoint)
    model, _ = model_from_checkpoint(state)
    examples = ds.read_examples(dataset_dir, "dev")
    indices = list(range(min(num_sentences, len(examples))))
    batch = examples.collate(indices)
    tgt_in, _ = teacher_forcing(batch)
    output = model(to_source(batch), tgt_in)
    if output.enc_parse_logprobs is None:
        return None
    pieces = SubwordModel(ds.read_subword_model(dataset_dir, "src"))
    attention, heads, tokens = [], [], []
    for b in range(len(indices)):
        n = int(batch.src_lengths[b])
        attention.append(output.enc_parse_logprobs[b, :n, :n].exp().numpy())
        heads.append(batch.src_heads[b, :n].tolist())
        tokens.append(pieces.pieces(batch.src_ids[b, :n].tolist()))
    return plots.parse_attention(attention, heads, tokens, out)


def log_parse_heat_map(logger, checkpoint: Path, dataset_dir: str | Path, workdir: Path) -> None:
    if not Path(checkpoint).exists():
        return
    path = parse_heat_map(checkpoint, dataset_dir, Path(workdir) / "parse_attention.png")
    if path is not None:
        logger.artifact(path, "plots")

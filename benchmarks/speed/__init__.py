"""``python -m benchmarks.speed``: how fast the models and the platform are, side by side in one run.

    python -m benchmarks.speed --device cpu --out bench_cpu.json             # every section
    python -m benchmarks.speed --device cuda --skip-ray --out bench_h100.json  # a GPU box with torch only
    python -m benchmarks.speed --only models,decode --quick                  # a short look

Sections (``--only`` picks some; ``--skip-ray`` drops the two that need Ray):

* ``models``  training throughput (target tokens/s of forward + backward + optimizer step) of every
  model at one size and token batch, and of ``torch.nn.Transformer`` with the same dimensions,
  embeddings, tied output projection, loss and optimizer as the reference; bf16 autocast on
  CUDA, with model FLOP utilisation (MFU);
* ``decode``  beam-4 decoding of ``transformer`` and ``dbsa``: the cached (incremental) decoder of
  ``models.search`` against recomputing the decoder over the whole prefix at every step;
* ``trees``   the batched tree encoders against a per-sentence loop;
* ``ddp``     Ray Train on the demo corpus, the platform's own ``train_step``: 1 against 2 workers;
* ``sweep``   ``python -m platform.tune --smoke``: seconds to the first training step, per trial.

Every contender is timed in interleaved rounds (the order rotates) and summarised by medians of
rates and of per-round ratios, so ratios hold on a noisy, shared machine.  The first three
sections need only torch and ``models/``; Ray, MLflow and Optuna are imported inside the Ray
sections, which record ``{"skipped": "ray not installed"}`` without Ray.  Prints tables and
writes ``--out`` JSON; ``docs/performance.md`` explains the numbers and the targets.

One module per section (``models``, ``decode``, ``trees``, ``distributed``, ``sweep``) over
``common``; ``runner`` runs them and checks the targets; ``__main__`` is the command.
"""

"""What the platform measures, in one place, run from the checkout's root as modules.

    python -m benchmarks.speed --device cpu --out bench_cpu.json   # the models and the platform, side by side
    python -m benchmarks.study                                      # does syntax help? (docs/results.md)
    python -m benchmarks.gpu_run all --out-dir gpu-run              # the prepared run of a lent GPU

Not part of the installed package: the benchmarks read the checkout (docs/, tests' cluster
helpers) and write into it (docs/results.md).  docs/performance.md lists every one."""

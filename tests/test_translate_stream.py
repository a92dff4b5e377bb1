"""``platform.translate`` streams plain input: a process that writes one line at a time gets each
translation before it writes the next, the output is what translating the whole input at once
gives, memory does not grow with the input, and a bad line stops the run after the lines before
it were written."""

import os
import select
import subprocess
import sys
import threading
import tracemalloc

import pytest
from helpers import ROOT, run_in_process

from platform import translate
from platform.data.dataset import PreparedDataset as Dataset
from platform.training.config import load_train_config
from platform.training.context import Context
from platform.training.hooks import LocalHooks
from platform.training.loop import fit


@pytest.fixture(scope="module")
def transformer_checkpoint(demo_dataset, tmp_path_factory):
    directory = tmp_path_factory.mktemp("transformer")
    config = load_train_config({"model": {"name": "transformer", "num_encoder_layers": 1, "num_decoder_layers": 1,
                                          "d_model": 16, "num_heads": 2, "d_ff": 32},
                                "max_epochs": 1, "max_steps_per_epoch": 2, "eval": {"max_sentences": 4}})
    fit(config, Dataset.open(demo_dataset), Context(), LocalHooks(directory, config), log=lambda line: None)
    return directory / "best.pt"


@pytest.fixture(scope="module")
def sources(demo_dataset) -> list[str]:
    return list(Dataset.open(demo_dataset, with_dev=True).dev.texts["src_text"][:6])


def test_a_line_written_is_translated_before_the_next_is_written(transformer_checkpoint, sources, capsys,
                                                                  monkeypatch):
    at_once = run_in_process(translate.main, ["--checkpoint", transformer_checkpoint], capsys,
                             monkeypatch, stdin="".join(line + "\n" for line in sources))
    assert at_once.returncode == 0 and len(at_once.stdout.splitlines()) == len(sources)
    process = subprocess.Popen([sys.executable, "-m", "platform.translate", "--checkpoint", str(transformer_checkpoint),
                                "--buffer-size", "64"], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    streamed = []
    try:
        for line in sources:
            process.stdin.write(line.encode("utf-8") + b"\n")
            process.stdin.flush()  # and the pipe stays open: translate must not wait for 64 lines or the end
            ready, _, _ = select.select([process.stdout], [], [], 120)
            assert ready, f"no translation of {line!r} while the writer waits"
            streamed.append(process.stdout.readline().decode("utf-8").rstrip("\n"))
        process.stdin.close()
        assert process.wait(timeout=60) == 0, process.stderr.read().decode()
    finally:
        if process.poll() is None:
            process.kill()
    assert streamed == at_once.stdout.splitlines()


def test_reading_a_100k_line_pipe_holds_at_most_one_buffer_of_lines():
    read_fd, write_fd = os.pipe()
    line = "ein kleiner satz mit sieben wörtern darin\n".encode()

    def writer():
        with os.fdopen(write_fd, "wb") as out:
            for _ in range(100_000):
                out.write(line)

    thread = threading.Thread(target=writer)
    thread.start()
    sizes = []
    tracemalloc.start()
    with os.fdopen(read_fd, "rb") as stream:
        for chunk in translate.line_chunks(stream, 256):
            sizes.append(len(chunk))
            assert chunk[-1] == line.rstrip(b"\n")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    thread.join()
    assert sum(sizes) == 100_000 and max(sizes) <= 256
    assert peak < 1_000_000 < 100_000 * len(line)  # 4.4 MB went through; well under a quarter of it was held


def test_a_bad_line_stops_the_run_after_the_lines_before_it_were_written(transformer_checkpoint, sources, capsys,
                                                                        monkeypatch):
    stdin = "".join(line + "\n" for line in [*sources[:3], "", sources[4]])
    result = run_in_process(translate.main, ["--checkpoint", transformer_checkpoint, "--buffer-size", "2"],
                            capsys, monkeypatch, stdin=stdin)
    assert result.returncode == 2 and result.stderr.strip() == "error: <stdin>:4: empty line (one sentence per line)"
    assert len(result.stdout.splitlines()) == 3  # lines 1-2 (a chunk) and 3, before the bad line of its chunk

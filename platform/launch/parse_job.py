"""``platform.parse`` as a Ray job: the input cut into fixed shards, parsed by a pool of actors
that each load the pipeline once, one file per shard, so that a killed job resumes.

Actors over shards rather than Ray Data's ``map_batches``: the driver reads the input and writes
every file itself, so the nodes of a ``ray up`` cluster need neither the input nor a shared disk;
a shard is a fixed run of ``shard_size`` lines (whatever the number of workers) that goes through
``nlp.pipe`` by itself, so the trees do not depend on which worker parsed what; and a shard is a
file whose name says what it holds, which is all that resuming needs.  Ray Data reads and writes
on the workers and picks its own blocks and file names.

``parse_corpus`` runs the steps in order:

1. ``plan_shards`` reads the input once: every line is checked (valid UTF-8, not blank: a
   ``FILE:LINE`` error before any Ray work) and each shard's lines hashed.
2. Shard *i* is written to ``OUT.shards/i-KEY.conllu``, KEY a hash of its lines and of everything
   else its trees depend on (``shard_key``: the pipeline, its version and its files, the space handling, the
   batch and shard sizes); shards whose file is there already are skipped.
3. ``ShardParser`` actors (one CPU each; Ray gives such a process one BLAS thread) load the
   pipeline, which must be the version the driver found, and parse the other shards, ``IN_FLIGHT``
   queued per actor, sent as the input is read a second time (so the driver never holds it whole).
   The driver writes each result as it arrives, atomically.
4. The shards are concatenated in order into ``OUT`` (atomically; gzip for ``.gz``, without a time
   stamp, so the same trees give the same bytes), and ``OUT.shards`` is removed.
"""

from __future__ import annotations

import gzip
import hashlib
import itertools
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from platform import atomic
from platform.data.parsing import (
    load_pipeline,
    parse_lines,
    parser_text,
    pipeline_digest,
    pipeline_meta,
    segmenter_of,
)
from platform.data.storage import open_text_lines
from platform.errors import ConfigError, InputError, UserError
from platform.launch.cluster import start_ray

IN_FLIGHT = 2  # shards queued per actor: its next one is there when one ends, and the driver holds few


@dataclass(frozen=True, kw_only=True)
class ParseConfig:
    """One parse job.  The fields from ``model`` to ``shard_size`` decide the trees (and a shard's key)."""

    source: str  # one sentence per line, UTF-8; .gz and URIs allowed
    out: Path  # CoNLL-U; gzip if it ends in .gz
    model: str  # a spaCy pipeline: package name or directory
    strip_spaces: bool  # remove a line's spaces before parsing (GiNZA segments the text itself)
    pretokenized: bool  # a line's words are given, separated by spaces
    batch_size: int = 256  # sentences per nlp.pipe batch
    shard_size: int = 2048  # lines per shard: 8 batches of 256
    workers: int | None = None  # actors; None: one per CPU of the cluster
    address: str | None = None  # a Ray cluster to join; None: start a local one
    progress: bool = False  # a progress bar on stderr

    def __post_init__(self):
        for name in ("batch_size", "shard_size", "workers"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"{name} must be at least 1, not {value}")


@dataclass(frozen=True)
class Shard:
    index: int
    first_line: int  # its first line's number (from 1), which is that sentence's sent_id
    num_lines: int
    sha256: str  # of its lines as read


@dataclass(frozen=True)
class ParseResult:
    sentences: int
    shards: int
    skipped: int  # shards an earlier run had written
    workers: int  # actors started (none when every shard was written)
    startup_s: float  # until every actor had loaded the pipeline
    parse_s: float  # from then until the last shard was written
    wall_s: float  # the whole job


def parse_corpus(config: ParseConfig, log: Callable[[str], object] = print) -> ParseResult:
    """Parse ``config.source`` into ``config.out``, reusing the shards an earlier run wrote."""
    began = time.perf_counter()
    plan = plan_shards(config.source, config.shard_size, config.strip_spaces)
    meta = pipeline_meta(config.model)
    shard_dir = config.out.with_name(f"{config.out.name}.shards")
    key = shard_key(config, meta)
    paths = [shard_dir / shard_name(shard, key) for shard in plan]
    todo = {shard.index for shard, path in zip(plan, paths) if not path.exists()}
    if len(todo) < len(plan):
        log(f"resuming: {len(plan) - len(todo)} of {len(plan)} shards were parsed already ({shard_dir})")
    workers, startup_s, parse_s = parse_missing(config, meta, plan, paths, todo) if todo else (0, 0.0, 0.0)
    concatenate(paths, config.out)
    shutil.rmtree(shard_dir)
    return ParseResult(sentences=sum(shard.num_lines for shard in plan), shards=len(plan),
                       skipped=len(plan) - len(todo), workers=workers, startup_s=startup_s, parse_s=parse_s,
                       wall_s=time.perf_counter() - began)


# ----------------------------------------------------------------------------- the input


def read_chunks(source: str, size: int, strip_spaces: bool) -> Iterator[tuple[int, list[str]]]:
    """``(first line number, lines)``, ``size`` lines at a time; each line must be valid UTF-8
    (``open_text_lines`` says where not) and hold a word."""
    chunk, first = [], 1
    for number, line in open_text_lines(source):
        if not parser_text(line, strip_spaces):
            raise InputError(source, number, "empty line (every line must be one sentence)")
        chunk.append(line)
        if len(chunk) == size:
            yield first, chunk
            chunk, first = [], number + 1
    if chunk:
        yield first, chunk


def lines_sha256(lines: list[str]) -> str:
    return hashlib.sha256("".join(f"{line}\n" for line in lines).encode("utf-8")).hexdigest()


def plan_shards(source: str, shard_size: int, strip_spaces: bool) -> list[Shard]:
    """Every line checked and every shard hashed, before any Ray work or output."""
    shards = [Shard(index, first, len(lines), lines_sha256(lines))
              for index, (first, lines) in enumerate(read_chunks(source, shard_size, strip_spaces))]
    if not shards:
        raise InputError(source, None, "no sentences (empty input)")
    return shards


def reread(config: ParseConfig, plan: list[Shard]) -> Iterator[tuple[Shard, list[str]]]:
    """The planned shards' lines, read again as they are sent out; the input must not have changed."""
    chunks = read_chunks(config.source, config.shard_size, config.strip_spaces)
    for shard in plan:
        _, lines = next(chunks, (None, []))
        if lines_sha256(lines) != shard.sha256:
            raise InputError(config.source, shard.first_line, "the input changed while it was being parsed")
        yield shard, lines


# ----------------------------------------------------------------------------- the shards' files


def shard_key(config: ParseConfig, meta: dict[str, Any]) -> str:
    """Everything a shard's trees depend on besides its lines: the pipeline's name, version and
    files (a pipeline retrained in place is another pipeline), and how it is run."""
    return json.dumps({**segmenter_of(meta, config.strip_spaces), "model": config.model,
                       "files": pipeline_digest(config.model),
                       "pretokenized": config.pretokenized, "batch_size": config.batch_size,
                       "shard_size": config.shard_size}, sort_keys=True)


def shard_name(shard: Shard, key: str) -> str:
    """``000042-<16 hex digits>.conllu``: its place in the output, and a hash of what it holds."""
    digest = hashlib.sha256(f"{key}\n{shard.sha256}".encode()).hexdigest()
    return f"{shard.index:06d}-{digest[:16]}.conllu"


def concatenate(paths: list[Path], out: Path) -> None:
    """The shards in order into ``out``, atomically; gzip with no name or time stamp in its header."""

    def write(handle) -> None:
        packed = (gzip.GzipFile(filename="", mode="wb", fileobj=handle, mtime=0) if out.name.endswith(".gz")
                  else nullcontext(handle))
        with packed as sink:
            for path in paths:
                with open(path, "rb") as part:
                    shutil.copyfileobj(part, sink)

    atomic.write_file(out, write)


# ----------------------------------------------------------------------------- Ray


class ShardParser:
    """A Ray actor (one CPU): one pipeline, loaded once, parsing shard after shard."""

    def __init__(self, config: ParseConfig, meta: dict[str, Any]):
        self.config = config
        self.expected = segmenter_of(meta, config.strip_spaces)
        self.nlp = None

    def load(self) -> None:
        """Load the pipeline: a node with another version would segment the same line differently."""
        import ray

        self.nlp = load_pipeline(self.config.model)
        found = segmenter_of(self.nlp.meta, self.config.strip_spaces)
        if found != self.expected:
            raise UserError(f"node {ray.util.get_node_ip_address()} has {found['pipeline']} {found['version']}, the "
                            f"driver {self.expected['pipeline']} {self.expected['version']}: install the same "
                            f"version on every node")

    def parse(self, first_line: int, lines: list[str]) -> str:
        """The shard's CoNLL-U; the file's first sentence carries the ``# segmenter`` comment."""
        config = self.config
        segmenter = self.expected if first_line == 1 and not config.pretokenized else None
        return parse_lines(self.nlp, lines, first_line, strip_spaces=config.strip_spaces,
                           pretokenized=config.pretokenized, batch_size=config.batch_size, segmenter=segmenter)


def parse_missing(config: ParseConfig, meta: dict[str, Any], plan: list[Shard], paths: list[Path],
                  todo: set[int]) -> tuple[int, float, float]:
    """Parse the shards in ``todo`` on a pool of actors; returns the number of actors, the seconds
    they took to load the pipeline and the seconds they then took to parse."""
    import ray

    num_workers = min(start_cluster(config), len(todo))
    began = time.perf_counter()
    actors = [ray.remote(num_cpus=1)(ShardParser).remote(config, meta) for _ in range(num_workers)]
    skipped_lines = sum(shard.num_lines for shard in plan if shard.index not in todo)
    try:
        get([actor.load.remote() for actor in actors])
        loaded = time.perf_counter()
        paths[0].parent.mkdir(parents=True, exist_ok=True)
        pending = ((shard, lines) for shard, lines in reread(config, plan) if shard.index in todo)
        with tqdm(total=sum(shard.num_lines for shard in plan), initial=skipped_lines, unit="sent",
                  disable=not config.progress) as bar:
            for shard, conllu in parse_shards(actors, pending):
                atomic.write_file(paths[shard.index], lambda handle, text=conllu: handle.write(text.encode("utf-8")))
                bar.update(shard.num_lines)
    finally:
        for actor in actors:
            ray.kill(actor)
    return num_workers, loaded - began, time.perf_counter() - loaded


def start_cluster(config: ParseConfig) -> int:
    """Join the cluster at ``config.address`` or start a local one (with a logical CPU for each of
    ``config.workers``, however many cores there are); returns how many workers to start."""
    import ray


    local_cpus = max(config.workers, os.cpu_count() or 1) if config.workers and not config.address else None
    start_ray(config.address, num_cpus=local_cpus, log_to_driver=False)
    return config.workers or max(1, int(ray.cluster_resources().get("CPU", 1)))


def parse_shards(actors: list, pending: Iterator[tuple[Shard, list[str]]]) -> Iterator[tuple[Shard, str]]:
    """``(shard, CoNLL-U)`` of every pending shard, as they finish: ``IN_FLIGHT`` queued on each
    actor, and an actor that finishes one gets the next."""
    import ray

    in_flight = {}

    def send(actor) -> None:
        for shard, lines in itertools.islice(pending, 1):
            in_flight[actor.parse.remote(shard.first_line, lines)] = (actor, shard)

    for actor in actors * IN_FLIGHT:
        send(actor)
    while in_flight:
        [ref], _ = ray.wait(list(in_flight))
        actor, shard = in_flight.pop(ref)
        yield shard, get(ref)
        send(actor)


def get(refs):
    """``ray.get``; a worker's user error (a missing pipeline, another version) raised as it is,
    and a lost worker as one line saying how to go on."""
    import ray
    from ray.exceptions import RayActorError, RayTaskError

    try:
        return ray.get(refs)
    except RayTaskError as error:
        if isinstance(error.cause, UserError):
            raise error.cause from None
        raise
    except RayActorError as error:
        reason = str(error).strip().splitlines()[0]
        raise UserError(f"a parse worker was lost ({reason}): run the same command again to resume; the "
                        f"shards written are kept") from None

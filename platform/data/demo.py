"""The built-in demo corpus: a seeded synthetic head-final → head-initial language pair.

This is **synthetic data**, made so that a fresh machine can run every job with no download
and so that translating it *needs syntax*: both sides are linearized from one shared
dependency tree, so word order differs systematically and recursively.

* Source ``sov`` (head-final, Japanese-like): SOV clauses, postpositions (``ga`` subject,
  ``o`` object, ``de``/``ni``/``to``/``kara`` obliques), determiner, relative clause and
  adjectives *before* the noun, tense and negation as verb suffixes.
* Target ``svo`` (head-initial): SVO clauses, prepositions, adjectives and relative clauses
  (``ke`` + clause) *after* the noun, negation ``nit`` and future ``wil`` as separate words,
  tense and plural as suffixes.
* Subjects, objects and up to two obliques; 0–2 adjectives per noun phrase; relative clauses
  with a subject or object gap, nested up to depth 2.
* Zipf-distributed pseudo-word lemmas with inflection, so the same stem appears in several
  forms and subwords matter: 250 lemmas by default (``small``, learnt in minutes on a CPU), or
  2,600 (``large``, ``--data demo-large``: a lexicon to memorise as well as the syntax).

Both sides are written as CoNLL-U with gold trees (UD-style relations: nsubj, obj, obl,
amod, det, case, acl, mark, aux, advmod, punct).  Every content word carries a concept id
shared by its translation, which the tests use to measure how much the order changes.
"""

from __future__ import annotations

import gzip
import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from platform import atomic
from platform.errors import UserError

SRC_LANG, TGT_LANG = "sov", "svo"
TENSES = ("Past", "Pres", "Fut")
ROLES = ("loc", "goal", "com", "from")  # oblique roles
SRC_CASE = {"nsubj": "ga", "obj": "o", "loc": "de", "goal": "ni", "com": "to", "from": "kara"}
TGT_PREP = {"loc": "en", "goal": "tu", "com": "wid", "from": "fro"}
SRC_TENSE = {"Past": "ta", "Pres": "ru", "Fut": "rou"}
TGT_TENSE = {"Past": "ed", "Pres": "es", "Fut": ""}
SRC_FUNCTION = set(SRC_CASE.values()) | {"sono", "。"}
TGT_FUNCTION = set(TGT_PREP.values()) | {"ze", "ke", "nit", "wil", "."}


@dataclass(frozen=True, kw_only=True)
class DemoConfig:
    num_train: int = 20000
    num_dev: int = 500
    num_test: int = 500
    seed: int = 1
    num_nouns: int = 150  # the "small" lexicon (LEXICONS)
    num_verbs: int = 60  # two thirds transitive
    num_adjectives: int = 40
    max_relative_depth: int = 2  # relative clauses inside relative clauses, at most this deep

    def __post_init__(self) -> None:
        if min(self.num_train, self.num_dev, self.num_test) < 1:
            raise ValueError("every demo split needs at least one pair")
        if min(self.num_nouns, self.num_adjectives) < 3 or self.num_verbs < 3:
            raise ValueError("the demo lexicon needs at least 3 nouns, verbs and adjectives")


@dataclass(frozen=True)
class LexiconSize:
    nouns: int
    verbs: int
    adjectives: int
    vocab_size: int  # subword vocabulary per side: below the number of word forms, so words split
    purpose: str


# ``small`` (the default, ``--data demo``): a lexicon a 2-core machine learns within the
# Quickstart sweep's 800 updates, so what separates trials is the syntax and the knobs.
# ``large`` (``--data demo-large``): a lexicon of 2,600 Zipf-distributed
# lemmas that a small model must memorise on top of the reordering (slow on a CPU; closer to
# real data's rare-word problem).
LEXICONS = {
    "small": LexiconSize(150, 60, 40, 600, "the Quickstart: learnt in minutes on 2 cores"),
    "large": LexiconSize(1600, 600, 400, 4000, "harder: a 2,600-lemma Zipfian lexicon to memorise as well"),
}


def config_from_args(sizes: str, seed: int, lexicon: str = "small") -> DemoConfig:
    """``--demo-sizes 20000,500,500`` and ``--demo-lexicon small|large|NOUNS,VERBS,ADJECTIVES`` → DemoConfig."""
    try:
        train, dev, test = (int(part) for part in sizes.split(","))
    except ValueError:
        raise UserError(f"--demo-sizes expects three positive integers TRAIN,DEV,TEST, got {sizes!r}") from None
    nouns, verbs, adjectives = lexicon_counts(lexicon)
    try:
        return DemoConfig(num_train=train, num_dev=dev, num_test=test, seed=seed, num_nouns=nouns, num_verbs=verbs,
                          num_adjectives=adjectives)
    except ValueError as error:
        raise UserError(f"--demo-sizes/--demo-lexicon: {error}") from None


def lexicon_counts(lexicon: str) -> tuple[int, int, int]:
    if lexicon in LEXICONS:
        size = LEXICONS[lexicon]
        return size.nouns, size.verbs, size.adjectives
    try:
        nouns, verbs, adjectives = (int(part) for part in lexicon.split(","))
    except ValueError:
        raise UserError(f"--demo-lexicon expects {' or '.join(LEXICONS)} or NOUNS,VERBS,ADJECTIVES, "
                        f"got {lexicon!r}") from None
    return nouns, verbs, adjectives


# --------------------------------------------------------------------------- lexicon


@dataclass(frozen=True)
class Lexicon:
    nouns: list[tuple[str, str]]  # (source stem, target stem)
    verbs: list[tuple[str, str]]
    adjectives: list[tuple[str, str]]
    num_transitive: int


def _src_stem(rng: random.Random, syllables: int) -> str:
    return "".join(rng.choice("kstnhmyrgzdbp") + rng.choice("aiueo") for _ in range(syllables))


_ONSETS = "b bl br d dr f fl fr g gl gr k kl kr l m n p pl pr r s sk sl sp st str t tr v w z th sh ch".split()
_VOWELS = "a e i o u ea oo ai".split()
_CODAS = ["", "n", "m", "r", "l", "t", "k", "nd", "rk", "ng", "lp"]


def _tgt_stem(rng: random.Random, syllables: int) -> str:
    return "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(syllables))


def build_lexicon(config: DemoConfig) -> Lexicon:
    rng = random.Random(config.seed)
    seen_src, seen_tgt = set(SRC_FUNCTION), set(TGT_FUNCTION)

    def unique(make, seen: set[str]) -> str:
        while True:
            word = make(rng, rng.choice((2, 2, 3)))
            if word not in seen:
                seen.add(word)
                return word

    def pairs(count: int, src_suffix: str = "") -> list[tuple[str, str]]:
        return [(unique(_src_stem, seen_src) + src_suffix, unique(_tgt_stem, seen_tgt)) for _ in range(count)]

    return Lexicon(nouns=pairs(config.num_nouns), verbs=pairs(config.num_verbs),
                   adjectives=pairs(config.num_adjectives, "i"), num_transitive=config.num_verbs * 2 // 3)


# --------------------------------------------------------------------------- abstract trees


@dataclass
class NounPhrase:
    concept: int
    noun: int
    plural: bool
    definite: bool
    adjectives: list[tuple[int, int]]  # (concept, adjective)
    relative: Clause | None = None
    gap: str = ""  # which argument of the relative clause the noun fills: "nsubj" | "obj"


@dataclass
class Clause:
    concept: int
    verb: int
    tense: str
    negative: bool
    subject: NounPhrase | None
    object: NounPhrase | None
    obliques: list[tuple[str, NounPhrase]] = field(default_factory=list)


class _Generator:
    """Samples abstract trees; lexical choice is Zipfian so rare stems exist."""

    def __init__(self, lexicon: Lexicon, rng: random.Random, max_depth: int):
        self.lexicon, self.rng, self.max_depth = lexicon, rng, max_depth
        self.concepts = itertools.count()
        self._weights = {n: list(itertools.accumulate(1.0 / (r + 1) for r in range(n)))
                         for n in {len(lexicon.nouns), lexicon.num_transitive,
                                   len(lexicon.verbs) - lexicon.num_transitive, len(lexicon.adjectives)}}

    def _pick(self, count: int) -> int:
        return self.rng.choices(range(count), cum_weights=self._weights[count])[0]

    def clause(self, depth: int, gap: str = "") -> Clause:
        rng = self.rng
        transitive = gap == "obj" or rng.random() < 0.65
        lex = self.lexicon
        intransitive = len(lex.verbs) - lex.num_transitive  # the verbs after the transitive ones
        verb = self._pick(lex.num_transitive) if transitive else lex.num_transitive + self._pick(intransitive)
        concept = next(self.concepts)
        subject = None if gap == "nsubj" else self.noun_phrase(depth)
        obj = None if gap == "obj" or not transitive else self.noun_phrase(depth)
        num_obliques = rng.choices((0, 1, 2), weights=(5, 3.5, 1.5) if depth == 0 else (8, 2, 0))[0]
        obliques = [(rng.choice(ROLES), self.noun_phrase(depth)) for _ in range(num_obliques)]
        return Clause(concept=concept, verb=verb, tense=rng.choice(TENSES), negative=rng.random() < 0.2,
                      subject=subject, object=obj, obliques=obliques)

    def noun_phrase(self, depth: int) -> NounPhrase:
        rng = self.rng
        np_ = NounPhrase(concept=next(self.concepts), noun=self._pick(len(self.lexicon.nouns)),
                         plural=rng.random() < 0.3, definite=rng.random() < 0.3, adjectives=[])
        num_adjectives = rng.choices((0, 1, 2), weights=(6, 3, 1))[0]
        adjectives: list[int] = []
        while len(adjectives) < num_adjectives:  # distinct adjectives
            adjective = self._pick(len(self.lexicon.adjectives))
            if adjective not in adjectives:
                adjectives.append(adjective)
        np_.adjectives = [(next(self.concepts), adjective) for adjective in adjectives]
        if depth < self.max_depth and rng.random() < (0.18 if depth == 0 else 0.1):
            np_.gap = rng.choice(("nsubj", "obj"))
            np_.relative = self.clause(depth + 1, gap=np_.gap)
        return np_


# --------------------------------------------------------------------------- linearization


@dataclass
class Token:
    form: str
    lemma: str
    upos: str
    feats: str = "_"
    deprel: str = ""
    head: Token | None = None
    concept: int = -1  # shared with the translation for content words


def _attach(dependent: Token, head: Token, deprel: str) -> Token:
    dependent.head, dependent.deprel = head, deprel
    return dependent


class _Linearizer:
    """Base: turns an abstract tree into ordered tokens with heads."""

    def __init__(self, lexicon: Lexicon):
        self.lexicon = lexicon

    def sentence(self, clause: Clause) -> list[Token]:
        tokens, verb = self.clause(clause)
        verb.deprel = "root"
        tokens.append(_attach(Token(self.period, self.period, "PUNCT"), verb, "punct"))
        return tokens


class SourceLinearizer(_Linearizer):
    """Head-final: [det] [relative clause] [adjectives] noun case; ... object verb-TENSE."""

    period = "。"

    def clause(self, c: Clause) -> tuple[list[Token], Token]:
        stem = self.lexicon.verbs[c.verb][0]
        form = stem + ("na" if c.negative else "") + SRC_TENSE[c.tense]
        feats = f"Polarity=Neg|Tense={c.tense}" if c.negative else f"Tense={c.tense}"
        verb = Token(form, stem, "VERB", feats, concept=c.concept)
        tokens: list[Token] = []
        arguments = [("nsubj", c.subject)] + [(role, np_) for role, np_ in c.obliques] + [("obj", c.object)]
        for role, np_ in arguments:
            if np_ is not None:
                np_tokens, noun = self.noun_phrase(np_)
                np_tokens.append(_attach(Token(SRC_CASE[role], SRC_CASE[role], "ADP"), noun, "case"))
                _attach(noun, verb, role if role in ("nsubj", "obj") else "obl")
                tokens += np_tokens
        return tokens + [verb], verb

    def noun_phrase(self, np_: NounPhrase) -> tuple[list[Token], Token]:
        stem = self.lexicon.nouns[np_.noun][0]
        noun = Token(stem + ("ra" if np_.plural else ""), stem, "NOUN",
                     "Number=Plur" if np_.plural else "Number=Sing", concept=np_.concept)
        tokens = [_attach(Token("sono", "sono", "DET"), noun, "det")] if np_.definite else []
        if np_.relative is not None:
            rel_tokens, rel_verb = self.clause(np_.relative)
            _attach(rel_verb, noun, "acl")
            tokens += rel_tokens
        for concept, adjective in np_.adjectives:
            form = self.lexicon.adjectives[adjective][0]
            tokens.append(_attach(Token(form, form, "ADJ", concept=concept), noun, "amod"))
        return tokens + [noun], noun


class TargetLinearizer(_Linearizer):
    """Head-initial: subject [wil] [nit] verb-TENSE object prep+obliques; det noun adjectives [ke clause]."""

    period = "."

    def clause(self, c: Clause) -> tuple[list[Token], Token]:
        stem = self.lexicon.verbs[c.verb][1]
        feats = f"Polarity=Neg|Tense={c.tense}" if c.negative else f"Tense={c.tense}"
        verb = Token(stem + TGT_TENSE[c.tense], stem, "VERB", feats, concept=c.concept)
        tokens: list[Token] = []
        if c.subject is not None:
            subject, noun = self.noun_phrase(c.subject)
            _attach(noun, verb, "nsubj")
            tokens += subject
        if c.tense == "Fut":
            tokens.append(_attach(Token("wil", "wil", "AUX"), verb, "aux"))
        if c.negative:
            tokens.append(_attach(Token("nit", "nit", "PART"), verb, "advmod"))
        tokens.append(verb)
        if c.object is not None:
            obj, noun = self.noun_phrase(c.object)
            tokens += obj
            _attach(noun, verb, "obj")
        for role, np_ in c.obliques:
            oblique, noun = self.noun_phrase(np_)
            tokens.append(_attach(Token(TGT_PREP[role], TGT_PREP[role], "ADP"), noun, "case"))
            tokens += oblique
            _attach(noun, verb, "obl")
        return tokens, verb

    def noun_phrase(self, np_: NounPhrase) -> tuple[list[Token], Token]:
        stem = self.lexicon.nouns[np_.noun][1]
        noun = Token(stem + ("s" if np_.plural else ""), stem, "NOUN",
                     "Number=Plur" if np_.plural else "Number=Sing", concept=np_.concept)
        tokens = [_attach(Token("ze", "ze", "DET"), noun, "det")] if np_.definite else []
        tokens.append(noun)
        for concept, adjective in np_.adjectives:
            form = self.lexicon.adjectives[adjective][1]
            tokens.append(_attach(Token(form, form, "ADJ", concept=concept), noun, "amod"))
        if np_.relative is not None:
            rel_tokens, rel_verb = self.clause(np_.relative)
            _attach(rel_verb, noun, "acl")
            marker = _attach(Token("ke", "ke", "PRON"), rel_verb, "mark")
            tokens += [marker] + rel_tokens
        return tokens, noun


# --------------------------------------------------------------------------- corpus


@dataclass(frozen=True)
class DemoPair:
    src: list[Token]
    tgt: list[Token]


def generate(config: DemoConfig, split: str, count: int, lexicon: Lexicon | None = None) -> Iterator[DemoPair]:
    """``count`` sentence pairs of ``split``; the same config always gives the same pairs."""
    lexicon = lexicon or build_lexicon(config)
    generator = _Generator(lexicon, random.Random(f"{config.seed}/{split}"), config.max_relative_depth)
    source, target = SourceLinearizer(lexicon), TargetLinearizer(lexicon)
    for _ in range(count):
        clause = generator.clause(depth=0)
        yield DemoPair(src=source.sentence(clause), tgt=target.sentence(clause))


def to_conllu(tokens: list[Token], sent_id: str) -> str:
    index = {id(token): number for number, token in enumerate(tokens, start=1)}
    lines = [f"# sent_id = {sent_id}", f"# text = {' '.join(t.form for t in tokens)}"]
    for number, token in enumerate(tokens, start=1):
        head = index[id(token.head)] if token.head is not None else 0
        lines.append(f"{number}\t{token.form}\t{token.lemma}\t{token.upos}\t_\t{token.feats}\t{head}\t{token.deprel}\t_\t_")
    return "\n".join(lines) + "\n\n"


def write_corpus(directory: str | Path, config: DemoConfig) -> dict[str, Path]:
    """Write ``{train,dev,test}.{sov,svo}.conllu.gz`` and return the split prefixes."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    lexicon = build_lexicon(config)
    prefixes = {}
    for split, count in (("train", config.num_train), ("dev", config.num_dev), ("test", config.num_test)):
        prefix = directory / split
        with atomic.naming(f"{prefix}.{{{SRC_LANG},{TGT_LANG}}}.conllu.gz"), \
             gzip.open(f"{prefix}.{SRC_LANG}.conllu.gz", "wt", encoding="utf-8", compresslevel=5) as src_file, \
             gzip.open(f"{prefix}.{TGT_LANG}.conllu.gz", "wt", encoding="utf-8", compresslevel=5) as tgt_file:
            for number, pair in enumerate(generate(config, split, count, lexicon), start=1):
                src_file.write(to_conllu(pair.src, f"{split}-{number}"))
                tgt_file.write(to_conllu(pair.tgt, f"{split}-{number}"))
        prefixes[split] = prefix
    return prefixes

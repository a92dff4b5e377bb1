"""docs/results.md's prose says what its tables say: every figure its bullets quote (the first
study's "What this says", the pooled and the converged CPU runs' "What ... say") and the
figures of its other paragraphs are read back here from the tables of the same page (written by
benchmarks/study.py and benchmarks/gpu_run.py table), so a new results file or a rerun that
changes a table fails here until the prose follows."""

import re

import pytest
from helpers import ROOT
from scipy import stats

from platform.tracking.significance import holm

UNSEEN = "test BLEU, unseen"

PAGE = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
CPU = PAGE[PAGE.index("<!-- STUDY_BEGIN"):PAGE.index("<!-- STUDY_END -->")]


def markdown_tables(text: str) -> list[dict[str, dict[str, str]]]:
    """Every markdown table in ``text``, each by its rows' first cell, then by its header."""
    tables, lines = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            lines.append([cell.strip() for cell in line.strip("|").split(" | ")])
        elif lines:
            header, rows = lines[0], [cells for cells in lines[1:] if not set("".join(cells)) <= set("-:| ")]
            tables.append({cells[0]: dict(zip(header, cells)) for cells in rows})
            lines = []
    return tables


def table(title: str) -> dict[str, dict[str, str]]:
    """The first markdown table after ``### title`` in the CPU study's section, by row and header."""
    return markdown_tables(CPU.split(f"### {title}")[1].split("###")[0])[0]


def mean(cell: str) -> float:
    return float(cell.split(" ± ")[0].split(" ")[0])


def std(cell: str) -> float:
    return float(cell.split(" ± ")[1].split(" ")[0])


def bullet(start: str, heading: str = "What this says, and what it cannot") -> str:
    """The bullet that starts with ``start`` under ``### heading``, on one line."""
    said = PAGE.split(f"### {heading}")[1].split("\n## ")[0].split("\n### ")[0]
    found = next(item for item in said.split("\n- ") if item.lstrip("- ").startswith(f"**{start}"))
    return " ".join(found.split())


DEGUCHI = table("Deguchi et al. 2019, Table 2")
OMOTE = table("Omote et al. 2019, Table 2")
DEV = {row: {int(update): float(value) for update, value in cells.items() if update.isdigit()}
       for row, cells in table("Dev BLEU by update").items()}
BASE, DBSA = DEGUCHI["deguchi2019/baseline"], DEGUCHI["deguchi2019/enc+dec"]
GREEDY, DEP_REL = OMOTE["omote2019/baseline (the deguchi2019/baseline runs)"], OMOTE["omote2019/dep+rel"]


def welch(system: dict[str, str], baseline: dict[str, str]) -> float:
    """Welch's p from two rows' mean ± std over their seeds (the first study's tables)."""
    return stats.ttest_ind_from_stats(mean(system["test BLEU"]), std(system["test BLEU"]), int(system["seeds"]),
                                      mean(baseline["test BLEU"]), std(baseline["test BLEU"]),
                                      int(baseline["seeds"]), equal_var=False).pvalue


def test_the_dbsa_bullet_quotes_the_deguchi_table_and_the_dev_curves():
    text = bullet("DBSA on both sides is worse here")
    assert (f"scores {mean(BASE['test BLEU']) - mean(DBSA['test BLEU']):.1f} BLEU and "
            f"{mean(BASE['test chrF']) - mean(DBSA['test chrF']):.1f} chrF below") in text
    assert "p ≤ 0.001 in both tests" in text
    assert f"(Welch p {welch(DBSA, BASE):.3f} over its {DBSA['seeds']} seeds a side;" in text
    assert max(float(DBSA[key]) for key in ("BLEU p (bs)", "BLEU p (ar)", "chrF2 p (bs)", "chrF2 p (ar)")) <= 0.001
    source, target = (float(value) for value in DBSA["UAS enc / dec"].split(" / "))
    assert f"UAS {source:.2f} on the source, {target:.2f} on the target" in text
    base, dbsa = DEV["deguchi2019/baseline"], DEV["deguchi2019/enc+dec"]
    assert f"({dbsa[500]:.2f} against {base[500]:.2f} dev BLEU at 500 updates)" in text
    assert f"(from {base[500] - dbsa[500]:.2f} to {base[2000] - dbsa[2000]:.2f})" in text


def test_the_dep_rel_bullet_quotes_the_omote_table():
    text = bullet("Dependency-based relative positions")
    assert f"scores {mean(DEP_REL['test BLEU']) - mean(GREEDY['test BLEU']):.1f} BLEU above" in text
    assert all(DEV["omote2019/dep+rel"][u] > DEV["deguchi2019/baseline"][u] for u in DEV["deguchi2019/baseline"])
    assert "leads the dev curve at every validation" in text
    p = {key: float(DEP_REL[key]) for key in ("BLEU p (bs)", "BLEU p (ar)", "chrF2 p (bs)", "chrF2 p (ar)")}
    assert (f"p is {p['BLEU p (bs)']:.2f} (bootstrap) and {p['BLEU p (ar)']:.2f} (randomisation) for BLEU, "
            f"{p['chrF2 p (bs)']:.2f} and {p['chrF2 p (ar)']:.2f} for chrF") in text


def test_the_budget_bullet_quotes_the_dev_curve_and_the_averaged_weights():
    text = bullet("The baseline has not flattened")
    base = DEV["deguchi2019/baseline"]
    assert f"still gains {base[2000] - base[1750]:.1f} between 1,750 and 2,000 updates" in text
    averaged = [(mean(row["test BLEU"]), mean(row["BLEU, last validations averaged"]))
                for row in (*DEGUCHI.values(), *OMOTE.values()) if row["BLEU, last validations averaged"] != "–"]
    assert averaged and all(last < best for best, last in averaged)  # "below the best checkpoint in every row"
    assert "score below the best checkpoint in every row" in text


def test_the_tests_bullet_quotes_the_seed_spread_and_welchs_p_from_the_tables():
    text = bullet("The sentence-level tests ignore training's variance")
    spreads = [std(row["test BLEU"]) for row in (*DEGUCHI.values(), *OMOTE.values())]
    assert f"({min(spreads):.1f} to {max(spreads):.1f} BLEU)" in text

    assert (f"Welch gives p {welch(DBSA, BASE):.3f} for `enc+dec` against its baseline and "
            f"{welch(DEP_REL, GREEDY):.2f} for `dep+rel`") in text


@pytest.mark.parametrize("claim", ["The 9 runs took 108 minutes"])
def test_the_study_time_in_the_speed_bullet_is_the_tables(claim):
    runs, minutes = re.search(r"(\d+) runs \(\d+ updates each\); the study's wall time, training and test "
                              r"decoding: (\d+) min", CPU).groups()
    assert claim == f"The {runs} runs took {minutes} minutes" and claim in bullet("Speed")


# ------------------------------------------------- the pooled CPU runs (benchmarks/gpu_run.py table)

def budget_block(section: str, title: str) -> str:
    """The block of a pooled section whose budget's ``### At most ...`` title contains ``title``."""
    (block,) = [part for part in section.split("\n### ")[1:] if title in part.split("\n", 1)[0]]
    return block


POOLED = budget_block(PAGE[PAGE.index("<!-- CPU_RUNS_BEGIN"):PAGE.index("<!-- CPU_RUNS_END -->")],
                      "At most 2,000 updates")


def pooled_tables(heading: str, pooled: str = POOLED) -> list[dict[str, dict[str, str]]]:
    """The tables under ``#### heading`` (exactly) in a pooled section (by default the CPU runs'
    at 2,000 updates): the rows' table, then the comparisons' if any."""
    (section,) = [part.split("\n", 1)[1] for part in pooled.split("\n#### ")[1:] if part.split("\n", 1)[0] == heading]
    return markdown_tables(section)


def said(start: str) -> str:
    return bullet(start, "What the pooled CPU runs say")


def over_seeds(row: dict[str, str], runs: str, against: str = "its baseline") -> str:
    """How a bullet quotes a row's primary result: its runs (``"5 and 3"``), Δ with its interval,
    Welch's p and Holm's."""
    return (f"{row['Δ BLEU (95% CI)']} BLEU against {against} over {runs} runs "
            f"(Welch p {row['p (seeds)']}, Holm {row['p (Holm)']})")


def test_the_pooled_dbsa_bullet_quotes_the_pooled_deguchi_table():
    (rows,) = pooled_tables("Deguchi et al. 2019, Table 2 (dependency-based self-attention)")
    base, dbsa = rows["deguchi2019/baseline"], rows["deguchi2019/enc+dec"]
    text = said("DBSA on both sides, over seeds")
    assert f"`enc+dec`: {over_seeds(dbsa, base['seeds'] + ' and ' + dbsa['seeds'])}" in text
    assert (float(dbsa["p (Holm)"]) < 0.05) == ("significant after Holm's correction" in text)
    pairs = dbsa["seeds"]  # the baseline has a run of each of enc+dec's seeds: as many pairs as enc+dec's runs
    every = all(dbsa[key].endswith(f" ({pairs} of {pairs} < 0.05)") for key in ("BLEU p (bs)", "BLEU p (ar)"))
    assert every == (f"below 0.05 in each of its {pairs} seed pairs by both sentence-level tests of BLEU" in text)


OMOTE_GREEDY = "Omote et al. 2019, Table 2 (dependency-based relative positions)"
OMOTE_BEAM = f"{OMOTE_GREEDY}, every row decoded as deguchi2019/baseline decodes (beam 4, α 0.6)"


def family(heading: str, pooled: str = POOLED) -> int:
    """The size of a pooled table's Holm family, as its caption states it."""
    (section,) = [part for part in pooled.split("\n#### ")[1:] if part.split("\n", 1)[0] == heading]
    return int(re.search(r"Holm's correction over the paper table's (\d+) comparisons", " ".join(section.split()))[1])


def over_both_decodings() -> dict[tuple[str, str], str]:
    """Holm over Omote's comparisons under both decodings (the greedy table's and the beam-4
    table's families together, the comparisons without runs counted as p = 1 as each table
    counts them), from the tables' p (seeds): {(decoding, comparison): Holm's p}."""
    cells = {}
    for decoding, heading in (("greedy", OMOTE_GREEDY), ("beam", OMOTE_BEAM)):
        rows, pairs = pooled_tables(heading)
        cells.update({(decoding, name): row["p (seeds)"] for name, row in (*rows.items(), *pairs.items())
                      if row["p (seeds)"] != "–"})
    assert len(cells) == 6, cells
    size = family(OMOTE_GREEDY) + family(OMOTE_BEAM)
    return dict(zip(cells, (f"{p:.4f}" for p in holm([float(p) for p in cells.values()], family=size))))


def test_the_page_says_which_holm_families_it_has():
    text = " ".join(PAGE.split("### What the pooled CPU runs say")[1].split("\n- ")[0].split())
    assert f"Deguchi's family holds {family(DEGUCHI_TABLE)} (`enc`, `dec` and `enc+dec` against" in text
    assert f"Omote's {family(OMOTE_GREEDY)} (`rel`, `dep` and `dep+rel` against the baseline" in text
    assert family(OMOTE_BEAM) == family(OMOTE_GREEDY)
    assert f"the bullet also gives Holm over both decodings' {2 * family(OMOTE_GREEDY)} comparisons" in text
    (deguchi,) = pooled_tables(DEGUCHI_TABLE)
    assert not {"deguchi2019/enc", "deguchi2019/dec"} & set(deguchi)  # why the family has rows without runs


def test_the_pooled_relative_positions_bullet_quotes_both_omote_tables():
    greedy_rows, greedy_pairs = pooled_tables(OMOTE_GREEDY)
    beam_rows, _ = pooled_tables(OMOTE_BEAM)
    text = said("Relative positions, over seeds")
    base = greedy_rows["omote2019/baseline (the deguchi2019/baseline runs)"]["seeds"]
    for row in ("omote2019/rel", "omote2019/dep+rel"):
        cells = greedy_rows[row]
        assert f"`{row.split('/')[1]}` greedily: {over_seeds(cells, base + ' and ' + cells['seeds'])}" in text
    (pair,) = greedy_pairs.values()
    assert (f"`dep+rel` against `rel`, Omote et al.'s headline: "
            f"{over_seeds(pair, pair['seeds'].replace(' / ', ' and '), '`rel`')}") in text
    beam_rel = beam_rows["omote2019/rel as deguchi2019/baseline decodes"]
    beam_dep_rel = beam_rows["omote2019/dep+rel as deguchi2019/baseline decodes"]
    assert f"with beam 4, `rel`: {over_seeds(beam_rel, base + ' and ' + beam_rel['seeds'])}" in text
    assert f"`dep+rel`: {over_seeds(beam_dep_rel, base + ' and ' + beam_dep_rel['seeds'])}, and over both" in text
    both = over_both_decodings()[("beam", "omote2019/dep+rel as deguchi2019/baseline decodes")]
    assert f"and over both decodings' 8 comparisons (Holm {both})" in text and float(both) < 0.05
    holm = [float(cells["p (Holm)"]) for cells in (*greedy_rows.values(), pair) if cells["p (Holm)"] != "–"]
    assert (min(holm) >= 0.05) == ("none of the greedy comparisons is significant after Holm" in text)
    assert (float(beam_rel["p (Holm)"]) < 0.05) == ("significant after Holm with beam 4" in text)
    both = over_both_decodings()[("beam", "omote2019/rel as deguchi2019/baseline decodes")]
    assert float(both) < 0.05 and f"and still over both decodings' 8 comparisons (Holm {both})" in text
    ups = [cells["Δ BLEU (95% CI)"].startswith("+") for cells in (greedy_rows["omote2019/rel"], beam_rel)]
    assert all(ups) == ("Relative positions point up under both decodings" in text)


def interval(cells: dict[str, str]) -> tuple[float, float]:
    low, high = cells["Δ BLEU (95% CI)"].split("[")[1].rstrip("]").split(", ")
    return float(low), float(high)


def test_the_dependency_part_bullet_quotes_omotes_comparison_under_both_decodings():
    (_, greedy_pairs), (_, beam_pairs) = (pooled_tables(heading) for heading in (OMOTE_GREEDY, OMOTE_BEAM))
    (greedy,), (beam,) = greedy_pairs.values(), beam_pairs.values()
    text = said("The dependency part, over seeds")
    low, high = interval(greedy)
    assert (low < 0 < high) == ("as they decode, the interval of that difference includes zero" in text)
    assert (f"With beam 4, `dep+rel` against `rel`: "
            f"{over_seeds(beam, beam['seeds'].replace(' / ', ' and '), '`rel`')}") in text
    own = float(beam["p (Holm)"]) < 0.05
    both = over_both_decodings()[("beam", *beam_pairs)]
    assert (own and float(both) >= 0.05) == (
        f"below 0.05 in the beam table's own family, but not over both decodings' 8 comparisons (Holm {both})"
        in text)
    assert (not own) == (f"not below 0.05 after Holm's correction, even in the beam table's own family (over both "
                         f"decodings' 8 comparisons: Holm {both})" in text)
    assert (float(both) >= 0.05) == ("So the dependency part is not shown here" in text)
    assert ("its interval almost reaches zero" in text) == (0 < interval(beam)[0] < 0.1)
    pairs = beam["seeds"].split(" / ")[0]
    none = all(beam[key].endswith(f" (0 of {pairs} < 0.05)") for key in ("BLEU p (bs)", "BLEU p (ar)"))
    assert none == (f"neither sentence-level test of BLEU is below 0.05 in any of its {pairs} seed pairs" in text)


def test_the_learning_speed_bullet_quotes_the_pooled_dev_curves_and_the_converged_column():
    (rows,) = pooled_tables("Deguchi et al. 2019, Table 2 (dependency-based self-attention)")
    (curves,) = pooled_tables("Dev BLEU by update (mean over runs)")
    base, dbsa = ({int(update): float(value) for update, value in curves[row].items() if update.isdigit()}
                  for row in ("deguchi2019/baseline", "deguchi2019/enc+dec"))
    text = said("Learning speed, not final quality")
    converged = rows["deguchi2019/baseline"]["converged"]
    assert converged.startswith("0 of ") and f"({converged} baseline runs)" in text
    every = [cells["converged"] for part in POOLED.split("\n#### ")[1:] for table in markdown_tables(part)
             for cells in table.values() if "converged" in cells]
    assert every and all(cell.startswith("0 of ") for cell in every) == ("No run has converged" in text)
    assert f"still gains {base[2000] - base[1750]:.2f} between 1,750 and 2,000 updates" in text
    gaps = {update: base[update] - dbsa[update] for update in (500, 2000)}
    assert f"trails it by {gaps[500]:.2f} at 500 updates and by {gaps[2000]:.2f} at 2,000" in text
    assert (0 < gaps[2000] < gaps[500]) == ("a gap that narrows as training goes on" in text)


# ------------------------------------ the CPU runs at a converged budget (benchmarks/gpu_run.py table)

CONVERGED = PAGE[PAGE.index("<!-- CPU_CONVERGED_BEGIN"):PAGE.index("<!-- CPU_CONVERGED_END -->")]
DEGUCHI_TABLE = "Deguchi et al. 2019, Table 2 (dependency-based self-attention)"


def converged_tables(heading: str, patience: int) -> list[dict[str, dict[str, str]]]:
    """The tables under ``#### heading`` in the converged section's block of the budget with this
    patience (a block per budget, each under its ``### At most ...`` title)."""
    return pooled_tables(heading, budget_block(CONVERGED, f"a run stopped after {patience} validations"))


def converged_said(start: str) -> str:
    return bullet(start, "What the converged CPU runs say")


def test_the_converged_dbsa_bullet_quotes_the_converged_deguchi_table_beside_the_2000_update_one():
    (rows,) = converged_tables(DEGUCHI_TABLE, 3)
    (fixed,) = pooled_tables(DEGUCHI_TABLE)
    base, dbsa = rows["deguchi2019/baseline"], rows["deguchi2019/enc+dec"]
    text = converged_said("DBSA at a patience of 3")
    assert f"`enc+dec`: {over_seeds(dbsa, base['seeds'] + ' and ' + dbsa['seeds'])}" in text
    assert f"({mean(dbsa['test BLEU']):.2f} against {mean(base['test BLEU']):.2f})" in text
    assert (dbsa["p (Holm)"] != "–" and float(dbsa["p (Holm)"]) < 0.05) == ("significant after Holm" in text)
    before = fixed["deguchi2019/enc+dec"]["Δ BLEU (95% CI)"]
    assert f"At 2,000 updates the same comparison is {before}" in text
    reversed_ = dbsa["Δ BLEU (95% CI)"].startswith("+") and before.startswith("-")
    assert reversed_ == ("the two rows change places" in text)
    assert dbsa["Δ BLEU (95% CI)"].startswith("+") == ("the sign agrees with Deguchi et al.'s +1.0" in text)
    assert "This budget gets no more runs: the seeds go to the patience-6 budget above" in text
    low, high = interval(dbsa)
    assert (reversed_ and low < 0 < high) == ("change places in the means (the interval still includes zero)" in text)
    pairs = dbsa["seeds"]
    every = all(dbsa[key].endswith(f" ({pairs} of {pairs} < 0.05)") for key in ("BLEU p (bs)", "BLEU p (ar)"))
    assert every == (f"below 0.05 in each of its {pairs} seed pairs by both sentence-level tests of BLEU" in text)


def test_the_stopping_bullet_quotes_where_each_run_stopped():
    (rows,) = converged_tables(DEGUCHI_TABLE, 3)
    base, dbsa = rows["deguchi2019/baseline"], rows["deguchi2019/enc+dec"]
    text = converged_said("Where the runs stopped")
    for name, cells in (("the baseline", base), ("`enc+dec`", dbsa)):
        assert f"{name}: best at update {cells['best at update']}, converged {cells['converged']}" in text
    assert dbsa["converged"].startswith("0 of ") == ("no `enc+dec` run stopped by the rule" in text)
    converged, runs = base["converged"].split(" of ")
    assert (converged == runs) == ("every baseline run stopped by the rule" in text)
    (curves,) = converged_tables("Dev BLEU by update (mean over runs)", 3)
    steps = sorted((int(update), float(value)) for update, value in curves["deguchi2019/baseline"].items()
                   if update.isdigit() and value != "–")
    drop = max(before - after for (_, before), (_, after) in zip(steps, steps[1:]))
    assert 0.5 <= drop <= 1.5 and "the dev curve's ups and downs of about a BLEU point" in text
    (longer,) = converged_tables(DEGUCHI_TABLE, 6)
    seeds6, seeds3 = (seeds_of(budget_block(CONVERGED, f"a run stopped after {p} validations"),
                               "deguchi2019/baseline") for p in (6, 3))
    ends3 = dict(zip(seeds3, stops(base)))
    later = all(best > ends3[seed] for seed, best in zip(seeds6, bests(longer["deguchi2019/baseline"]))
                if seed in ends3)  # the seeds that ran at both patiences
    assert later == ("as the patience-6 runs above show" in text)


def stops(cells: dict[str, str]) -> list[int]:
    """The update each run of a row stopped at, from its ``best at update`` cell: each run's own
    "(of N)", or one after the last run where every run stopped at N."""
    ends = [int(end) for end in re.findall(r"\(of (\d+)\)", cells["best at update"])]
    runs = len(bests(cells))
    return ends if len(ends) == runs else ends * runs


def test_the_longer_patience_bullet_quotes_its_block_beside_the_patience_3_one():
    (rows,) = converged_tables(DEGUCHI_TABLE, 6)
    (before,) = converged_tables(DEGUCHI_TABLE, 3)
    base, dbsa = rows["deguchi2019/baseline"], rows["deguchi2019/enc+dec"]
    base3, dbsa3 = before["deguchi2019/baseline"], before["deguchi2019/enc+dec"]
    text = converged_said("A longer patience")
    pairs = int(dbsa["seeds"])
    assert f"**A longer patience, {pairs} seed pair{'s' if pairs > 1 else ''} so far.**" in text
    runs = f"{base['seeds']} and {dbsa['seeds']}"
    quoted = over_seeds(dbsa, runs) if dbsa["p (seeds)"] != "–" else f"{dbsa['Δ BLEU (95% CI)']} BLEU against its " \
        f"baseline over {runs} runs"
    assert f"`enc+dec`: {quoted} ({mean(dbsa['test BLEU']):.2f} against {mean(base['test BLEU']):.2f})" in text
    assert (dbsa["p (seeds)"] == "–") == ("one seed pair, so no test over seeds yet" in text)
    significant = dbsa["p (Holm)"] != "–" and float(dbsa["p (Holm)"]) < 0.05
    assert (dbsa["p (Holm)"] != "–" and not significant) == (
        f"not significant over seeds with {'two' if pairs == 2 else pairs} runs a side" in text)
    bs, ar = (int(re.search(r"\((\d+) of \d+ < 0.05\)", dbsa[key]).group(1)) for key in ("BLEU p (bs)", "BLEU p (ar)"))
    if bs == ar:
        said_below = ("below 0.05 in that pair" if pairs == 1 else f"below 0.05 in each of its {pairs} seed pairs"
                      if bs == pairs else f"below 0.05 in {bs} of its {pairs} seed pairs")
        assert f"{said_below} by both sentence-level tests of BLEU" in text
    else:
        assert (f"below 0.05 in {bs} of its {pairs} seed pairs by the paired bootstrap and in {ar} by approximate "
                "randomisation") in text
    spread, gap = std(base["test BLEU"]), abs(float(dbsa["Δ BLEU (95% CI)"].split(" ")[0]))
    said_spread = f"The baseline's runs spread by {spread:.2f} BLEU (std), more than the difference"
    assert (spread > gap) == (said_spread in text)
    for name, cells in (("The baseline", base), ("`enc+dec`", dbsa)):
        assert f"{name}: best at update {cells['best at update']}, converged {cells['converged']}" in text
    # each patience-6 baseline against the patience-3 run of its seed (the blocks' seeds lines)
    seeds6, seeds3 = (seeds_of(budget_block(CONVERGED, f"a run stopped after {p} validations"),
                               "deguchi2019/baseline") for p in (6, 3))
    ends3 = dict(zip(seeds3, stops(base3)))
    past = all(best > ends3[seed] for seed, best in zip(seeds6, bests(base)) if seed in ends3)
    ends = spoken([f"{ends3[seed]:,}" for seed in seeds6 if seed in ends3])
    assert past == (f"Each baseline run with a patience-3 run of its seed found new bests past where that run had "
                    f"stopped (at {ends} updates)" in text)
    gain = mean(base["test BLEU"]) - mean(base3["test BLEU"])
    assert (f"the baseline scores {gain:.2f} above the patience-3 mean ({mean(base['test BLEU']):.2f} against "
            f"{mean(base3['test BLEU']):.2f}), so patience 3 stopped the baselines too early") in text
    assert past and gain > 0.5
    more = compared(mean(dbsa["test BLEU"]) - mean(dbsa3["test BLEU"]), gain, ("less", "about as much", "even more"))
    assert f"`enc+dec` gained {more} ({mean(dbsa['test BLEU']):.2f} against {mean(dbsa3['test BLEU']):.2f})" in text
    delta, delta3 = (cells["Δ BLEU (95% CI)"].split(" ")[0] for cells in (dbsa, dbsa3))
    gap = compared(float(delta), float(delta3), ("narrows", "stays about the same", "widens"))
    assert f"the gap {gap}: {delta} against {delta3} at patience 3" in text
    stopped, runs = (int(value) for value in dbsa["converged"].split(" of "))
    assert (stopped < runs) == (f"{runs - stopped} of `enc+dec`'s {runs} runs had not met the stopping rule by the "
                                "cap: their scores at 12,000 updates are not a ceiling" in text)
    assert "12,000 updates" in budget_block(CONVERGED, "a run stopped after 6 validations").split("\n")[0]


def spoken(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return " and ".join([", ".join(items[:-1]), items[-1]] if len(items) > 1 else items)


def compared(value: float, other: float, words: tuple[str, str, str]) -> str:
    """The word for ``value`` against ``other``: less, about the same (within 0.5 BLEU), more."""
    return words[1] if abs(value - other) <= 0.5 else words[2] if value > other else words[0]


def bests(cells: dict[str, str]) -> list[int]:
    """Each run's best update, from its ``best at update`` cell ("7000 (of 8500), 6500" ...)."""
    return [int(value) for value in re.sub(r" \(of \d+\)", "", cells["best at update"]).split(", ")]


def seeds_of(block: str, row: str) -> list[int]:
    """A row's seed numbers, in its runs' order, from a block's "Runs so far" line."""
    return runs_line(block)[row]


# ------------------------------------------------------- the page's other figures, from its tables

def calls(block: str) -> list[tuple[int, float]]:
    """``(runs at once, minutes)`` of each results file a pooled block lists under its title."""
    return [(int(runs), float(minutes)) for runs, minutes in re.findall(r"(\d+) runs at once, ([\d.]+) min", block)]


def test_how_long_a_cpu_call_takes_is_the_fixed_budgets_calls():
    by_runs: dict[int, list[float]] = {}
    for runs, minutes in calls(POOLED.split("\n\n")[1]):
        by_runs.setdefault(runs, []).append(minutes)

    def span(runs: int) -> str:
        low, high = (f"{value:.0f}" for value in (min(by_runs[runs]), max(by_runs[runs])))
        return low if low == high else f"{low} to {high}"

    assert sorted(by_runs) == [2, 3, 4]
    text = " ".join(PAGE.split("A call trains what the CPU's files lack")[1].split("\n\n")[0].split())
    assert f"a pair of runs takes {span(2)} minutes, three {span(3)}, four {span(4)} (the calls listed" in text


GPU = PAGE[PAGE.index("<!-- GPU_STUDY_BEGIN"):PAGE.index("<!-- GPU_STUDY_END -->")]


def test_the_gpu_budget_paragraph_quotes_the_first_gpu_call_and_the_models_size():
    text = " ".join(PAGE.split("The runs so far stop at 2,000 updates")[1].split("\n\n")[0].split())
    (runs, minutes), *_ = calls(budget_block(GPU, "At most 2,000 updates").split("\n\n")[1])
    assert f"the first GPU call took {minutes} min for 2,000 updates of {runs} runs at once" in text
    params = int(markdown_tables(GPU)[0]["deguchi2019/baseline"]["params"].replace(",", ""))
    assert f"about {params * 4 * 3 / 1e6:.0f} MB ({params / 1e6:.2f}M parameters in float32, three times over)" in text


def test_the_overlap_of_test_and_training_is_the_tables():
    (overlap,) = set(re.findall(r"without the (\d+) test pairs whose reference is also a training target", PAGE))
    (test_pairs,) = re.findall(r"50,000 / 500 / (\d+) ja→en pairs", PAGE)
    assert f"{overlap} of the {test_pairs} test references are also training targets, verbatim" in " ".join(
        PAGE.split())


def runs_line(block: str) -> dict[str, list[int]]:
    """``{row: its runs' seed numbers}`` from a block's "Runs so far of each row" line."""
    line = block.split("Runs so far of each row")[1].split("trains what is missing): ")[1].split(".\n")[0]
    runs = re.findall(r"(\S+) (\d+)/\d+(?: \(seeds ([\d, ]+)\))?", line)
    assert all(int(count) == len(seeds.split(", ") if seeds else []) for _, count, seeds in runs), line
    return {row: [int(seed) for seed in seeds.split(", ")] if seeds else [] for row, _, seeds in runs}


def test_the_intro_counts_the_rows_each_device_has_run():
    gpu = runs_line(budget_block(GPU, "At most 2,000 updates"))
    cpu = {row for part in (POOLED, *CONVERGED.split("\n### ")[1:]) for row, runs in runs_line(part).items() if runs}
    ran_gpu = {row for row, runs in gpu.items() if runs}
    none = [row for row in gpu if row not in cpu | ran_gpu]
    text = " ".join(PAGE.split("Most of the four papers' rows have no answer yet")[1].split("\n\n")[0].split())
    assert (f"of the {len(gpu)} rows that train (Omote's baseline is the runs of Deguchi's), the CPU has run "
            f"{len(cpu)} (the two papers' headline rows) and the GPU {len(ran_gpu)}, and {len(none)} have no run on "
            "either device") in text
    assert cpu <= {"deguchi2019/baseline", "deguchi2019/enc+dec", "omote2019/rel", "omote2019/dep+rel"}
    whole = all(row in none for row in gpu if row.startswith(("yang2017/", "currey2018/")))
    assert whole == ("Yang et al.'s and Currey and Heafield's tables whole among them" in text)


def test_the_averaging_bullet_quotes_both_budgets_averaged_columns():
    (rows,) = converged_tables(DEGUCHI_TABLE, 6)
    (fixed,) = pooled_tables(DEGUCHI_TABLE)
    text = converged_said("Averaged weights, once the runs have settled")
    column = "BLEU, last validations averaged"
    best, averaged = ({row: mean(cells[key]) for row, cells in rows.items()} for key in ("test BLEU", column))
    assert all(averaged[row] > best[row] for row in rows) == ("score above the best checkpoint in both rows" in text)
    base, dbsa = "deguchi2019/baseline", "deguchi2019/enc+dec"
    assert (f"(the baseline {averaged[base]:.2f} against {best[base]:.2f}, `enc+dec` {averaged[dbsa]:.2f} against "
            f"{best[dbsa]:.2f})") in text
    assert all("(last 5)" in cells[column] for cells in rows.values()) and "the last 5" in text
    before = fixed[base]
    assert mean(before[column]) < mean(before["test BLEU"])
    assert f"(the baseline {mean(before[column]):.2f} against {mean(before['test BLEU']):.2f})" in text
    assert (f"`enc+dec` leads by {averaged[dbsa] - averaged[base]:.2f} BLEU rather than "
            f"{rows[dbsa]['Δ BLEU (95% CI)'].split(' ')[0][1:]}") in text


def test_the_converged_section_says_how_long_a_patience_6_pair_took():
    minutes = [value for _, value in calls(budget_block(CONVERGED, "a run stopped after 6 validations"))]
    text = " ".join(PAGE.split("## The headline rows at a converged budget")[1].split("```")[0].split())
    span = f"{min(minutes):.0f} to {max(minutes):.0f}" if len(minutes) > 1 else f"{minutes[0]:.0f}"
    assert f"On 2 cores a patience-6 pair took {span} minutes (the calls under its title)" in text


def test_the_gpu_budget_paragraph_says_which_caps_fit_a_call_from_the_first_calls_minutes():
    """8,000 and 12,000 updates against one call's 9 minutes, at the first GPU call's pace."""
    text = " ".join(PAGE.split("The runs so far stop at 2,000 updates")[1].split("\n\n")[0].split())
    (_, minutes), *_ = calls(budget_block(GPU, "At most 2,000 updates").split("\n\n")[1])
    fits = {cap: minutes * cap / 2000 <= 9 for cap in (8000, 12000)}
    assert fits == {8000: True, 12000: False}
    assert "so 12,000 would not fit one call's 9 minutes and 8,000 barely does" in text
    assert 9 - minutes * 4 < 0.5  # barely
    gpu_converged = PAGE[PAGE.index("<!-- GPU_CONVERGED_BEGIN"):PAGE.index("<!-- GPU_CONVERGED_END -->")]
    assert ("None yet." in gpu_converged) == ("Such a budget has not run on a GPU yet" in text)


def test_the_dbsa_bullet_says_whether_the_gpu_agrees_from_the_gpus_table():
    (gpu,) = pooled_tables(DEGUCHI_TABLE, budget_block(GPU, "At most 2,000 updates"))
    (cpu,) = pooled_tables(DEGUCHI_TABLE)
    dbsa, on_gpu = cpu["deguchi2019/enc+dec"], gpu["deguchi2019/enc+dec"]
    text = said("DBSA on both sides, over seeds")
    significant = [float(cells["p (Holm)"]) < 0.05 for cells in (dbsa, on_gpu)]
    sign = on_gpu["Δ BLEU (95% CI)"][0] == dbsa["Δ BLEU (95% CI)"][0]
    assert (sign and significant[0] == significant[1]) == ("significant after Holm's correction, as on the GPU" in text)
    runs = {on_gpu["seeds"], gpu["deguchi2019/baseline"]["seeds"]}
    assert (sign and significant == [True, False] and len(runs) == 1) == (
        f"the GPU's {on_gpu['seeds']} runs a side give {on_gpu['Δ BLEU (95% CI)'].split(' ')[0]} (Holm "
        f"{on_gpu['p (Holm)']}): the same sign, not significant after Holm" in text)


def test_the_omote_bullet_quotes_the_patience_6_omote_tables():
    (rows, pairs), (beam_rows, beam_pairs) = (converged_tables(heading, 6) for heading in (OMOTE_GREEDY, OMOTE_BEAM))
    base = rows["omote2019/baseline (the deguchi2019/baseline runs)"]
    rel, dep_rel = rows["omote2019/rel"], rows["omote2019/dep+rel"]
    beam_base, beam_rel, beam_dep_rel = (beam_rows[f"omote2019/{row} as deguchi2019/baseline decodes{source}"]
                                         for row, source in (("baseline", " (the deguchi2019/baseline runs)"),
                                                             ("rel", ""), ("dep+rel", "")))
    text = converged_said("Omote's rows")
    (runs,) = {rel["seeds"], dep_rel["seeds"]}
    assert f"**Omote's rows, {runs} seeds so far.**" in text
    block = budget_block(CONVERGED, "a run stopped after 6 validations")
    seeds = seeds_of(block, "omote2019/rel")
    assert seeds == seeds_of(block, "omote2019/dep+rel")
    assert (f"{runs} runs each of `rel` and `dep+rel` (seeds {spoken([str(seed) for seed in seeds])}) against the "
            f"baseline's {base['seeds']} runs") in text

    def scores(cells: tuple[dict[str, str], ...], baseline: dict[str, str]) -> str:
        (one, two) = (f"{mean(c['test BLEU']):.2f} ({c['Δ BLEU (95% CI)']})" for c in cells)
        return f"{one} and `dep+rel` {two} against {mean(baseline['test BLEU']):.2f}"

    assert f"`rel` scores {scores((rel, dep_rel), base)}; with beam 4, " in text
    assert f"with beam 4, {scores((beam_rel, beam_dep_rel), beam_base)}".replace(" and `dep+rel`", " and") in text
    (pair,), (beam_pair,) = pairs.values(), beam_pairs.values()
    assert pair["seeds"] == f"{runs} / {runs}"
    assert (f"+0.50 in their paper): {pair['Δ BLEU (95% CI)']} greedily (Welch p {pair['p (seeds)']}, Holm "
            f"{pair['p (Holm)']}), {beam_pair['Δ BLEU (95% CI)']} with beam 4 (Welch p {beam_pair['p (seeds)']}, "
            f"Holm {beam_pair['p (Holm)']})") in text
    holm = [float(cells["p (Holm)"]) for cells in (pair, beam_pair)]
    assert all(p >= 0.05 for p in holm) == ("not significant over seeds after Holm's correction" in text)
    for name, cells in (("`rel`", rel), ("`dep+rel`", dep_rel)):
        assert f"{name}: best at update {cells['best at update']}, converged {cells['converged']}" in text
    capped = [[end == 12000 for end in stops(cells)] for cells in (rel, dep_rel)]
    crossed = all(a != b for a, b in zip(*capped)) and capped[0] != [capped[0][0]] * len(capped[0])
    unstopped = sum(int(cells["converged"].split(" of ")[1]) - int(cells["converged"].split(" of ")[0])
                    for cells in (rel, dep_rel))
    assert f"So {unstopped} of the {2 * int(runs)} runs had not met the stopping rule at the 12,000-update cap" in text
    larger = all(float(cells["Δ BLEU (95% CI)"].split()[0]) > 0.50 for cells in (pair, beam_pair))
    assert larger == ("in the direction the paper reports, and larger" in text)
    assert crossed == ("In each seed one row stopped by the rule and the other ran to the cap, and not the same row "
                       "in both" in text)
    averaging = converged_said("Averaged weights, once the runs have settled")
    column = "BLEU, last validations averaged"
    helps = {row: mean(cells[column]) > mean(cells["test BLEU"]) for row, cells in (("rel", rel), ("dep+rel", dep_rel))}
    assert helps == {"rel": True, "dep+rel": True}
    assert (f"it holds for both: `rel` ({mean(rel[column]):.2f} against {mean(rel['test BLEU']):.2f}) and `dep+rel` "
            f"({mean(dep_rel[column]):.2f} against {mean(dep_rel['test BLEU']):.2f})") in " ".join(averaging.split())


def test_each_pooled_tables_holm_column_is_holm_over_its_captions_planned_family():
    """Holm's p of every pooled table is recomputed from its p (seeds) column over the family its
    caption states (the comparisons without runs counted as p = 1): the planned family, not only
    the rows that happen to have run."""
    blocks = [POOLED, *(budget_block(CONVERGED, f"a run stopped after {p} validations") for p in (3, 6))]
    checked = 0
    for block in blocks:
        for heading in (DEGUCHI_TABLE, OMOTE_GREEDY, OMOTE_BEAM):
            if f"\n#### {heading}\n" not in block:
                continue
            tables = pooled_tables(heading, block)
            cells = [row for table in tables for row in table.values() if row["p (seeds)"] != "–"]
            size = family(heading, block)
            expected = holm([float(row["p (seeds)"]) for row in cells], family=size)
            # from the p-values as shown (4 decimals): each off by up to 5e-5, times up to the family's size
            assert [float(row["p (Holm)"]) for row in cells] == pytest.approx(expected, abs=(size + 1) * 5e-5), heading
            checked += 1
    assert checked >= 7


def test_the_gpu_reproducibility_paragraph_quotes_the_tabled_calls_dep_rel_seeds():
    from benchmarks import gpu_results

    (call,) = [result for result in gpu_results.read_all([gpu_results.RESULTS])
               if gpu_results.device_kind(result) == "gpu" and result.get("study")]
    scores = {run["seed"]: run["tests"]["test"]["metrics"]["test_bleu"] for run in call["study"]["runs"]
              if run["row"] == "omote2019/dep+rel"}
    paragraph = next(part for part in PAGE.split("\n\n") if "The GPU runs are not bit-reproducible" in part)
    text = " ".join(paragraph.split())
    assert sorted(scores) == [1, 2, 3]
    assert (f"where the call in the table below scored {scores[1]:.2f}, {scores[2]:.2f} and {scores[3]:.2f}"
            in text)


def test_how_many_runs_a_gpu_call_holds_is_its_plan_at_the_recorded_paces():
    from types import SimpleNamespace

    from benchmarks import gpu_results, gpu_run, study

    rates = gpu_run.run_rates(gpu_results.RESULTS, "gpu")
    text = " ".join(PAGE.split("A call trains what the results files lack")[1].split("\n\n")[0].split())
    plans = {}
    for cap in (2000, 8000):
        args = SimpleNamespace(max_updates=cap, epoch_updates=250, patience=6 if cap > 2000 else None)
        shared = study.decoded_as(gpu_run.study_args(args))
        rows = [row for row in study.ROWS if row not in shared]
        trained, first, _ = gpu_run.trained_so_far(gpu_results.RESULTS, args, "gpu")
        fits = gpu_run.call_fits(rates, cap, 9 * 60 - gpu_run.MARGIN_S)
        plans[cap] = gpu_run.study_plan(gpu_run.seed_targets(rows, 3, 5), trained, first, 16, shared, fits=fits)
    assert {row for row, _ in plans[8000]} == {"deguchi2019/baseline", "deguchi2019/enc+dec"}
    assert (f"a 2,000-update call holds {len(plans[2000])} runs and an 8,000-update one {len(plans[8000])}, of "
            "Deguchi's two rows only") in text


def test_the_unseen_bullet_quotes_the_pooled_tables_unseen_column():
    text = said("Without the 60 test pairs seen in training")
    drops, same_order = [], True
    for heading in (DEGUCHI_TABLE, OMOTE_GREEDY, OMOTE_BEAM):
        rows = pooled_tables(heading)[0].values()
        drops += [mean(row["test BLEU"]) - mean(row[UNSEEN]) for row in rows]
        same_order &= sorted(rows, key=lambda row: mean(row["test BLEU"])) == sorted(rows, key=lambda row: mean(
            row[UNSEEN]))
    assert f"Every row scores {min(drops):.2f} to {max(drops):.2f} BLEU lower" in text and min(drops) > 0
    assert same_order == ("each table's rows keep their order there" in text)
    (overlap,) = set(re.findall(r"without the (\d+) test pairs whose reference is also a training target", PAGE))
    assert f"**Without the {overlap} test pairs seen in training.**" in text
    assert f"the other {500 - int(overlap)}" in text

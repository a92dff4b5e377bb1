"""Seed-level statistics (platform/tracking/significance.py): Welch's t-test over seeds with its
confidence interval, and Holm's correction over a table's rows, against values computed by hand;
and the paired sentence-level tests, seed pair by seed pair."""

import math

import pytest

from platform.tracking.significance import holm, paired_by_seed, seed_columns, seed_test, significance_table


def test_welch_over_seeds_gives_the_hand_computed_difference_interval_and_p():
    # x̄ 22.5 and 23.5, s² 0.25 each, n 3: se = √(0.25/3 + 0.25/3) = 0.4082, t = 2.449, df = 4
    # (Welch–Satterthwaite); t(0.975, 4) = 2.7764, so the CI is 1.0 ± 1.1335; two-sided p = 0.0705
    test = seed_test([22.0, 22.5, 23.0], [23.0, 23.5, 24.0])
    assert test.difference == pytest.approx(1.0)
    assert (test.low, test.high) == pytest.approx((1.0 - 1.1335, 1.0 + 1.1335), abs=1e-3)
    assert test.p_value == pytest.approx(0.0705, abs=5e-4)
    assert math.isnan(seed_test([22.0], [23.0, 24.0]).p_value)  # one seed: no variance to test
    alike = seed_test([22.0, 22.0], [23.0, 23.0])  # seeds that agree on both sides: nothing to weigh 1.0 against
    assert alike.difference == 1.0 and all(math.isnan(value) for value in (alike.low, alike.high, alike.p_value))


def test_holm_adjusts_the_family_step_down_and_keeps_it_monotone():
    # sorted 0.01, 0.03, 0.04: × 3, × 2, × 1 = 0.03, 0.06, 0.04 → monotone: 0.03, 0.06, 0.06
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])  # capped at 1
    adjusted = holm([0.02, math.nan])
    assert adjusted[0] == pytest.approx(0.02) and math.isnan(adjusted[1])  # outside the family


def test_holm_over_a_planned_family_counts_the_comparisons_not_run_yet_as_p_1_so_its_ps_only_fall():
    # a paper table of 4 comparisons, 2 run: × 4 and × 3, as if the other two had p 1
    assert holm([0.01, 0.02], family=4) == pytest.approx([0.04, 0.06])
    assert holm([0.01, 0.02], family=4) == pytest.approx(holm([0.01, 0.02, 1.0, 1.0])[:2])
    # however the missing two turn out, no adjusted p rises (the step-down's terms only shrink)
    for others in ([0.001, 0.5], [0.015, 0.9], [0.3, 0.3], [0.001, 0.002]):
        assert all(now <= before + 1e-12 for now, before in zip(holm([0.01, 0.02, *others])[:2],
                                                                holm([0.01, 0.02], family=4)))
    with pytest.raises(ValueError):
        holm([0.01, 0.02, 0.03], family=2)


def test_the_seed_columns_test_each_row_against_the_first_and_correct_over_the_table():
    cells = seed_columns([[22.0, 22.5, 23.0], [23.0, 23.5, 24.0], [22.1, 22.4, 22.9], [25.0]])
    assert cells[0] == {"BLEU": "22.50 ± 0.50", "Δ BLEU (95% CI)": "–", "p (seeds)": "–", "p (Holm)": "–"}
    assert cells[1]["Δ BLEU (95% CI)"] == "+1.00 [-0.13, +2.13]" and cells[1]["p (seeds)"] == "0.0705"
    assert float(cells[1]["p (Holm)"]) == pytest.approx(2 * 0.07048, abs=2e-4)  # the smaller of 2 tested: × 2
    assert cells[3]["p (seeds)"] == "–" and cells[3]["Δ BLEU (95% CI)"] == "+2.50"  # one seed: no interval
    assert cells[3]["BLEU"] == "25.00"  # and no spread: "± 0.00" would claim seeds that agree


def test_a_papers_other_comparison_joins_the_tables_holm_family():
    """Omote et al. compare dep+rel against rel as well as against abs: (row 2, against row 1)."""
    scores = [[22.0, 22.5, 23.0], [23.0, 23.5, 24.0], [24.0, 24.6, 25.1]]
    alone = seed_columns(scores)
    cells = seed_columns(scores, also=[(2, 1)])
    assert len(alone) == 3 and len(cells) == 4
    against = seed_test(scores[1], scores[2])
    assert cells[3]["Δ BLEU (95% CI)"] == f"{against.difference:+.2f} [{against.low:+.2f}, {against.high:+.2f}]"
    assert cells[3]["p (seeds)"] == f"{against.p_value:.4f}" and "BLEU" not in cells[3]
    family = holm([seed_test(scores[0], scores[1]).p_value, seed_test(scores[0], scores[2]).p_value, against.p_value])
    assert [float(cell["p (Holm)"]) for cell in cells[1:]] == pytest.approx(family, abs=1e-4)
    assert float(cells[1]["p (Holm)"]) > float(alone[1]["p (Holm)"])  # a family of 3, not 2
    assert cells[1]["p (seeds)"] == alone[1]["p (seeds)"]


def test_the_paired_tests_run_seed_pair_by_seed_pair_and_count_the_pairs_below_005():
    reference = [f"the cat {i} sat on the mat near the door" for i in range(40)]
    worse = [f"a dog {i} sat" for i in range(40)]
    better = [line if i % 4 else f"the cat {i} sat" for i, line in enumerate(reference)]
    # the third seed pair: three lines better, three worse (sacrebleu counts an exact tie as a difference)
    close = [reference[i] if i in (0, 4, 8) else f"the cat {i} sat on the mat" if i in (1, 2, 3) else line
             for i, line in enumerate(better)]
    pairs = [(worse, better, reference), (worse, reference, reference), (better, close, reference)]
    cells = paired_by_seed(pairs, "13a")
    assert set(cells) == {"BLEU p (bs)", "BLEU p (ar)", "chrF2 p (bs)", "chrF2 p (ar)"}
    for key, cell in cells.items():
        alone = sorted(float(significance_table([{}, {}], list(pair[:2]), pair[2], "13a")[1][key]) for pair in pairs)
        assert cell == f"{alone[1]:.4f} (2 of 3 < 0.05)", key  # the median of the three pairs, each tested alone
        assert alone[1] < 0.01 and alone[2] >= 0.05  # the close pair is the one not below 0.05

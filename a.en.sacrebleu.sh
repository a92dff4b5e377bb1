# the scores of platform.evaluate --hyp, recomputed
sacrebleu /tmp/pytest-of-root/pytest-64/test_chrf_plus_plus_and_ter_ag0/ref.en -i /tmp/pytest-of-root/pytest-64/test_chrf_plus_plus_and_ter_ag0/a.en -m bleu chrf --tokenize 13a -w 4

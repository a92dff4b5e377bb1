"""Data: CoNLL-U input (``conllu``), subwords, trees, the demo corpus, preparing a dataset
(``encode``), the prepared dataset's one I/O layer (``dataset``) and batching."""

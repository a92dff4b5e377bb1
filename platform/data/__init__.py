"""Data, from input files to the batches a step trains on (docs/architecture.md):

- ``conllu``: CoNLL-U reading and validation; ``parsing``: raw text to one tree per line (spaCy);
  ``sources``: a served model's source sentences as texts;
- ``storage``: local paths and URIs; ``dataset``: the prepared dataset's one I/O layer;
- ``subwords``: SentencePiece models; ``trees``: subword heads, depths and the binary tree;
- ``encode``: preparing a dataset (``platform.prepare``);
- ``demo``: the synthetic demo corpus; ``builtin``: the built-in demo corpora and what
  ``--data`` names;
- ``examples``: the example stores a batch is gathered from; ``mapped``: the train split
  memory-mapped from a node-local copy (what training workers read);
- ``batch``: a batch's tensors; ``batching``: the batch plan per rank; ``packing``: several
  sentences per row; ``prefetch``: updates collated ahead on a thread.
"""

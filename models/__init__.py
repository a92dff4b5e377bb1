"""Pure PyTorch models (DESIGN.md §4): imports only torch and numpy; no Ray, MLflow, pyarrow or I/O.

The architectures arrive with issues 3 (Transformer family) and 4 (recurrent and tree encoders).
"""

"""MLflow (docs/architecture.md): the store and its relay (``store``), run lifecycle and params
(``runs``), rank 0's buffered logger (``logger``), artifact upload (``artifacts``), plots,
summary tables (``tables``) and the parse-head diagnostics."""

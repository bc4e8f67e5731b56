"""Stand-in for ``transformer_engine.debug`` (TE v2.11): the debug state only."""

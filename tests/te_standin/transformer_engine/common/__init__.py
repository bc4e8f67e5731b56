"""Stand-in for ``transformer_engine.common`` (TE v2.11): only its ``recipe`` module."""

"""The pieces of bench/run.py: one module per scenario, plus process and report helpers."""

"""The intent router's evaluation: data, baselines and the runner (see README.md)."""

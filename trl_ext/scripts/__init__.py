"""Command-line entry points shared by `examples/train_<algorithm>.py`."""

"""`python -m trl_ext ...` is the `trl-ext` command (see `trl_ext.cli`)."""

from .cli import main

main()

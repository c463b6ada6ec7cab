"""``python -m mcq.cli`` (the console's jobs, tests): the same command line, named "mcq"."""

from mcq.cli import main

main(prog_name="mcq")

"""`python -m runtime` is `tern`."""

from runtime.cli import main

main()

"""`python -m annodb`: the `annodb` command line (the one module of the package that reaches
into the command-line layer, as an entry point)."""

from annodb_cli.launch import main

main()

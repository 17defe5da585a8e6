"""The ``wds`` command line: one module per subcommand."""

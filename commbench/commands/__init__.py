"""Subcommands: one module each, registered in commbench.cli.COMMANDS."""

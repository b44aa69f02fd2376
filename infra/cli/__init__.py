"""The `atlas` command's subcommands: compare, monitor and nodes read a stack's outputs through
the kinds router (infra.kinds) and reach each environment as its kind does."""

"""Errors a user can fix, shared by the config parsers of every environment."""


class AtlasConfigError(ValueError):
    """A configuration value that cannot be used; the message names the key and the fix."""

"""Errors a user can fix, shared by the config parsers of every environment and the clients that reach them."""


class AtlasConfigError(ValueError):
    """A configuration value that cannot be used; the message names the key and the fix."""


class ActionableError(Exception):
    """A failure the user fixes (log in again, start an agent, name another context): its message,
    one line (or a first line followed by its evidence, such as the end of a failed build's log),
    names what is wrong and the fix, and is all a user needs to see. The `atlas`
    commands print it alone, and the dynamic providers' host reports it without a traceback
    (infra/toolchain/dynamic_host.py)."""

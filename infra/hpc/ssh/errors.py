"""What the SSH layer raises: a base class, and one subclass per failure a caller tells apart."""

from __future__ import annotations


class SshError(Exception):
    """Base of everything this package raises; messages name the host and the fix."""


class HostKeyError(SshError):
    """The server's host key is unknown or differs from the configured known_hosts."""


class SshAuthError(SshError):
    """The key was refused, or could not be loaded."""


class SecondFactorError(SshAuthError):
    """The server took a key and then asked for more (keyboard-interactive, a password): Atlas never
    prompts; the message says how to open the master connection it can use instead."""


class SshConnectError(SshError):
    """The login node (or a jump host on the way) could not be reached."""


class MasterConnectionError(SshConnectError):
    """The OpenSSH master connection a target's ControlPath names is gone or will not serve."""


class ConnectionLostError(SshError):
    """The connection dropped while a command was in flight: it may or may not have run."""

    def __init__(self, message: str, command: str) -> None:
        super().__init__(message)
        self.command = command


class RemoteTimeoutError(SshError):
    def __init__(self, message: str, command: str) -> None:
        super().__init__(message)
        self.command = command


class RemoteOutputTooLargeError(SshError):
    """A command printed more than MAX_OUTPUT_BYTES; it was abandoned, its output discarded."""

    def __init__(self, message: str, command: str) -> None:
        super().__init__(message)
        self.command = command


class RemoteCommandError(SshError):
    """A remote command exited non-zero; carries everything needed to see why."""

    def __init__(self, command: str, exit_code: int, stdout: str, stderr: str, host: str = "") -> None:
        self.command = command
        self.exit_code = exit_code
        self.stdout = stdout
        self.stderr = stderr
        self.host = host
        where = f" on {host}" if host else ""
        detail = (stderr.strip() or stdout.strip() or "(no output)")[-2000:]
        super().__init__(f"`{command}`{where} exited with {exit_code}: {detail}")


class UploadVerificationError(SshError):
    pass

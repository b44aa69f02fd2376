"""Pulumi's Python language runtime, launched from the stack's virtual environment.

Why this exists: the engine (`pulumi`) runs a Python program through a language plugin,
`pulumi-language-python`. Upstream builds that plugin from the Go module
`github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3`, which the Go module
proxy reachable here does not serve ("This module version is not available", for every
version). Everything the plugin does at run time is already shipped by Pulumi itself:
the gRPC service definitions and servicer base class in the Python SDK
(`pulumi.runtime.proto`), and the program executor `pulumi-language-python-exec` in the
`sdk/v3` Go module. This launcher serves that interface and runs each program through
the real executor, with the same arguments and environment the Go plugin passes:

    pulumi-language-python-exec --monitor M --engine E --project P --root_directory R
        --stack S --pwd D --dry_run B --parallel N --organization O PROGRAM [ARGS...]
    PULUMI_CONFIG=<json>  PULUMI_CONFIG_SECRET_KEYS=<json list>

Plugins are not declared by the program (GetRequiredPackages answers none): the
toolchain's bin folder on PATH provides them, and the engine loads each on first use.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import types
from concurrent import futures
from importlib.util import find_spec
from threading import Event, Thread
from typing import Any


def _sdk_packages_without_their_init() -> None:
    """Make `pulumi`, `pulumi.runtime` and `pulumi.runtime.proto` importable as bare packages.

    The launcher needs only the generated gRPC modules and one constant, but importing them
    the usual way runs `pulumi/__init__.py`, which imports the whole SDK: two thirds of the
    launcher's start-up, paid twice per `pulumi up` (the engine starts the language plugin
    once to ask for plugins, once to run the program). Only in the launcher's own process:
    its program runs in a separate interpreter (the executor) with the real SDK.
    """
    spec = find_spec("pulumi")
    if spec is None or not spec.submodule_search_locations:
        return  # no SDK: the imports below fail with the usual message
    root = next(iter(spec.submodule_search_locations))
    for name, folder in (("pulumi", root), ("pulumi.runtime", f"{root}/runtime"),
                         ("pulumi.runtime.proto", f"{root}/runtime/proto")):
        package = types.ModuleType(name)
        package.__path__ = [folder]
        sys.modules[name] = package


if __name__ == "__main__" and "pulumi" not in sys.modules:
    _sdk_packages_without_their_init()

import grpc  # noqa: E402
from pulumi.runtime._grpc_settings import _GRPC_CHANNEL_OPTIONS  # noqa: E402
from pulumi.runtime.proto import language_pb2, language_pb2_grpc, plugin_pb2  # noqa: E402
from pulumi.runtime.proto.language_pb2_grpc import LanguageRuntimeServicer  # noqa: E402

from infra.toolchain.plugin_signals import interrupt_on_sigint  # noqa: E402

# The executor's own exit code for "the error was already shown to the user".
EXIT_CODE_USER_ACTIONABLE = 32


def _pulumi_sdk_version() -> str:
    from importlib.metadata import version

    return version("pulumi")


def executor_path() -> str:
    here = os.path.dirname(os.path.realpath(sys.argv[0])) if sys.argv and sys.argv[0] else ""
    candidates = [os.environ.get("ATLAS_PULUMI_EXEC", ""), shutil.which("pulumi-language-python-exec") or ""]
    if here:
        candidates.append(os.path.join(here, "pulumi-language-python-exec"))
    for candidate in candidates:
        if candidate and os.path.isfile(candidate):
            return candidate
    raise RuntimeError(
        "pulumi-language-python-exec not found on PATH: run scripts/bootstrap and `source scripts/activate`"
    )


def executor_command(request: Any, engine_address: str) -> list[str]:
    """The executor's command line for a RunRequest, as upstream's plugin builds it."""
    program = request.info.entry_point or request.program or "."
    program_dir = request.info.program_directory or request.pwd
    return [
        sys.executable,
        "-u",
        # The executor, run so that its process skips Python's teardown (program_exec.py says why).
        "-m", "infra.toolchain.program_exec",
        executor_path(),
        "--monitor", request.monitor_address,
        "--engine", engine_address,
        "--project", request.project,
        "--root_directory", request.info.root_directory or request.pwd,
        "--stack", request.stack,
        "--pwd", request.pwd,
        "--dry_run", "true" if request.dryRun else "false",
        "--parallel", str(request.parallel),
        "--organization", request.organization or "organization",
        os.path.join(program_dir, program) if not os.path.isabs(program) else program,
        *request.args,
    ]


def executor_environment(request: Any) -> dict[str, str]:
    env = dict(os.environ)
    env["PULUMI_CONFIG"] = json.dumps(dict(request.config))
    env["PULUMI_CONFIG_SECRET_KEYS"] = json.dumps(list(request.configSecretKeys))
    return env


class LanguageHost(LanguageRuntimeServicer):
    def __init__(self, engine_address: str) -> None:
        self.engine_address = engine_address

    def Handshake(self, request: Any, context: Any) -> Any:
        self.engine_address = request.engine_address or self.engine_address
        return language_pb2.LanguageHandshakeResponse()

    def GetPluginInfo(self, request: Any, context: Any) -> Any:
        return plugin_pb2.PluginInfo(version=_pulumi_sdk_version())

    def GetRequiredPlugins(self, request: Any, context: Any) -> Any:
        return language_pb2.GetRequiredPluginsResponse()

    def GetRequiredPackages(self, request: Any, context: Any) -> Any:
        return language_pb2.GetRequiredPackagesResponse()

    def About(self, request: Any, context: Any) -> Any:
        info = sys.version_info
        return language_pb2.AboutResponse(
            executable=sys.executable, version=f"{info.major}.{info.minor}.{info.micro}"
        )

    def GetProgramDependencies(self, request: Any, context: Any) -> Any:
        from importlib.metadata import distributions

        deps = sorted({(d.metadata["Name"], d.version) for d in distributions() if d.metadata["Name"]})
        return language_pb2.GetProgramDependenciesResponse(
            dependencies=[language_pb2.DependencyInfo(name=n, version=v) for n, v in deps]
        )

    def InstallDependencies(self, request: Any, context: Any) -> Any:
        # scripts/bootstrap owns the virtual environment; nothing to install here.
        yield language_pb2.InstallDependenciesResponse(
            stdout=b"dependencies are installed by scripts/bootstrap into .venv\n"
        )

    def Run(self, request: Any, context: Any) -> Any:
        cmd = executor_command(request, self.engine_address)
        # The executor's output goes where ours goes: the engine shows it to the user.
        code = subprocess.call(cmd, env=executor_environment(request), cwd=request.pwd or None)
        if code == 0:
            return language_pb2.RunResponse()
        if code == EXIT_CODE_USER_ACTIONABLE:
            return language_pb2.RunResponse(bail=True)
        return language_pb2.RunResponse(error=f"Program exited with non-zero exit code: {code}")


def main(argv: list[str]) -> int:
    interrupt_on_sigint()  # the engine stops this plugin with SIGINT
    # Flags (-root, -tracing, ...) come first; the engine's address is the last argument.
    positional = [a for a in argv if not a.startswith("-")]
    engine_address = positional[-1] if positional else ""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=_GRPC_CHANNEL_OPTIONS)
    language_pb2_grpc.add_LanguageRuntimeServicer_to_server(LanguageHost(engine_address), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    stop = Event()
    Thread(target=_exit_with_parent, args=(os.getppid(), stop), daemon=True).start()
    # Ready before the port is announced: the engine's SIGINT may follow at once.
    with contextlib.suppress(KeyboardInterrupt):
        sys.stdout.write(f"{port}\n")
        sys.stdout.flush()
        stop.wait()
    server.stop(0)
    return 0


def _exit_with_parent(parent: int, stop: Event, interval_s: float = 1.0) -> None:
    """Stop serving when the engine is gone (killed with SIGKILL, it cannot stop us)."""
    while not stop.wait(interval_s):
        if os.getppid() != parent:
            stop.set()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

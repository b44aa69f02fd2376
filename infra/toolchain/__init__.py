"""The toolchain Atlas builds itself (Pulumi, its plugins, the local cluster's binaries) and the
Pulumi plugin processes it runs from the stack's virtual environment.

- `pins.py`: the pins of toolchain/pins.toml, read into one typed object (standard library only).
- `bootstrap.py`: builds every tool from Go modules and PyPI into a versioned cache and links its `bin/`.
- `tools.py`: the tools, each a `BuildStep` with a fetch and a compile stage (standard library only).
- `go.py`: the one runner of the build's commands, and Go's environment, modules, `go get`, `go build`.
- `venv.py`: the stack's virtual environment, installed with the pins of constraints.txt.
- `store.py`: a build step and where the versioned cache keeps its build and `bin/` (standard library only).
- `recipes.py`: the go.mod files, launcher shims and provider main that bootstrap writes (pure).
- `language_host.py`: Pulumi's Python language runtime, launched from the stack's virtual environment.
- `program_exec.py`: runs Pulumi's program executor and leaves without the interpreter's teardown.
- `dynamic_host.py`: Pulumi's dynamic-provider host, with a worker thread for every wait.
- `plugin_signals.py`: both plugin hosts stop on the engine's SIGINT, even where it was ignored at launch.
"""

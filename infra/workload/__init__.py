"""Workload definitions (`workloads/<name>/workload.yaml`): one definition, run the same everywhere.

Each kind of knowledge has its own module; import from the module itself:

- `model`: the typed, frozen definition (`Workload`, `Step`, `Resources`, ...) and `WorkloadError`;
- `parse`: validation of the YAML into the model, every error naming its key path and fix;
- `load`: `load_workload(path)`, the only file I/O;
- `options`: the one reader of a command line's options (`--x=y`, `--x y`, flags, repeats);
- `render`: a step as one environment runs it (Job args, job-script line, sampler wrapper);
- `differences`: how two environments run the steps differently, for the comparison report.
- `argparse_flags`: the options a workload script's argparse parser defines, read from its source.

The source the definition pins is materialised by `infra/workload_source.py`, which stays a
standalone stdlib module because the container build copies it on its own.
"""

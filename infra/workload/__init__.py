"""Workload definitions (`workload.yaml`, under workloads/ or anywhere): one definition, run the same everywhere.

Each kind of knowledge has its own module; import from the module itself:

- `model`: the typed, frozen definition (`Workload`, `Step`, `Resources`, ...) and `WorkloadError`;
- `parse`: validation of the YAML into the model, every error naming its key path and fix (its
  sections read by `parse_sections`, single values by `parse_values`);
- `load`: the only file I/O: `locate_workload` (what `atlas:workload` names), `load_workload(path)`,
  `folder_files` (a folder source's files, within their limits);
- `options`: the one reader of a command line's options (`--x=y`, `--x y`, flags, repeats);
- `render`: a step as one environment runs it (Job args, job-script line, sampler wrapper);
- `differences`: how two environments run the steps differently, for the comparison report;
- `sweep`: a swept step's points in a stable order, their args, env and table, the split at a
  site's array limit (its `sweep:` section read by `parse_sweep`);
- `argparse_flags`: the options a workload script's argparse parser defines, read from its source.

The source the definition pins is materialised by `infra/workload_source.py`, which stays a
standalone stdlib module because the container build copies it on its own; `infra/workload_check.py`
(`scripts/workload check`) shows a definition as each side would run it. docs/workloads.md is the guide.
"""

"""The workload definition: validation (every error names the key and the fix), rendering, overrides."""

from __future__ import annotations

import copy
import dataclasses
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.workload.differences import step_differences
from infra.workload.load import load_workload
from infra.workload.model import WorkloadError
from infra.workload.parse import parse_workload, parse_workload_text
from infra.workload.render import hpc_command_line, kubernetes_args, render_step, render_steps, with_sampler

REPO = Path(__file__).resolve().parents[2]
BIGGAN = REPO / "workloads" / "biggan" / "workload.yaml"
PROBE = REPO / "workloads" / "probe" / "workload.yaml"


def minimal() -> dict[str, Any]:
    return {
        "version": 1,
        "name": "demo",
        "source": {"path": "workloads/probe"},
        "build": {"containerfile": "workloads/probe/Containerfile", "entrypoint": "infra/telemetry/entrypoint.sh"},
        "data": {"outputs": [{"name": "packed", "path": "data/packed.hdf5"}]},
        "steps": [
            {
                "name": "pack",
                "command": ["python", "pack.py"],
                "args": ["--batch_size", 64, "--shuffle", "--out", "data/packed.hdf5"],
                "outputs": ["packed"],
                "resources": {
                    "nodes": 1,
                    "gpus_per_node": 0,
                    "cpus_per_task": 2,
                    "memory": "1Gi",
                    "walltime": "00:10:00",
                },
            },
            {
                "name": "train",
                "command": ["python", "train.py"],
                "args": ["--batch_size", 64, "--lr", "1e-4"],
                "inputs": ["packed"],
                "resources": {
                    "nodes": 1,
                    "gpus_per_node": 2,
                    "cpus_per_task": 8,
                    "memory": "16Gi",
                    "walltime": "1-02:00:00",
                },
            },
        ],
        "logs": {"root": "logs", "experiment": "demo"},
        "telemetry": {"root": "telemetry", "interval_seconds": 5},
    }


def with_change(path: str, value: Any) -> dict[str, Any]:
    """A copy of `minimal()` with one value set (dotted path; digits index lists); DELETE removes it."""
    raw = copy.deepcopy(minimal())
    *parents, last = path.split(".")
    node: Any = raw
    for part in parents:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    key: Any = int(last) if last.isdigit() else last
    if value is DELETE:
        del node[key]
    else:
        node[key] = value
    return raw


DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "key", "fix"),
    [
        ("surprise", 1, "(top level)", "remove them or use one of"),
        ("version", 2, "version", "write `version: 1`"),
        ("name", "Demo_1", "name", "lower-case letters, digits and '-'"),
        ("steps.0.name", "pack;rm", "steps[0].name", "lower-case letters"),
        ("steps.1.name", "pack", "steps[1].name", "give each step its own name"),
        ("steps.0.resources.memory", "64G", "steps[0].resources.memory", "binary unit"),
        ("steps.0.resources.memory", "lots", "steps[0].resources.memory", "write it like 64Gi"),
        ("steps.0.resources.walltime", 43200, "steps[0].resources.walltime", 'quote it: walltime: "12:00:00"'),
        ("steps.0.resources.walltime", "ten minutes", "steps[0].resources.walltime", '"HH:MM:SS"'),
        ("steps.0.resources.nodes", 0, "steps[0].resources.nodes", "use a number >= 1"),
        ("steps.0.resources.gpus_per_node", True, "steps[0].resources.gpus_per_node", "write a number"),
        ("steps.0.resources.cpus", 4, "steps[0].resources", "remove them or use one of"),
        ("steps.0.resources.walltime", DELETE, "steps[0].resources.walltime", "add `walltime:`"),
        ("steps.0.command", "python pack.py", "steps[0].command", "one token per item"),
        ("steps.0.args.1", 1.5e-4, "steps[0].args[1]", "quote it as written"),
        ("steps.0.args.1", True, "steps[0].args[1]", "quote it"),
        ("steps.0.args.1", "$HOME/x", "steps[0].args[1]", "write the value out"),
        ("steps.0.env", {"9X": "1"}, "steps[0].env.9X", "use letters, digits and '_'"),
        ("steps.1.resume_args", ["--resume", "--save_every\n200"], "steps[1].resume_args[1]", "keep it on one line"),
        ("steps.1.resume_args", "--resume", "steps[1].resume_args", "one token per item"),
        ("steps.1.resume_args", ["--resume", True], "steps[1].resume_args[1]", "quote it"),
        ("steps.1.resume_args", ["--weights_root", "$HOME"], "steps[1].resume_args[1]", "write the value out"),
        ("steps.1.inputs", ["missing"], "steps[1].inputs[0]", "declare it under data.inputs"),
        ("data.outputs.0.path", "../outside", "data.outputs[0].path", "stays inside its root"),
        ("data.outputs.0.path", "/abs/path", "data.outputs[0].path", "write it relative"),
        ("data.outputs.0.path", "data/$x", "data.outputs[0].path", "use letters, digits"),
        ("build.containerfile", "../Containerfile", "build.containerfile", "stays inside its root"),
        ("source", {"repository": "https://github.com/a/b", "branch": "main", "commit": "abc"}, "source.commit",
         "all 40 lower-case hex digits"),
        ("source", {"repository": "ftp://x", "branch": "main", "commit": "a" * 40}, "source.repository",
         "https://host/owner/name"),
        ("telemetry.interval_seconds", 0, "telemetry.interval_seconds", "from 0.1 to 3600"),
        ("overrides", {"openshift": {"nope": {"reason": "x"}}}, "overrides.openshift.nope", "use one of pack, train"),
        ("overrides", {"openshift": {"train": {"args": {"set": {"--gpu": 0}}}}}, "overrides.openshift.train.reason",
         "add `reason:`"),
        ("overrides", {"openshift": {"train": {"reason": "r", "args": {"remove": ["--absent"]}}}},
         "overrides.openshift.train.args.remove[0]", "remove only options the step has"),
        ("overrides", {"Open_Shift": {}}, "overrides.Open_Shift", "lower-case letters"),
    ],
)  # fmt: skip
def test_every_error_names_the_key_and_the_fix(path: str, value: Any, key: str, fix: str) -> None:
    with pytest.raises(WorkloadError) as error:
        parse_workload(with_change(path, value))
    message = str(error.value)
    assert message.startswith(f"{key}:"), message
    assert fix in message, message


def test_inputs_must_come_from_an_earlier_step() -> None:
    raw = minimal()
    raw["steps"].reverse()
    with pytest.raises(WorkloadError, match=r"^steps\[0\]\.inputs\[0\]: 'packed' is produced by no earlier step"):
        parse_workload(raw)


def test_duplicate_yaml_keys_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "workload.yaml"
    path.write_text("version: 1\nname: a\nname: b\n")
    with pytest.raises(WorkloadError, match="key 'name' appears twice"):
        load_workload(path)


def test_resources_units() -> None:
    workload = parse_workload(minimal())
    train = workload.step("train").resources
    assert train.memory_bytes == 16 << 30
    assert train.memory_mib == 16384
    assert train.walltime_seconds == 26 * 3600
    assert train.walltime == "1-02:00:00"
    assert train.walltime_lsf == "26:00"
    assert train.total_gpus == 2
    assert workload.depends_on("train") == ("pack",)


def test_every_environment_renders_the_same_arguments_without_overrides() -> None:
    workload = parse_workload(minimal())
    for step in workload.steps:
        renders = [render_step(workload, step.name, env) for env in ("openshift", "satori", "slurm", "local")]
        assert len({r.argv for r in renders}) == 1
        assert all(r.override_reason is None for r in renders)
        # Kubernetes list form and the HPC line carry the same tokens.
        assert shlex.split(hpc_command_line(renders[0])) == kubernetes_args(renders[0])
    assert step_differences(workload, "openshift", "satori") == ()


def test_hpc_line_quotes_what_the_shell_would_otherwise_interpret() -> None:
    raw = with_change("steps.0.args", ["--name", "a b;c", "--glob", "*.hdf5", "--quote", "it's"])
    rendered = render_step(parse_workload(raw), "pack", "satori")
    line = hpc_command_line(rendered)
    assert shlex.split(line) == list(rendered.argv)
    assert "'a b;c'" in line and "'*.hdf5'" in line


def test_overrides_apply_to_one_environment_and_are_listed_as_differences() -> None:
    raw = minimal()
    raw["overrides"] = {
        "openshift": {
            "train": {
                "reason": "one GPU per pod on the first port",
                "args": {"set": {"--batch_size": 1, "--gpu": 0, "--fast": True}, "remove": ["--lr"]},
                "resources": {"gpus_per_node": 1, "memory": "8Gi"},
                "env": {"NCCL_DEBUG": "INFO"},
            }
        }
    }
    workload = parse_workload(raw)
    openshift = render_step(workload, "train", "openshift")
    satori = render_step(workload, "train", "satori")
    assert satori.argv == ("python", "train.py", "--batch_size", "64", "--lr", "1e-4")
    assert openshift.argv == ("python", "train.py", "--batch_size", "1", "--gpu", "0", "--fast")
    assert openshift.resources.gpus_per_node == 1
    assert openshift.resources.memory_bytes == 8 << 30
    assert openshift.override_reason == "one GPU per pod on the first port"
    differences = {
        (d.step, d.kind, d.key): (d.value_a, d.value_b) for d in step_differences(workload, "openshift", "satori")
    }
    assert differences == {
        ("train", "arg", "--batch_size"): ("1", "64"),
        ("train", "arg", "--gpu"): ("0", None),
        ("train", "arg", "--fast"): ("(flag)", None),
        ("train", "arg", "--lr"): (None, "1e-4"),
        ("train", "resources", "gpus_per_node"): ("1", "2"),
        ("train", "resources", "memory_bytes"): (str(8 << 30), str(16 << 30)),
        ("train", "env", "NCCL_DEBUG"): ("INFO", None),
    }
    assert all("one GPU per pod" in d.reason for d in step_differences(workload, "openshift", "satori"))
    # The other step is untouched.
    assert render_step(workload, "pack", "openshift").argv == render_step(workload, "pack", "satori").argv


def test_overrides_read_options_written_with_an_equals_sign() -> None:
    # The step writes `--x=y`, the override names `--x`: one option either way (infra/workload/options.py).
    raw = with_change("steps.1.args", ["--batch_size=64", "--lr=1e-4", "--batch_size=32", "--seed", "-1"])
    raw["overrides"] = {
        "openshift": {"train": {"reason": "smaller", "args": {"set": {"--batch_size": 8}, "remove": ["--lr"]}}}
    }
    workload = parse_workload(raw)
    # A set option takes the place of its first occurrence (in the override's spelling); repeats go.
    rendered = render_step(workload, "train", "openshift")
    assert rendered.argv == ("python", "train.py", "--batch_size", "8", "--seed", "-1")
    differences = {(d.key, d.value_a, d.value_b) for d in step_differences(workload, "openshift", "satori")}
    assert differences == {("--batch_size", "8", "64 32"), ("--lr", None, "1e-4")}


def test_yaml_text_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "workload.yaml"
    path.write_text("version: [1\n")
    with pytest.raises(WorkloadError, match=rf"^{tmp_path}/workload.yaml: not valid YAML: "):
        load_workload(path)
    with pytest.raises(WorkloadError, match=r"^not valid YAML: "):
        parse_workload_text("version: [1\n")
    loaded = load_workload(BIGGAN)
    # The same definition, and where it was read (a folder source is relative to it).
    assert dataclasses.replace(loaded, definition_dir=None) == parse_workload_text(BIGGAN.read_text())
    assert loaded.definition_dir == str(BIGGAN.parent)


def test_with_sampler_wraps_the_argv() -> None:
    rendered = render_step(parse_workload(minimal()), "train", "local")
    wrapped = with_sampler(rendered.argv, "telemetry/train.jsonl", 5.0)
    assert wrapped[:8] == (
        "python3",
        "-m",
        "infra.telemetry.sampler",
        "--out",
        "telemetry/train.jsonl",
        "--interval",
        "5",
        "--",
    )
    assert wrapped[8:] == rendered.argv


@pytest.mark.parametrize("path", [BIGGAN, PROBE])
def test_shipped_definitions_load(path: Path) -> None:
    workload = load_workload(path)
    assert [s.name for s in workload.steps] == ["make-hdf5", "inception-moments", "train"]
    assert (REPO / workload.build.containerfile).is_file()
    assert (REPO / workload.build.entrypoint).is_file()
    for step in render_steps(workload, "openshift"):
        assert step.resources.walltime_seconds > 0


def test_biggan_train_is_the_seeds_two_gpu_configuration() -> None:
    workload = load_workload(BIGGAN)
    train = render_step(workload, "train", "openshift")
    args = train.argv
    for option, value in [("--batch_size", "128"), ("--num_G_accumulations", "4"), ("--num_D_accumulations", "4"),
                          ("--num_D_steps", "1"), ("--G_lr", "1e-4"), ("--D_lr", "4e-4"), ("--test_every", "200"),
                          ("--save_every", "100")]:  # fmt: skip
        assert args[args.index(option) + 1] == value
    assert train.resources.gpus_per_node == 2
    assert workload.source.commit == "8a6984cfabd1792cd186598372ae6fa6b499ea37"  # type: ignore[union-attr]
    # Satori's environment variables are an override, so they show as differences.
    keys = {d.key for d in step_differences(workload, "openshift", "satori")}
    assert keys == {"NCCL_SOCKET_IFNAME", "PAMI_IBV_ADAPTER_AFFINITY"}


def test_resume_args_are_kept_apart_from_the_rendered_step() -> None:
    workload = parse_workload(with_change("steps.1.resume_args", ["--resume", "--save_every", 200]))
    assert workload.step("train").resume_args == ("--resume", "--save_every", "200")
    assert workload.step("pack").resume_args == ()
    # Only backfill appends them (infra/nodes/backfill.py); every environment's pipeline runs without.
    assert "--resume" not in render_step(workload, "train", "openshift").argv
    assert step_differences(workload, "openshift", "satori") == ()
    assert load_workload(PROBE).step("train").resume_args[0] == "--resume"
    assert load_workload(BIGGAN).step("train").resume_args == ()


def test_yaml_reading_of_unquoted_values_is_caught() -> None:
    # What PyYAML makes of values people write without quotes.
    raw = yaml.safe_load("walltime: 12:00:00\nflag: yes\nlr: 1.0e-4\n")
    assert raw == {"walltime": 43200, "flag": True, "lr": 0.0001}

"""A sweep's report through `pulumi up` and `scripts/compare`, end to end on the local Satori: LSF
(the command set) and Slurm side by side.

The probe's sweep (workloads/probe/sweep.yaml) cut to two short points (G_lr 2e-4 and 4e-4), run
by one `pulumi up` of the local stack's HPC sides, then compared as `scripts/compare` does. Checked
against records the collector never reads: slurmctld's job-completion log (jobcomp/filetxt, one
line per element with its ArrayJobId and ArrayTaskId; the LSF stand-in's jobs are Slurm's) for
every element's times, and each point's own log, read over SSH, for the best point.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from infra.cli import compare as cli
from infra.compare.access import Access
from infra.compare.records import Missing
from infra.hpc.registry import scheduler_for
from infra.kinds import collect_environments, read_stack_outputs
from localenv import satori
from localenv.layout import Layout
from tests import references
from tests.e2e.pulumi_cli import PulumiProject, local_hpc_sections, run_bare
from tests.e2e.pulumi_cli import satori_ssh as ssh
from tests.e2e.test_sweep_stack import step_of, wait_for_sweeps

pytestmark = pytest.mark.e2e
STACK = "local"
HPC = ("satori", "satori-slurm")
WORKLOAD = "workloads/probe/sweep-report-e2e.yaml"
FID = re.compile(r"FID-like\) is ([0-9.]+)")


def two_point_sweep(project: Path) -> None:
    """The probe's sweep as two short points over G_lr alone."""
    doc = yaml.safe_load((project / "workloads" / "probe" / "sweep.yaml").read_text())
    train = next(s for s in doc["steps"] if s["name"] == "train")
    args = [str(a) for a in train["args"]]
    for option, value in (("--total_iters", "20"), ("--test_every", "10"), ("--log_every", "10")):
        args[args.index(option) + 1] = value
    train["args"] = args
    train["sweep"] = {
        "grid": {"G_lr": ["2e-4", "4e-4"]},
        "results": "results/train",
        "args": ["--G_lr", "{G_lr}", "--logs_root", "{dir}", "--weights_root", "{dir}"],
        "metric": train["sweep"]["metric"],
    }
    (project / WORKLOAD).write_text(yaml.safe_dump(doc, sort_keys=False))


@pytest.fixture
def deployed(tmp_path: Path, satori_env: Layout) -> Iterator[PulumiProject]:
    proj = PulumiProject.create(tmp_path)
    remote = f"atlas-sweep-report-{uuid.uuid4().hex[:6]}"
    two_point_sweep(proj.root)
    config = proj.stack_config(STACK)
    config.pop("atlas:openshift", None)
    config["atlas:workload"] = WORKLOAD
    local_hpc_sections(config, satori_env, HPC, remote)
    run_bare(config, HPC)  # no OpenShift side: the steps run on the login node's software
    proj.set_stack_config(STACK, config)
    proj.run("stack", "init", STACK)
    yield proj
    proj.run("destroy", "--yes", "-s", STACK, check=False)
    proj.run("stack", "rm", "--yes", "-s", STACK, check=False)
    ssh(satori_env, f"rm -rf ~/{remote}")


def test_the_report_shows_each_sides_sweep_per_element_as_the_schedulers_recorded_it(
    deployed: PulumiProject, satori_env: Layout, tmp_path: Path
) -> None:
    proj = deployed
    proj.run("up", "--yes", "--skip-preview", "-s", STACK)
    wait_for_sweeps(satori_env, proj.outputs(STACK), "each side's sweep to end")
    proj.run("refresh", "--yes", "--skip-preview", "-s", STACK)
    raw = proj.outputs(STACK)
    outputs = read_stack_outputs(raw)
    info = satori.status(satori_env)["ssh"]
    access = Access(
        ssh_keys={n: Path(info["key_file"]) for n in HPC},
        known_hosts={n: Path(info["known_hosts_file"]) for n in HPC},
    )

    # The records, as the report reads them, against slurmctld's own log of each element.
    slurm = satori.status(satori_env)
    environ = Path(f"/proc/{slurm['daemons']['slurmctld']['pid']}/environ").read_bytes()
    zone = references.process_zone(references.parse_environ(environ))
    log = Path(slurm["slurm"]["jobcomp_log"]).read_text()
    by_element = {
        (r.array_job_id, r.array_task_id): r
        for r in (references.parse_jobcomp_line(line, zone) for line in log.splitlines() if line.strip())
        if r.array_job_id is not None
    }
    records = {r.name: r for r in collect_environments(outputs, access, tmp_path / "raw")}
    best: dict[str, int] = {}
    for side in HPC:
        (sweep,) = records[side].sweeps
        assert [e.phase for e in sweep.elements] == ["succeeded", "succeeded"], (side, sweep.elements)
        base = scheduler_for(raw["environments"][side]["scheduler"]).array_index_base
        fids = []
        for element in sweep.elements:
            # The LSF stand-in's array element i is Slurm's task i (both count LSF's way there).
            completion = by_element[(int(element.array), element.index)]
            assert completion.state == "COMPLETED", completion
            assert (element.requested_at, element.started_at, element.finished_at) == (
                completion.submitted_at,
                completion.started_at,
                completion.ended_at,
            ), (side, element, completion)
            run_dir = raw["environments"][side]["run_dir"]
            text = ssh(satori_env, f"cat {run_dir}/logs/train.{element.array}_{element.index}")
            fids.append(float(FID.findall(text)[-1]))
            assert element.index - base == element.point
        assert isinstance(sweep.metric, tuple)
        assert [r.value for r in sweep.metric] == fids, (side, sweep.metric)
        best[side] = min(range(len(fids)), key=lambda i: (fids[i], i))
        # The swept step's own record spans its sweep.
        steps = records[side].steps
        assert not isinstance(steps, Missing)
        train = next(s for s in steps if s.step == "train")
        assert train.finished_at == max(e.finished_at or 0.0 for e in sweep.elements)
        assert step_of(raw, side, "train")["sweep"]["points"] == 2

    # The report: one section for the sweep, both sides side by side.
    report, written = cli.compare(outputs, tmp_path / "report", access)
    for side in HPC:
        (figures,) = next(e for e in report.environments if e.name == side).sweeps
        assert figures.states == (("succeeded", 2),)
        assert figures.best_point.value == best[side] and figures.best_values == f"G_lr={['2e-4', '4e-4'][best[side]]}"
        assert figures.makespan.value is not None and figures.makespan.value > 0
        assert figures.run_time_median.value is not None and figures.queue_wait_p95.value is not None
    markdown = written.markdown.read_text()
    section = markdown[markdown.index("## Sweep: train") :]
    header = section.splitlines()[2]
    assert "satori (LSF" in header and "satori-slurm (Slurm" in header, header
    assert "| elements by state | succeeded 2 | succeeded 2 |" in section
    assert '"sweeps": [' in written.json.read_text()

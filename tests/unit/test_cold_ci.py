"""bench/cold_ci reads apt's own history for what a cold run installed: only the blocks inside the
run's window count, packages asked for apart from those apt pulled in as dependencies."""

from __future__ import annotations

from bench.cold_ci import apt_installs

HISTORY = """
Start-Date: 2026-12-04  17:00:00
Commandline: apt-get install -y tmux
Install: tmux:amd64 (3.3a-3)
End-Date: 2026-12-04  17:00:05

Start-Date: 2026-12-04  17:45:10
Commandline: apt-get -o DPkg::Lock::Timeout=600 -y -q install chromium
Install: libnss3:amd64 (2:3.87.1-1, automatic), chromium:amd64 (120.0-1), chromium-common:amd64 (120.0-1, automatic)
End-Date: 2026-12-04  17:46:02

Start-Date: 2026-12-04  17:50:00
Commandline: apt-get install -y slurmctld slurmd
Upgrade: libc6:amd64 (2.36-9, 2.36-9+deb12u1)
Install: slurmd:amd64 (22.05.8-4), slurmctld:amd64 (22.05.8-4), slurm-client:amd64 (22.05.8-4, automatic)
End-Date: 2026-12-04  17:50:40

Start-Date: 2026-12-04  19:00:00
Commandline: apt-get install -y vim
Install: vim:amd64 (2:9.0.1378-2)
End-Date: 2026-12-04  19:00:03
"""


def test_only_the_runs_own_installs_count_and_dependencies_are_told_apart() -> None:
    got = apt_installs(HISTORY, "2026-12-04T17:29:53Z", "2026-12-04T18:20:00+00:00")
    assert got == {"asked_for": ["chromium", "slurmctld", "slurmd"], "packages_with_dependencies": 6}


def test_a_run_that_installed_nothing_says_so() -> None:
    assert apt_installs(HISTORY, "2026-12-04T20:00:00Z", "2026-12-04T21:00:00Z") == {
        "asked_for": [], "packages_with_dependencies": 0}

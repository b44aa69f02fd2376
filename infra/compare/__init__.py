"""Compare the same workload across environments: collect each environment's own records,
compute metrics into dataclasses, then render (Markdown, HTML, PNG, JSON, terminal).

    collect_*  (kube.py, hpc.py, seed_import.py)  ->  records.py dataclasses
    metrics.py                                     ->  Report dataclass (every number a `Value`)
    charts.py, render.py                           ->  files; nothing is computed there

Entry points: `infra.compare.cli.main` (scripts/compare) and `infra.compare.report.write_report`.
"""

"""Compare the same workload across environments: collect each environment's own records,
compute metrics into dataclasses, then render (Markdown, HTML, PNG, JSON, terminal).

    records.py                          the raw records (dataclasses; a step's is infra/job_records.py)
    kube_records.py                     pure: the Kubernetes API's output -> records (a batch
                                        scheduler's are read by its class in infra/hpc)
    training.py, sampler_decode.py, device_records.py
                                        pure: logs, sampler lines, a device run's files
    contract.py                         pure: what the workload asks measured (atlas.report), its rate line
    remote_files.py                     where a run's files are read: SFTP, the monitor, a local folder
    run_files.py                        what is fetched from them into raw/: telemetry, logs, staging
    telemetry.py                        the sampler's files read in chunks (or byte ranges) into columns
    hpc_collector.py, kube_collector.py, aws_collector.py
                                        collect one environment: run its queries (an HPC side's
                                        through its scheduler's class), fetch its files
                                        (infra.kinds calls the one its kind needs)
    seed_import.py, device_run.py       read a past run from a folder instead
    collect.py                          imported past runs; which steps are unfinished
    access.py                           how each environment is reached (its parsed target, the flags over it)
    costs.py, cost_files.py             the cost model and its defaults; override, rate and estimate files
    report_model.py                     the Report dataclasses (every number a `Value`)
    metrics.py, estimates.py            records -> Report
    step_metrics.py, performance.py, economics.py, data_access.py, scalability.py, comparability.py,
    runtimes.py                         one dimension of the Report each (metrics.py assembles it;
                                        runtimes.py: what ran where, each SIF conversion)
    charts.py, render.py, report.py     Report -> files; nothing is computed there

Entry points: `atlas compare` (infra/cli/compare.py: flags -> collect, compute, write, print) and
`infra.compare.report.write_report`.
"""

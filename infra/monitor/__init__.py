"""A live view of a stack's runs in every environment: compute a snapshot, then render it.

    kube.py   the Kubernetes side: one list, then watches (nodes, pods, the run's Jobs)
    hpc_reads.py  pure: what one HPC poll asks each scheduler, and the parsers of its answers
    hpc.py    an HPC side over SSH: one batched status query and one node/telemetry query
              per environment, never more often than the poll interval
    model.py  what a poll read and the snapshot, as dataclasses
    build.py  stack outputs + sources -> Snapshot
    render.py terminal (rich), JSON and HTML from the same Snapshot; nothing is computed there
    serve.py  the web page and its JSON endpoint (stdlib http.server, loopback by default)
    cli.py    scripts/monitor

Nothing here changes an environment: every call is a read.
"""

"""A live view of a stack's runs in every environment: compute a snapshot, then render it.

    sources.py    what every environment's source gives: a view of it now (whatever its kind)
    kube.py       the Kubernetes API: one list, then watches (nodes, pods, the run's Jobs)
    kube_view.py  the Kubernetes side's view, from the watch cache
    kube_live.py  a running step's telemetry and the training log on Kubernetes, read through the
                  run's monitor (the API server's service proxy), never more often than the interval
    placement.py  pure: which nodes a pod may run on (node selector, affinity, taints), for the estimate
    reasons.py    pure: why each live cell (it/s, CPU, memory, GPU use) is empty, in one set of words
    hpc_reads.py  pure: the poll's sections script and the readers of the steps' own files (the
                  nodes' and the queue's commands and parsers are each scheduler's, in infra/hpc)
    hpc.py        an HPC side over SSH: one batched status query and one node/telemetry query
                  per environment, never more often than the poll interval
    hpc_view.py   an HPC side's view, from its last poll
    aws_view.py   AWS instances that ran nothing, from the outputs (where they ran: hpc_view.py)
    estimate.py   pure: how long a job of the workload's shape would wait now
    model.py      what a poll read and the snapshot, as dataclasses
    build.py      sources -> Snapshot
    render.py     terminal (rich), JSON and HTML from the same Snapshot; nothing is computed there
    serve.py      the web page and its JSON endpoint (stdlib http.server, loopback by default)

The sources are made by infra.kinds, one per environment; `atlas monitor` is infra/cli/monitor.py.

Nothing here changes an environment: every call is a read.
"""

"""Under-used GPU capacity in every environment, queue-wait estimates, and backfill that yields.

idle.py       judge each GPU node from the monitor's snapshot (use, not only requests)
backfill.py   fill free GPUs with low-priority work: a PriorityClass that real jobs preempt
              (Kubernetes), a preemptible partition whose jobs are requeued (Slurm); LSF is
              declined, saying why (its preemptible queues are the site's, unseen from outside)
backfill_apply.py  apply and stop that backfill (the Kubernetes API; a login node, through the
              scheduler's own commands)
settings.py   atlas:backfill parsed into BackfillSettings
render.py     scripts/nodes' tables and the estimate file's record
component.py  the same backfill as a Pulumi component (`atlas:nodes:Backfill`)

The wait estimate is the monitor's (infra/monitor/estimate.py); `atlas nodes` is infra/cli/nodes.py,
and each kind's backfill is started through infra.kinds.
"""

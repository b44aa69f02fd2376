"""The local environment: a real Kubernetes control plane, HPC login node and AWS stand-in on loopback.

`scripts/localenv up|down|status` (cli.py) runs each part as plain background processes from
the toolchain's binaries, under one state folder and one block of loopback ports (layout.py).

A top-level package of the repository, not of the installed distribution (pyproject.toml packages
`infra` alone): the tests, the benches and `scripts/localenv` import it from the checkout. It
imports `infra`; nothing under `infra/` imports it (tests/unit/test_localenv_boundary.py).

Modules, from the bottom up:

    layout.py    the state folder and the loopback ports, one object everything agrees on
    procs.py     background processes with pid files; LocalEnvError, port and readiness waits
    system.py    the Debian packages the parts run on, installed when missing
    pki_files.py  where the certificates live, the client identities, the kubeconfigs (pure)
    pki.py       the CA and certificates; `admin_api`, the admin's API client
                 (infra/kubeapi.py, the project's one Kubernetes HTTPS client)
    crds.py      OpenShift's kinds as CRDs for a plain API server (pure)
    kwok.py      KWOK's Stages, simulated GPU and CPU nodes, the hostPath volume pool (pure)
    recycler.py  the `pv-recycler` daemon: Released pool volumes made Available again
    kube.py      etcd, kube-apiserver, controller manager, scheduler and KWOK; `api_get`
    images.py    the loopback image registry and the images built here
    mockgpu.py   a kubelet device plugin advertising mock `nvidia.com/gpu`
    node_config.py  the node's containerd, CNI, kubelet and kube-proxy configs (pure)
    netpol.py    kube-router's network-policy controller: NetworkPolicy enforced on the node
    node.py      the one real node: kubelet over containerd, CNI, kube-proxy, kube-router, mock GPUs
    build_objects.py  the Build, its output and ImageStream tag events it writes (pure)
    builds.py    the BuildConfig runner standing in for OpenShift's build controller
    satori_config.py  the login node's sshd_config, slurm.conf and gres.conf (pure)
    satori.py    the HPC login node: OpenSSH, Slurm with GPUs, and the LSF commands of lsf/
    site_config.py  the local site's sshd configs, PAM stack and user ssh config (pure)
    site.py      the local site: the Satori behind a bastion, the key in an agent, a second factor
    moto.py      the AWS API stand-in (moto server)
    cli.py       scripts/localenv

Imports only go down this list (kube.py uses recycler.py, never the other way), and every
request to the API server goes through infra/kubeapi.py.
"""

"""Plumbing shared by Atlas's Pulumi dynamic providers (infra/hpc/providers/, infra/aws/providers/).

- `inputs.py`: reading a provider call's props: values not known during preview, which inputs
  changed, check failures, and typed numbers with their defaults (pure);
- `version.py`: the `provider_version` input, a digest of the providers' own source (reads files);
- `registration.py`: what every dynamic resource registers with: secret outputs, empty outputs.

Providers hold no live objects: dill pickles each provider instance into state *by reference*
(module and class name), so a provider class must stay importable under the name it was first
registered with; a moved class leaves a re-export behind (see infra/aws/providers/__init__.py and
infra/hpc/providers/__init__.py).
"""

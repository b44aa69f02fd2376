"""The OpenShift (or plain Kubernetes) side of a stack, as Pulumi components."""

"""infra/kubeconfig.py: the cluster and user entries a kubeconfig's context names."""

from __future__ import annotations

import pytest

from infra.kubeconfig import KubeConfigError, context_entries

CONFIG = {
    "current-context": "a",
    "contexts": [{"name": "a", "context": {"cluster": "c1", "user": "u1"}},
                 {"name": "b", "context": {"cluster": "c2"}},
                 {"name": "broken", "context": {"cluster": "missing"}}],
    "clusters": [{"name": "c1", "cluster": {"server": "https://one"}},
                 {"name": "c2", "cluster": {"server": "https://two"}}],
    "users": [{"name": "u1", "user": {"token": "t"}}],
}


@pytest.mark.parametrize(("context", "server", "user"), [
    (None, "https://one", {"token": "t"}),
    ("b", "https://two", {}),
])
def test_context_entries(context: str | None, server: str, user: dict[str, str]) -> None:
    cluster, found_user = context_entries(CONFIG, context, "test")
    assert cluster["server"] == server
    assert found_user == user


@pytest.mark.parametrize("context", ["broken", "nowhere"])
def test_an_unusable_context_is_refused(context: str) -> None:
    with pytest.raises(KubeConfigError, match=f"has no usable context '{context}'"):
        context_entries(CONFIG, context, "test")

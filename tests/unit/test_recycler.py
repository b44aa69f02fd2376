"""The volume recycler picks only released pool volumes and empties only pool folders."""

from pathlib import Path

from localenv.recycler import empty_folder, released_pool_volumes


def _pv(name: str, phase: str, pool: bool = True) -> dict:
    labels = {"atlas.dev/pv-pool": "ReadWriteMany"} if pool else {}
    return {"metadata": {"name": name, "labels": labels}, "status": {"phase": phase}}


def test_only_released_pool_volumes():
    volumes = [_pv("a", "Released"), _pv("b", "Bound"), _pv("c", "Available"), _pv("d", "Released", pool=False)]
    assert [v["metadata"]["name"] for v in released_pool_volumes(volumes)] == ["a"]


def test_empty_folder_stays_inside_the_pool(tmp_path: Path):
    pool = tmp_path / "volumes"
    inside = pool / "atlas-rwx-00"
    (inside / "sub").mkdir(parents=True)
    (inside / "sub" / "f").write_text("x")
    (inside / "g").write_text("y")
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "keep").write_text("z")
    empty_folder(inside, pool)
    empty_folder(outside, pool)
    assert inside.is_dir() and list(inside.iterdir()) == []
    assert (outside / "keep").exists()

"""The `local` backend's model is assembled only when its parts match the recorded size and
sha256. (Its planning quality is measured by `carryon bench personalization`, not tested:
llama-cpp-python is an opt-in install.)"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from carryon_common.core.errors import ConfigError
from carryon_common.core.local_models import SplitModel, assemble


def fake_parts(root: Path, monkeypatch: pytest.MonkeyPatch, chunks: list[bytes]) -> tuple[str, ...]:
    names = []
    for index, chunk in enumerate(chunks, start=1):
        package = root / f"fake_model_part{index}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "data" / f"part{index:02d}.bin").write_bytes(chunk)
        names.append(package.name)
    monkeypatch.syspath_prepend(str(root))
    return tuple(names)


def test_parts_are_joined_in_order_and_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parts = fake_parts(tmp_path / "site", monkeypatch, [b"GGUF", b"-one", b"-two"])
    good = SplitModel("m.gguf", parts, size=12, sha256=hashlib.sha256(b"GGUF-one-two").hexdigest())
    assert assemble(good, tmp_path / "models").read_bytes() == b"GGUF-one-two"
    tampered = SplitModel("n.gguf", parts, size=12, sha256="0" * 64)
    with pytest.raises(ConfigError, match="a changed repack is refused"):
        assemble(tampered, tmp_path / "models")
    assert not (tmp_path / "models" / "n.gguf").exists()
    with pytest.raises(ConfigError, match="model part no_such_part is not installed"):
        assemble(SplitModel("x.gguf", ("no_such_part",), 1, "0" * 64), tmp_path / "models")

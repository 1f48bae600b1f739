"""A local text file as TorchTitan's training (or validation) data.

TorchTitan's dataloaders are ``Configurable`` components; ``TextFileDataLoader`` is one. The
file is split once at a line boundary: the first ``1 - validation_fraction`` of its
characters are the ``train`` split, the rest the ``validation`` split, so the held-out text
is never trained on. A split is tokenized as one document (BOS ... EOS) and cut into
consecutive, non-overlapping samples of ``seq_len + 1`` tokens (inputs and the next-token
labels); sample ``i`` goes to data-parallel rank ``i % dp_world_size``. Positions restart
at 0 in every sample, as in TorchTitan's own text datasets.

The dataset is ``Stateful`` (sample index and epoch), so TorchTitan's checkpoints resume the
data stream exactly; an infinite loader starts the next epoch with the samples reshuffled
by a seed derived from the epoch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch.distributed.checkpoint.stateful import Stateful
from torch.utils.data import IterableDataset
from torchtitan.components.dataloader import ParallelAwareDataloader
from torchtitan.components.tokenizer import BaseTokenizer


def default_corpus() -> str:
    """The corpus shipped with the project (examples/data/tinyshakespeare.txt)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    return os.path.join(root, "examples", "data", "tinyshakespeare.txt")


def read_split(path: str, split: str, validation_fraction: float) -> str:
    if not 0.0 < validation_fraction < 1.0:
        raise ValueError(f"TextFileDataLoader: validation_fraction must be in (0, 1), got "
                         f"{validation_fraction}")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise FileNotFoundError(f"TextFileDataLoader: cannot read the corpus {path}: {e}; "
                                "set --dataloader.dataset_path to a UTF-8 text file") from None
    # The validation split starts at the beginning of the line holding the cut point.
    cut = text.rfind("\n", 0, int(len(text) * (1.0 - validation_fraction))) + 1
    part = text[:cut] if split == "train" else text[cut:]
    if not part.strip():
        raise ValueError(f"TextFileDataLoader: the {split} split of {path} is empty "
                         f"(validation_fraction={validation_fraction})")
    return part


class TextFileDataset(IterableDataset, Stateful):
    def __init__(self, *, path: str, split: str, validation_fraction: float,
                 tokenizer: BaseTokenizer, seq_len: int, dp_rank: int, dp_world_size: int,
                 infinite: bool) -> None:
        if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
            raise ValueError(f"TextFileDataLoader: seq_len must be a positive number of "
                             f"tokens, got {seq_len!r}; set --training.seq_len")
        tokens = tokenizer.encode(read_split(path, split, validation_fraction), add_bos=True,
                                  add_eos=True)
        num_samples = (len(tokens) - 1) // seq_len
        mine = list(range(dp_rank, num_samples, dp_world_size))
        if not mine:
            raise ValueError(
                f"TextFileDataLoader: the {split} split of {path} has {len(tokens)} tokens, "
                f"{num_samples} samples of seq_len {seq_len}: none for data-parallel rank "
                f"{dp_rank} of {dp_world_size}; use a shorter seq_len or a larger corpus")
        self._tokens = torch.tensor(tokens, dtype=torch.long)
        self._samples = mine
        self.seq_len = seq_len
        self.infinite = infinite
        self._sample_idx = 0
        self._epoch = 0

    def __len__(self) -> int:
        return len(self._samples)

    def _order(self) -> list[int]:
        if self._epoch == 0:
            return self._samples
        perm = torch.randperm(len(self._samples),
                              generator=torch.Generator().manual_seed(1000 + self._epoch))
        return [self._samples[i] for i in perm.tolist()]

    def __iter__(self):
        positions = torch.arange(self.seq_len, dtype=torch.long)
        while True:
            order = self._order()
            while self._sample_idx < len(order):
                start = order[self._sample_idx] * self.seq_len
                window = self._tokens[start:start + self.seq_len + 1]
                self._sample_idx += 1
                yield {"input": window[:-1], "positions": positions}, window[1:]
            if not self.infinite:
                return
            self._sample_idx = 0
            self._epoch += 1

    def state_dict(self) -> dict[str, Any]:
        return {"sample_idx": self._sample_idx, "epoch": self._epoch}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._sample_idx = int(state_dict["sample_idx"])
        self._epoch = int(state_dict["epoch"])


class TextFileDataLoader(ParallelAwareDataloader):
    @dataclass(kw_only=True, slots=True)
    class Config(ParallelAwareDataloader.Config):
        dataset: str = "text_file"
        """Name shown in logs (the file is ``dataset_path``)."""

        split: Literal["train", "validation"] = "train"
        validation_fraction: float = 0.1
        """Share of the file (its end) held out as the validation split."""

        infinite: bool = True
        """Loop over the split (reshuffled each epoch); validation uses one pass."""

    def __init__(self, config: Config, *, dp_world_size: int, dp_rank: int,
                 tokenizer: BaseTokenizer, seq_len: int, local_batch_size: int,
                 snapshot_every_n_steps: int | None = 1, **kwargs) -> None:
        dataset = TextFileDataset(
            path=config.dataset_path or default_corpus(), split=config.split,
            validation_fraction=config.validation_fraction, tokenizer=tokenizer,
            seq_len=seq_len, dp_rank=dp_rank, dp_world_size=dp_world_size,
            infinite=config.infinite)
        kwargs = {"num_workers": config.num_workers,
                  "persistent_workers": config.persistent_workers,
                  "pin_memory": config.pin_memory, "prefetch_factor": config.prefetch_factor,
                  "snapshot_every_n_steps": snapshot_every_n_steps,
                  "batch_size": local_batch_size}
        super().__init__(dataset, dp_rank=dp_rank, dp_world_size=dp_world_size, **kwargs)

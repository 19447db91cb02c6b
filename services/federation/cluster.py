"""Where a party's training ranks meet: the worker placement a role hands a plan that trains on several ranks."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cluster:
    """Where a party's training ranks meet (torch.distributed TCP rendezvous) and how long any wait may last."""

    workers: int = 1
    master_addr: str = "127.0.0.1"
    master_port: int = 0  # 0: a free port (every rank spawned here); fixed when workers run elsewhere
    local_workers: int | None = None  # ranks 1..local_workers spawned here (None: all W − 1)
    timeout_s: float = 600.0
    idle_s: float = 900.0  # a run with no step this long releases its workers (its next step starts them again)

    @property
    def spawned(self) -> int:
        """Ranks this process spawns."""
        return self.workers - 1 if self.local_workers is None else min(self.local_workers, self.workers - 1)

"""rankgate's CI pipeline as a Dagger module: the stages of rankgate.pipeline in
containers (lint, test-cpu, test-gpu, test-hpc, bench, build-container) and the release
gate that publishes an image by digest only when every gate passed."""

from rankgate_ci.main import RankgateCi

__all__ = ["RankgateCi"]

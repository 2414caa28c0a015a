"""The operator tests' fixtures: the Kubernetes API emulator (tests/support/kube.py)."""

from tests.support.kube import kube

__all__ = ["kube"]

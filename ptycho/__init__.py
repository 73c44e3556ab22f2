"""ptycho: a tracked study of XLA compilation for physics-informed ptychography.

Importing the package is cheap on purpose: TensorFlow, MLflow and matplotlib are
imported inside the functions that use them, so ``python -m ptycho --help`` and
configuration errors answer immediately.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]

"""ptycho: a tracked study of XLA compilation for physics-informed ptychography.

Importing the package is cheap on purpose: TensorFlow, MLflow and matplotlib are
imported inside the functions that use them, so ``python -m ptycho --help`` and
configuration errors answer immediately.

Layers, lowest first (a module imports its own layer and those below; a test checks):
``errors``, ``config``, ``runtime``, ``artifacts`` (the foundation) < ``physics`` <
``data`` < ``nets`` | ``analysis`` < ``study``; ``tracking`` sits on the foundation and
serves the study; ``cli`` is the entry point. See docs/architecture.md.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]

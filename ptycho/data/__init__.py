"""Datasets: the HDF5 file (``dataset``), made by simulation (``simulate``) or imported
from NPZ and CXI 1.6 (``npz``, ``cxi``). Imports the physics and the foundation only."""

#: A study's two datasets, in order: the one networks train on, the one they are scored on.
SPLITS = ("train", "test")

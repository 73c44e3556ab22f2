"""Conventional (iterative) reconstruction: the data's ceiling beside the networks.

Built on the physics layer's TensorFlow forward model and Poisson likelihood (the same
functions the PINN trains through) and compiled under the study's XLA modes
(:mod:`ptycho.nets.xla`, the one place the modes are defined). May import the core,
``physics``, ``data`` and ``nets.xla``; nothing above.
"""

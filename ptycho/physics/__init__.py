"""Pure NumPy physics: objects, probes, scans, translation and the forward model.

Conventions (see docs/architecture.md and ``ptycho.physics.translate``):

* Coordinates are ``[x, y]`` = ``[column, row]`` in object pixels.
* The centre pixel of an array of side ``M`` is index ``M // 2``.
* A patch at scan position ``p = [x, y]`` covers object rows ``y - N//2 .. y + N - N//2 - 1``
  and columns ``x - N//2 .. x + N - N//2 - 1`` (the patch centre sits on ``p``).
* ``translate(img, t)`` moves content by ``+t``: ``out(q) = in(q - t)``.
"""

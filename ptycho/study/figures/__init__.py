"""The validation report's figures, split by concern.

* :mod:`~ptycho.study.figures.style`: the one style (palette, colour maps, rcParams) and
  the figure life cycle (:func:`~ptycho.study.figures.style.new_figure`,
  :func:`~ptycho.study.figures.style.to_png`, :func:`~ptycho.study.figures.style.save_png`);
* :mod:`~ptycho.study.figures.inputs`: the JSON number readers the drawing modules
  share (what they draw is read by :class:`~ptycho.study.results.StudyResults`);
* one module per kind of figure, each a pure function of arrays and dicts returning a
  new Matplotlib figure: :mod:`~ptycho.study.figures.images` (reconstructions, errors),
  :mod:`~ptycho.study.figures.curves` (losses, FRC), :mod:`~ptycho.study.figures.timing`
  (the benchmark), :mod:`~ptycho.study.figures.quality` (quality against training time).

Importing any of them imports no matplotlib: it is imported when a figure is drawn.
"""

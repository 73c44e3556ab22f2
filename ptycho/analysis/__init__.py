"""Reconstructions judged: stitching patches into objects (``stitch``) and the image
metrics (``metrics``). Never imports the networks, the study or tracking."""

"""The networks (``models``), their inputs (``inputs``), one training loop for both
(``train``, with the model and its compiled steps in ``trainer`` and what a training
writes in ``state``), inference (``infer``) and the XLA modes that compile them, each
guarded against retracing (``xla``). Never imports the study."""

"""The networks (``models``), one training loop for both (``train``), inference
(``infer``) and the XLA modes that compile them (``xla``). Never imports the study."""

"""The XLA question asked of everything below: the workflow's config (``workflow``),
arms (``arms``), the pipeline's jobs (``jobs``), the checklist (``checks``), the
benchmark (``bench``), cost growth (``scaling``), figures and the report."""

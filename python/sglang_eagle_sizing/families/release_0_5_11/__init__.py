"""SGLang 0.5.9-0.5.11, before upstream's refactor: every worker, CUDA-graph runner and PD
buffer sizes the EAGLE hidden states inline. The patch adds the contract (classmethods on
``EagleDraftInput`` / ``EagleDraftExtendInput``, one parser of the drafter's config) and routes
every sizing site (``sites.SITES``) through it."""

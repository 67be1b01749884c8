"""Scenario files: the model (``model``), its validation with located errors (``schema``,
``yaml_source``), the ``slo`` block, arrival processes, prompt text and the capacity
estimate. Imports ``common`` only."""

"""Built-in experiments: each module defines ``steps() -> list[Step]`` and runs as
``glasslab run <module name>``. They wire the parts together; the logic lives in the parts."""

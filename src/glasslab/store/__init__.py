"""The lab on object storage: a lab root that is a URL (``s3://bucket/prefix``) through fsspec.

``url.py`` opens such a root (credentials from the environment only) and says in one line what fails;
``lease.py`` is the step lock between nodes that share no disk (conditional creates, leases,
heartbeats); ``mirror.py`` keeps a node's local working copy of the lab and the root in step (pull at
the start, push at every checkpoint and when a step ends). See ``docs/formats.md``.
"""

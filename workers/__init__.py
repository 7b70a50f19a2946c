"""What RQ workers run: agent phases, tool jobs and the artifact GC."""

__all__: list[str] = []

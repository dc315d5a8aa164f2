"""The consumer: :class:`Consumer` (:mod:`.consumer`, kafka-python's API), its fetcher
(:mod:`.fetcher`) and its group membership (:mod:`.group`)."""

from .consumer import Consumer

__all__ = ["Consumer"]

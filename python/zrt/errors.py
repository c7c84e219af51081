"""The exceptions ZRT's C++ errors become, one per C++ type (core/error.h), with the C++
message unchanged: it names the config path and key, the rank, the file and the offset."""


class Error(RuntimeError):
    """Base of every error ZRT raises."""


class InvalidArgument(Error, ValueError):
    """Something passed in cannot work: a bad config value (ConfigError in C++), size or flag."""


class IoError(Error, OSError):
    """An I/O operation failed; the message names the file, offset, length and errno text."""


class PeerError(Error):
    """Another rank disagreed or was lost (died, or left on an error of its own)."""


class TimeoutError(Error, TimeoutError):  # noqa: A001 (also the builtin, so `except TimeoutError` works)
    """A wait gave up; the message says what it waited for."""


class OutOfMemory(Error, MemoryError):
    """A device could not satisfy an allocation; the message holds the memory ledger."""


class ExternalError(Error):
    """An external library (MPI, CUDA, NCCL, io_uring) returned an error."""

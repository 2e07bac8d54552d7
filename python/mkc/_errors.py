"""mkc.Error: what every failure of the runtime or the compiler raises."""


class Error(RuntimeError):
    """A failed mkc call.

    `status` is the name of its mkc_status ("MKC_ERROR_COMPILE", "MKC_ERROR_NO_DEVICE", ...; see
    mkc.h) and `message` the library's message, which str() gives. Calls on a closed runtime or
    op fail with MKC_ERROR_INVALID_ARGUMENT, as the C ABI does for a null handle; a libmkc.so
    that cannot be loaded with MKC_ERROR_INTERNAL.
    """

    __module__ = "mkc"  # as tracebacks and reprs should name it

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message

    def __reduce__(self):  # pickled with both fields: __init__ takes two
        return type(self), (self.status, self.message)

    def __repr__(self):
        return f"mkc.Error({self.status!r}, {self.message!r})"


def closed(what):
    """The error of a call on a closed runtime or op; `what` names it."""
    return Error("MKC_ERROR_INVALID_ARGUMENT", f"{what} is closed")

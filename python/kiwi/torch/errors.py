"""Errors of the PyTorch front end: one line each, naming the model construct at fault."""
from kiwi.core import BadInputError, InfeasibleError


class CaptureError(BadInputError):
    """The model cannot be captured as a kiwi graph."""


class TraceError(CaptureError):
    """torch.fx could not trace the model (data-dependent control flow, unsupported Python...)."""


class UnsupportedOpError(CaptureError):
    """An operator of the model has no kiwi IR mapping."""


class PlanError(BadInputError):
    """A plan does not match the captured model or cannot be applied: malformed, a missing or wrong field,
    a world size or a model it does not fit."""


__all__ = ["CaptureError", "TraceError", "UnsupportedOpError", "PlanError", "InfeasibleError"]

"""model/: the matrix multiplies in a saved model, as GemmProblems with counts."""

from .classify import (FoundGemm, check_model, find_gemms, parse_hints, parse_input_shape,
                       plan_flops_share)

__all__ = ["FoundGemm", "parse_input_shape", "parse_hints", "find_gemms", "check_model",
           "plan_flops_share"]

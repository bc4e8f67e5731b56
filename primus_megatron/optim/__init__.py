"""Post-validation optimizer step (no global barrier before the step, exact rollback)."""
from .post_validation import PostValidationOptimizer, inject_nonfinite_gradient

__all__ = ["PostValidationOptimizer", "inject_nonfinite_gradient"]

"""Templates: the kernel families autotune can choose from, by uid."""

# imported for their registrations: each module registers its templates
from . import (  # noqa: F401
    aten, aten_aligned, aten_scaled, triton_gemv, triton_mm, triton_mm_padded, triton_persistent_tma, triton_scaled_mm,
    triton_scaled_gemv, triton_scaled_mm_block, triton_scaled_mm_splitk, triton_splitk, triton_swap_ab,
)
from .base import Operands, Runnable, Template
from .registry import (
    all_templates,
    check_template_names,
    get_template,
    register_template,
    registered_template,
    templates_for,
    unknown_template_names,
    unregister_template,
    vendor_uids,
)

__all__ = [
    "Operands", "Runnable", "Template", "all_templates", "check_template_names", "get_template",
    "register_template", "registered_template", "templates_for", "unknown_template_names", "unregister_template",
    "vendor_uids",
]

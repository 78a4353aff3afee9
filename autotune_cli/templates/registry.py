"""The template registry: uid -> Template. A uid is "<backend>::<name>"."""

from __future__ import annotations

from ..errors import UserError
from ..problem import GemmProblem
from .base import Template

_TEMPLATES: dict[str, Template] = {}


def register_template(template: Template, *, replace: bool = False) -> Template:
    uid = template.uid
    if "::" not in uid:
        raise ValueError(f"template uid {uid!r} must look like '<backend>::<name>'")
    if uid in _TEMPLATES and not replace:
        raise ValueError(f"template uid {uid!r} is already registered")
    _TEMPLATES[uid] = template
    return template


def unregister_template(uid: str) -> None:
    _TEMPLATES.pop(uid, None)


def get_template(uid: str) -> Template:
    try:
        return _TEMPLATES[uid]
    except KeyError:
        known = ", ".join(sorted(_TEMPLATES)) or "(none)"
        raise UserError(f"unknown template {uid!r}; known templates: {known}") from None


def registered_template(uid: str) -> Template | None:
    """The template registered under `uid`, or None (a plugin's not loaded, say)."""
    return _TEMPLATES.get(uid)


def all_templates() -> list[Template]:
    return [_TEMPLATES[uid] for uid in sorted(_TEMPLATES)]


def vendor_uids() -> frozenset[str]:
    """The uids of the registered plain vendor-library templates (`Template.vendor`)."""
    return frozenset(uid for uid, template in _TEMPLATES.items() if template.vendor)


def unknown_template_names(only: tuple[str, ...] | None) -> list[str]:
    """The names in `only` that are neither a registered uid nor a backend."""
    backends = {t.backend for t in _TEMPLATES.values()}
    return [name for name in only or () if name not in _TEMPLATES and name not in backends]


def check_template_names(only: tuple[str, ...] | None) -> None:
    """Every name in `only` is a registered uid or backend, else a UserError listing the uids."""
    for name in unknown_template_names(only)[:1]:
        get_template(name)  # raises with the list of known uids


def templates_for(problem: GemmProblem, only: tuple[str, ...] | None = None) -> list[Template]:
    """Templates that serve the problem's op, optionally limited to `only` (uids or backends)."""
    check_template_names(only)
    chosen = []
    for template in all_templates():
        if only and template.uid not in only and template.backend not in only:
            continue
        if template.supports(problem):
            chosen.append(template)
    return chosen

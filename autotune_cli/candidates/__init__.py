"""candidates/: a problem's kernel candidates before anything compiles. choices.py asks each
template's heuristic for configs, wraps them as KernelTemplateChoice objects and prunes them
in ordered stages, each saying why it removed a choice.

Sits above templates/ and heuristics/ (which it reads) and below runner/ and search/ (which
build and time what it lists).
"""

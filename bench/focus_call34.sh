#!/usr/bin/env bash
# A device call on the 2-GPU host (carry .whl), 2026-11-30 (session 10), after the review: the
# same steps as focus_call33.sh (the GPU tests, the two-GPU comparison at 8 problems twice and
# at 16, lending on) on the reviewed code, its JSON files labelled final.
#   bash bench/focus_call34.sh
LABEL=final exec bash "$(dirname "$0")/focus_call33.sh"

"""store/: the persistent cache and what an entry records. results.py is a candidate's
outcome and the pick among them; fingerprint.py what must match for a winner to be reused;
phases.py where a tune's seconds went; entry.py the entry and its key; cache_document.py the
file's JSON and schema; cache.py the file itself (lock, merge, atomic replace).

Imports the package root and hardware/ only; plain Python (no torch, no triton), so a cache
hit is answered without either.
"""
